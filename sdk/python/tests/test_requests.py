"""_requests: the agent's requests, the acks and the heartbeat, without
the Migrator."""

import os
import unittest

from test_migrator import NONCE, Base

from trainguard import _protocol as proto


class RequestsTest(Base):
    def test_a_request_is_queued_once_and_acknowledged_with_its_nonce(self):
        _, _, _, dirs, reqs = self.parts()
        self.write_request(3)
        reqs.scan()
        reqs.scan()
        self.assertEqual({"pod-0": (3, NONCE)}, reqs.pending)
        taken = reqs.take()
        reqs.scan()
        self.assertEqual({}, reqs.pending, "taken requests are handled: a scan during the save adds none")
        reqs.ack(taken, 12, "trainguard-ckpt-00000001", 99, "")
        ack = self.read_ack()
        self.assertEqual((3, NONCE, "ok", 12, 99), (ack["generation"], ack["nonce"], ack["status"], ack["step"],
                                                   ack["bytes"]))
        self.assertEqual((3, NONCE), reqs.own_ack())
        reqs.heartbeat("training", 12, 1.5)
        hb = proto.read_json(os.path.join(self.signal, proto.HEARTBEAT_FILE))
        self.assertEqual((3, 12, 1.5), (hb["generation"], hb["step"], hb["started"]))

    def test_a_bad_request_of_one_pod_does_not_hide_another_s(self):
        _, _, _, dirs, reqs = self.parts(WORLD_SIZE="2")
        bad = os.path.join(self.dir, ".trainguard", "a-pod")
        os.makedirs(bad)
        proto.write_json_atomic(os.path.join(bad, proto.REQUEST_FILE), {"generation": 1, "deadline": "soon"})
        self.write_request(2)
        with self.assertLogs("trainguard", "WARNING"):
            reqs.scan()
        self.assertEqual({"pod-0": (2, NONCE)}, reqs.pending)
        self.assertEqual(["a-pod", "pod-0"], [n for n, _ in dirs.all()])

    def test_an_ack_without_its_request_is_not_this_pods(self):
        _, _, _, _, reqs = self.parts()
        os.makedirs(self.signal)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": 9, "nonce": NONCE, "status": "ok"})
        self.assertEqual((0, ""), reqs.own_ack())

    def test_a_zombies_request_does_not_stop_its_replacement(self):
        # The pod's old incarnation (its node back from a partition) runs its
        # preStop into the signal dir of the pod name, which its replacement
        # shares: rank 0 takes the checkpoint, only the incarnation named stops.
        for uid, stops in (("uid-old", False), ("uid-new", True), ("", True)):
            with self.subTest(request_uid=uid):
                _, _, _, _, reqs = self.parts(TRAINGUARD_POD_UID="uid-new")
                self.write_request(3, pod_uid=uid)
                reqs.scan()
                reqs.ack(reqs.take(), 12, "trainguard-ckpt-00000001", 99, "")
                self.assertEqual("ok", self.read_ack()["status"], "the checkpoint is taken either way")
                if stops:
                    self.assertEqual((3, NONCE), reqs.own_ack())
                    continue
                with self.assertLogs("trainguard", "WARNING") as logs:
                    self.assertEqual((0, ""), reqs.own_ack())
                self.assertIn("another incarnation's of this pod (uid 'uid-old', this one is 'uid-new')",
                              logs.output[0])

    def test_a_stop_requested_for_this_incarnation_answered_or_not(self):
        _, _, _, _, reqs = self.parts(TRAINGUARD_POD_UID="uid-new")
        self.assertFalse(reqs.own_stop_requested(), "no request")
        for uid, stopping in (("uid-old", False), ("uid-new", True), ("", True)):
            with self.subTest(request_uid=uid):
                _, _, _, _, reqs = self.parts(TRAINGUARD_POD_UID="uid-new")
                self.write_request(3, pod_uid=uid)
                self.assertEqual(stopping, reqs.own_stop_requested())

    def test_a_malformed_pod_uid_is_refused(self):
        for uid in (7, "x" * 129):
            with self.subTest(uid=uid), self.assertRaisesRegex(ValueError, "pod_uid"):
                proto.parse_request({"generation": 1, "nonce": NONCE, "deadline": 1.0, "pod_uid": uid})


if __name__ == "__main__":
    unittest.main()
