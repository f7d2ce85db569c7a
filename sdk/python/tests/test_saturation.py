"""Generations at their largest value, 2^53-1 (docs/checkpoint-protocol.md).

A request's generation saturates there: the agent's next request in a pod
whose signal dir holds that generation (a planted ack, heartbeat or
request) is the same generation again, told apart by its nonce only, so
rank 0 must answer each (generation, nonce) once, not each pod once."""

import os
import time
import unittest

from test_migrator import Base, Counter

from trainguard import _protocol as proto
from trainguard import _storage as storage

MAX = proto.MAX_GENERATION
FIRST, SECOND = "a" * 32, "b" * 32


class SaturatedRequests(Base):
    def ack_of(self, m, nonce, signal=None, limit=5.0):
        """Steps until the ack in signal (this pod's by default) answers nonce; None if it never does."""
        signal = signal or self.signal
        end = time.time() + limit
        while time.time() < end:
            with m.step():
                pass
            ack = proto.read_json(os.path.join(signal, proto.ACK_FILE))
            if ack and ack.get("nonce") == nonce:
                return ack
            time.sleep(0.02)
        return None

    def test_two_requests_of_one_pod_at_the_saturated_generation_are_both_answered(self):
        for pod in ("pod-0", "worker-1"):  # this pod's own signal dir, and another pod's
            with self.subTest(pod=pod):
                signal = os.path.join(os.path.dirname(self.signal), pod)
                m = self.migrator(WORLD_SIZE="2")
                m.register("c", Counter())
                m.listening()
                self.write_request(MAX, nonce=FIRST, signal=signal)
                first = self.ack_of(m, FIRST, signal)
                self.assertIsNotNone(first, "the first request was never answered")
                self.write_request(MAX, nonce=SECOND, signal=signal)  # what the agent writes next: 2^53-1 again
                second = self.ack_of(m, SECOND, signal)
                self.assertIsNotNone(second, "a second request of the pod at generation 2^53-1 was never answered")
                self.assertEqual((MAX, "ok", MAX, "ok"),
                                 (first["generation"], first["status"], second["generation"], second["status"]))
                self.assertNotEqual(first["checkpoint"], second["checkpoint"], "one save per request")
                m.close()

    def test_the_same_request_seen_again_is_answered_once(self):
        m = self.migrator()
        m.register("c", Counter())
        m.listening()
        self.write_request(MAX, nonce=FIRST)
        first = self.ack_of(m, FIRST)
        self.assertIsNotNone(first)
        self.write_request(MAX, nonce=FIRST)  # the same (generation, nonce), the file written again
        self.idle_steps(m)
        self.assertEqual(first, self.read_ack(), "the same request was answered twice")
        self.assertEqual(1, len(storage.list_checkpoints(self.dir)), "one request, one save")

    def test_a_restarted_trainer_does_not_redo_the_acknowledged_saturated_request(self):
        m = self.migrator()
        m.register("c", Counter())
        m.listening()
        self.write_request(MAX, nonce=FIRST)
        first = self.ack_of(m, FIRST)
        m.close()
        again = self.migrator()
        again.register("c", Counter())
        again.listening()
        self.idle_steps(again)
        self.assertEqual(first, self.read_ack())
        self.assertEqual(1, len(storage.list_checkpoints(self.dir)))
        self.write_request(MAX, nonce=SECOND)
        self.assertIsNotNone(self.ack_of(again, SECOND), "the pod's next request was never answered")

    def test_every_termination_at_the_saturated_generation_stops_training(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="5s")
        m.register("c", Counter())
        m.listening()
        seen = []
        m.termination_hook = seen.append  # returns: training goes on, as after a manual prestop
        for nonce in (FIRST, SECOND):
            self.write_request(MAX, nonce=nonce)
            proto.write_json_atomic(os.path.join(self.signal, proto.DONE_FILE), {
                "generation": MAX, "nonce": nonce, "outcome": "saved", "exit_code": 0, "done_at": time.time()})
            self.assertIsNotNone(self.ack_of(m, nonce), "request %s was never answered" % nonce[:1])
        self.assertEqual([(MAX, "saved", "done")] * 2, [(i["generation"], i["outcome"], i["why"]) for i in seen],
                         "the second termination checkpoint did not end training")

    def test_another_rank_stops_at_each_acknowledged_request_of_its_pod(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="200ms", RANK="1",
                          WORLD_SIZE="2", LOCAL_RANK="1")
        m.register("c", Counter())
        os.makedirs(self.signal, exist_ok=True)
        self.write_request(MAX, nonce=FIRST)  # answered before this process started: not its termination
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": MAX, "nonce": FIRST, "status": "ok"})
        m.listening()
        self.idle_steps(m, 2)
        self.assertIsNone(m._termination)
        self.write_request(MAX, nonce=SECOND)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": MAX, "nonce": SECOND, "status": "ok"})
        with self.assertRaises(SystemExit) as cm:
            self.idle_steps(m)
        self.assertEqual(143, cm.exception.code)


if __name__ == "__main__":
    unittest.main()
