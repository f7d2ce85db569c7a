"""Generations at their largest value, 2^53-1 (docs/checkpoint-protocol.md).

A request's generation saturates there: the agent's next request in a pod
whose signal dir holds that generation (a planted ack, heartbeat or
request) is the same generation again, told apart by its nonce only, so
rank 0 must answer each (generation, nonce) once, not each pod once.

A fence generation cannot go past it: a marker there (only a writer of
the volume puts one) stops every later incarnation's claim, and the way
out is the documented reset ("Resetting the generations"), after which
the next incarnation trains and every earlier one is still refused."""

import json
import os
import subprocess
import sys
import time
import unittest

from test_fence import TRAINER
from test_migrator import SDK, Base, Counter

from trainguard import Fenced
from trainguard import _fence as fence
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
        self.assertIsNone(m._stopping.termination)
        self.write_request(MAX, nonce=SECOND)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": MAX, "nonce": SECOND, "status": "ok"})
        with self.assertRaises(SystemExit) as cm:
            self.idle_steps(m)
        self.assertEqual(143, cm.exception.code)


RESET = [sys.executable, "-m", "trainguard", "reset-generations"]  # as docs/checkpoint-protocol.md says


class SaturatedFence(Base):
    def reset(self, *args, **env):
        """The documented way out, run as documented: a separate process."""
        out = subprocess.run(RESET + list(args), env=dict(os.environ, PYTHONPATH=SDK, **env), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual(0, out.returncode, out.stdout)
        return out.stdout

    def trainer(self, n):
        m = self.migrator().listening()
        m.register("c", Counter(n))
        return m

    def saturated(self):
        """A job whose newest incarnation holds 2^53-1 (someone planted 2^53-2
        and the job claimed the last number) and whose older one is alive
        too: both may be zombies of a partitioned node, both commit."""
        old = self.trainer(1)
        first = old.save_ckpt()
        os.mkdir(os.path.join(self.dir, fence.marker(MAX - 1)))
        top = self.trainer(2)
        self.assertEqual(MAX, top.generation)
        last = top.save_ckpt()
        return old, top, first, last

    def test_a_claim_past_the_largest_generation_names_the_way_out(self):
        os.mkdir(os.path.join(self.dir, fence.marker(MAX)))
        for _ in range(2):  # a restart does not recover by itself
            with self.assertRaises(RuntimeError) as cm:
                self.migrator().listening()
            msg = str(cm.exception)
            self.assertIn("python3 -m trainguard reset-generations %s" % self.dir, msg)
            self.assertIn(fence.marker(MAX), msg)
            self.assertIn("Resetting the generations", msg)

    def test_the_documented_reset_lets_the_next_incarnation_train_and_still_fences_every_earlier_one(self):
        old, top, first, last = self.saturated()
        with self.assertRaises(RuntimeError):
            self.migrator().listening()
        out = self.reset(self.dir)
        self.assertIn("reset the generations of %s" % self.dir, out)
        self.assertEqual([], fence.generations(self.dir), "every marker removed")

        new = self.migrator().listening()
        got = Counter()
        new.register("c", got)
        self.assertEqual(last, new.load_ckpt()["checkpoint"], "the new line resumes where the job was")
        self.assertEqual(2, got.n)
        self.assertEqual(1, new.generation, "the new line's first generation: the old one's number")
        got.n = 3
        own = new.save_ckpt()

        for stale in (old, top):  # generation 1 (the new line's number) and 2^53-1 (above every new one)
            with self.assertRaises(Fenced) as refused:
                stale.save_ckpt()
            self.assertIn("reset", str(refused.exception))
            self.assertIn("stale incarnation", str(refused.exception))
        self.assertEqual(own, storage.read_pointer(self.dir)["file"])
        self.assertEqual(own, storage.ranked(self.dir)[0])
        reader, mine = self.migrator(), Counter()
        reader.register("c", mine)
        self.assertEqual(own, reader.load_ckpt()["checkpoint"])
        self.assertEqual(3, mine.n)

        for _ in range(3):  # the new line's numbers pass the old ones': the old incarnations stay fenced
            self.trainer(4).save_ckpt()
        with self.assertRaises(Fenced):
            old.save_ckpt()
        storage.prune(self.dir, keep=2)
        self.assertNotIn(first, storage.list_checkpoints(self.dir), "the old line is pruned first")
        self.assertNotIn(last, storage.list_checkpoints(self.dir))

    def test_a_stale_save_never_removes_the_new_lines_temp_dir(self):
        old, top, _, _ = self.saturated()
        self.reset(self.dir)
        new = self.trainer(3)
        live = os.path.join(self.dir, ".%sg%08d.tmp-live" % (proto.CKPT_PREFIX, new.generation))
        os.makedirs(live)  # the new line's save in flight
        with self.assertRaises(Fenced):
            top.save_ckpt()  # generation 2^53-1: every new-line number is below it
        self.assertTrue(os.path.isdir(live), "the stale incarnation removed the new line's save in flight")

    def test_the_reset_removes_every_marker_and_temp_dir_and_nothing_else(self):
        self.saturated()
        os.makedirs(os.path.join(self.dir, ".%sg%08d.tmp-dead" % (proto.CKPT_PREFIX, MAX)))
        open(os.path.join(self.dir, fence.GEN_PREFIX + "9" * 30), "w").close()  # a file, beyond the largest
        os.makedirs(self.signal, exist_ok=True)
        keep = sorted(n for n in os.listdir(self.dir) if not n.startswith((fence.GEN_PREFIX, ".%s" % proto.CKPT_PREFIX)))
        self.reset(TRAINGUARD_CHECKPOINT_DIR=self.dir)  # the directory from the pod's environment
        self.assertEqual(keep + [fence.LINE_FILE], sorted(os.listdir(self.dir)))

    def test_a_claim_racing_the_reset_is_fenced_by_its_second_line(self):
        # An incarnation started against the instructions while the reset
        # ran: its marker was removed after it claimed, so a later
        # incarnation may take the same number; it must not commit.
        from trainguard import _reset as reset
        racer = {}
        real = fence.remove_markers

        def claim_then_remove(d):
            racer["m"] = self.trainer(5)  # claims in the reset's first line, before the removal
            return real(d)

        fence.remove_markers = claim_then_remove
        try:
            reset.reset_generations(self.dir)
        finally:
            fence.remove_markers = real
        later = self.trainer(6)
        self.assertEqual(racer["m"].generation, later.generation, "the same number, taken twice")
        later.save_ckpt()
        with self.assertRaises(Fenced):
            racer["m"].save_ckpt()

    def test_a_reset_within_a_stale_commits_check_refuses_the_commit(self):
        # The check reads the markers, then the line; the reset writes the
        # line, then removes the markers. Here the reset runs between the
        # two reads of the check before the rename of the incarnation that
        # holds 2^53-1 (no number fences it): the commit must not land.
        from trainguard import _reset as reset
        _, top, _, _ = self.saturated()
        before = storage.list_checkpoints(self.dir)
        real_check, real_markers, real_line = fence.check, fence._markers, fence.read_line
        calls, armed = [], []

        def check(*args):
            calls.append(args)
            if len(calls) == 2:  # the check before the rename
                armed.append(True)
            return real_check(*args)

        def first_read(real):
            def read(d):
                out = real(d)
                if armed:
                    armed.clear()
                    reset.reset_generations(self.dir)
                return out
            return read

        fence.check, fence._markers, fence.read_line = check, first_read(real_markers), first_read(real_line)
        try:
            with self.assertRaises(Fenced):
                top.save_ckpt()
        finally:
            fence.check, fence._markers, fence.read_line = real_check, real_markers, real_line
        self.assertEqual(2, len(calls), "refused by the check the reset ran within")
        self.assertEqual(before, storage.list_checkpoints(self.dir), "the stale commit landed")

    def test_lines_rank_newest_first_across_two_resets(self):
        for _ in range(5):
            old = self.trainer(1)
        old.save_ckpt()  # generation 5 of the first line
        self.reset(self.dir)
        self.trainer(2).save_ckpt()  # one commit: pruning keeps the first line's too
        self.assertEqual(2, len(storage.list_checkpoints(self.dir)))
        os.mkdir(os.path.join(self.dir, fence.marker(MAX)))
        self.reset(self.dir)
        got = Counter()
        reader = self.migrator()
        reader.register("c", got)
        reader.load_ckpt()
        self.assertEqual(2, got.n, "the first line's commit (generation 5) outranked the second line's (generation 1)")

    def test_a_line_file_trainguard_did_not_write_names_the_way_out(self):
        path = os.path.join(self.dir, "trainguard-line.json")
        for content in ("not json", json.dumps({"line": "../x"}), json.dumps({"line": "a" * 32, "previous": "b"}),
                        json.dumps({"line": "a" * 32 + "\n"}), None):
            with self.subTest(content=content):
                if content is None:  # a directory in its place
                    os.unlink(path)
                    os.makedirs(os.path.join(path, "x"))
                else:
                    with open(path, "w") as f:
                        f.write(content)
                with self.assertRaisesRegex(RuntimeError, "python3 -m trainguard reset-generations"):
                    self.migrator().listening()
        self.reset(self.dir)
        self.assertEqual(1, self.trainer(1).generation)

    def test_a_live_trainer_of_the_old_line_stops_at_its_first_commit_after_the_reset(self):
        # Real processes: the zombie holds 2^53-1, so no number can fence it.
        script = os.path.join(self.dir, "..", os.path.basename(self.dir) + "-train.py")
        with open(script, "w") as f:
            f.write(TRAINER % {"sdk": SDK})
        self.addCleanup(os.unlink, script)
        os.mkdir(os.path.join(self.dir, fence.marker(MAX - 1)))
        env = dict(os.environ, **self.env(TRAINGUARD_NAMESPACE="team", TRAINGUARD_CHECKPOINT_KEY="pytorchjob/j"))
        zombie = subprocess.Popen(["/usr/bin/python3", script], env=dict(env, STEPS="100000", PAUSE="0.05"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(zombie.kill)
        self.assertEqual("generation %d" % MAX, zombie.stdout.readline().strip())
        for _ in range(3):
            self.assertTrue(zombie.stdout.readline().startswith("committed"), "the zombie died early")
        blocked = subprocess.run(["/usr/bin/python3", script], env=dict(env, STEPS="5"), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertNotEqual(0, blocked.returncode)
        self.assertIn("python3 -m trainguard reset-generations", blocked.stdout)
        self.reset(self.dir)
        replacement = subprocess.run(["/usr/bin/python3", script], env=dict(env, STEPS="20"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(0, replacement.returncode, replacement.stdout)
        self.assertIn("generation 1\n", replacement.stdout)
        out, _ = zombie.communicate(timeout=60)
        self.assertEqual(75, zombie.returncode, "the zombie stops at its first refused commit: " + out[-2000:])
        self.assertIn("reset", out)
        resumed = int(replacement.stdout.split("resumed ")[1].split()[0])
        ptr = storage.read_pointer(self.dir)
        self.assertEqual((1, resumed + 20), (ptr["generation"], ptr["step"]), "the job's latest is the new line's")
        self.assertEqual(storage.ranked(self.dir)[0], ptr["file"])


if __name__ == "__main__":
    unittest.main()
