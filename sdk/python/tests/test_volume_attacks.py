"""A process that can write (or only read) a job's
checkpoint volume cannot turn it against the job's trainer. Each test names
the attack it replays; the ones involving a save run real processes with
Debian's torch 1.13 (/usr/bin/python3)."""

import json
import os
import stat
import subprocess
import tempfile
import textwrap
import time
import unittest

from test_fence import TRAINER
from test_migrator import SDK, Base, Counter

from trainguard import Fenced, Migrator
from trainguard import _fence as fence
from trainguard import _protocol as proto
from trainguard import _storage as storage

PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch

# A reader: an evaluation job or a debug pod on the same key that resumes
# the job's state (resume, load_ckpt); a read-only one may even listen.
READER = textwrap.dedent("""
    import sys
    sys.path.insert(0, %(sdk)r)
    import torch
    from trainguard import Migrator
    m = Migrator(%(args)s)
    model = torch.nn.Linear(4, 1)
    m.register("model", model)
    m.register("opt", torch.optim.SGD(model.parameters(), lr=0.01))
    if m._checkpoints.read_only:
        m.listening()  # does nothing
    print("resume", m.resume, flush=True)
    print("loaded", m.load_ckpt()["step"], flush=True)
""")


def tree(directory):
    """Every path under directory with its type, size and mode: what a reader must not change."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            out[os.path.relpath(path, directory)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mode, st.st_mtime_ns)
    return out


class Readers(Base):
    """Item 5: any reader of a checkpoint directory fenced the live trainer."""

    def start_trainer(self):
        script = os.path.join(self.dir, "..", os.path.basename(self.dir) + "-train.py")
        with open(script, "w") as f:
            f.write(TRAINER % {"sdk": SDK})
        self.addCleanup(os.unlink, script)
        env = dict(os.environ, **self.env(TRAINGUARD_NAMESPACE="team", TRAINGUARD_CHECKPOINT_KEY="key/j"))
        trainer = subprocess.Popen([PYTHON, script], env=dict(env, STEPS="100000", PAUSE="0.05"),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(trainer.kill)
        return trainer, env

    def wait_commits(self, trainer, n):
        seen = 0
        while seen < n:
            line = trainer.stdout.readline()
            self.assertTrue(line, "the trainer ended")
            self.assertNotIn("fenced", line)
            seen += line.startswith("committed")

    def run_reader(self, env, read_only):
        script = os.path.join(self.dir, "..", os.path.basename(self.dir) + "-read.py")
        with open(script, "w") as f:
            f.write(READER % {"sdk": SDK, "args": "read_only=True" if read_only else ""})
        self.addCleanup(os.unlink, script)
        # Another pod: its own name, and so its own signal dir.
        env = dict(env, TRAINGUARD_POD_NAME="debug", TRAINGUARD_SIGNAL_DIR=os.path.join(self.dir, ".trainguard", "debug"))
        out = subprocess.run([PYTHON, script], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(0, out.returncode, out.stderr)
        self.assertIn("resume True", out.stdout)
        return out

    def test_a_reader_that_loads_does_not_fence_the_live_trainer(self):
        trainer, env = self.start_trainer()
        self.wait_commits(trainer, 3)
        self.run_reader(env, read_only=False)
        self.wait_commits(trainer, 5)  # before the fix: "fenced 1 generation 2 ... started" and exit 75
        self.assertIsNone(trainer.poll(), "the trainer stopped after a reader loaded its checkpoint")
        ptr = storage.read_pointer(self.dir)
        self.assertEqual(1, ptr["generation"], "the trainer's line is still the job's latest")

    def test_a_read_only_reader_writes_nothing_on_the_volume(self):
        trainer, env = self.start_trainer()
        self.wait_commits(trainer, 2)
        trainer.kill()
        trainer.wait()
        before = tree(self.dir)
        self.run_reader(env, read_only=True)
        self.assertEqual(before, tree(self.dir), "a read-only reader changed the checkpoint directory")

    def test_a_read_only_migrator_refuses_to_save(self):
        m = Migrator(env=self.env(), read_only=True)
        m.register("c", Counter(1))
        with self.assertRaisesRegex(RuntimeError, "read-only"):
            m.save_ckpt()
        self.assertIs(m, m.read_only(), "read_only() chains like listening()")
        self.assertEqual([], os.listdir(self.dir))

    def test_a_trainer_that_never_listened_claims_at_its_first_save(self):
        m = self.migrator()
        m.register("c", Counter(1))
        self.assertFalse(m.resume)
        self.assertEqual([], fence.generations(self.dir), "a load claimed a generation")
        m.save_ckpt()
        self.assertEqual((1, [1]), (m.generation, fence.generations(self.dir)))


class Markers(Base):
    """Item 6: the fence trusted what is on the volume."""

    def test_a_file_named_like_the_next_marker_does_not_block_claims(self):
        open(os.path.join(self.dir, fence.marker(1)), "w").close()  # before: 1000 tries, then RuntimeError
        os.symlink("/", os.path.join(self.dir, fence.marker(2)))
        self.assertEqual(3, fence.claim(self.dir))

    def test_a_nine_digit_marker_still_fences(self):
        os.mkdir(os.path.join(self.dir, "trainguard-gen-99999999"))
        zombie = self.migrator().listening()
        zombie.register("c", Counter(1))
        zombie.save_ckpt()
        self.assertEqual(100000000, zombie.generation)
        replacement = self.migrator().listening()  # before: "could not claim a generation after 1000 tries"
        replacement.register("c", Counter(2))
        replacement.save_ckpt()
        self.assertEqual(100000001, replacement.generation)
        with self.assertRaises(Fenced):
            zombie.save_ckpt()

    def test_a_marker_beyond_the_largest_generation_is_refused_loudly(self):
        os.mkdir(os.path.join(self.dir, fence.GEN_PREFIX + "9" * 30))
        with self.assertRaisesRegex(RuntimeError, "beyond the largest generation"):
            fence.claim(self.dir)

    def test_a_forged_commit_generation_is_bounded_by_the_markers(self):
        m = self.migrator()
        m.register("c", Counter(1))
        m.save_ckpt()
        forged = storage.ckpt_name(50)
        os.rename(os.path.join(self.dir, m.save_ckpt()), os.path.join(self.dir, forged))
        path = os.path.join(self.dir, forged, storage.COMMIT_FILE)
        with open(path) as f:
            commit = json.load(f)
        commit["generation"] = 2 ** 40
        with open(path, "w") as f:
            json.dump(commit, f)
        later = self.migrator()
        later.register("c", Counter(3))
        own = later.save_ckpt()
        self.assertEqual(own, storage.ranked(self.dir)[0], "a forged generation outranked a real commit")
        storage.prune(self.dir, keep=2)
        self.assertNotIn(forged, storage.list_checkpoints(self.dir), "the forged commit is never pruned")

    def test_a_forged_pointer_sequence_does_not_hide_new_checkpoints(self):
        m = self.migrator()
        m.register("c", Counter(1))
        m.save_ckpt()
        proto.write_json_atomic(os.path.join(self.dir, proto.POINTER_FILE), {"file": "x", "seq": 99999999})
        m.register("c", Counter(7))
        name = m.save_ckpt()  # before: trainguard-ckpt-100000000, which nothing lists or loads
        self.assertIn(name, storage.list_checkpoints(self.dir))
        got = Counter()
        reader = self.migrator()
        reader.register("c", got)
        self.assertEqual(name, reader.load_ckpt()["checkpoint"])
        self.assertEqual(7, got.n)


class ForgedAcks(Base):
    """Item 7: a forged ack.json stopped any trainer."""

    def test_a_forged_ack_without_a_request_does_not_stop_the_trainer(self):
        for rank in ("0", "1"):
            with self.subTest(rank=rank):
                m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="200ms",
                                  RANK=rank, WORLD_SIZE="2", LOCAL_RANK=rank)
                m.register("c", Counter())
                os.makedirs(self.signal, exist_ok=True)
                m.listening()
                proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                        {"generation": 99, "status": "ok", "nonce": ""})
                self.idle_steps(m)  # before: SystemExit(143)
                self.assertIsNone(m._stopping.termination)
                m.close()
                os.unlink(os.path.join(self.signal, proto.ACK_FILE))

    def worker_after_an_ack(self, deadline_in):
        """Rank 1 of a pod whose signal dir holds an ok ack of a request of
        generation 4 (the same nonce) that expires in deadline_in seconds."""
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="200ms", RANK="1",
                          WORLD_SIZE="2", LOCAL_RANK="1")
        m.register("c", Counter())
        os.makedirs(self.signal, exist_ok=True)
        m.listening()
        self.write_request(4, deadline_in=deadline_in, nonce="a" * 32)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": 4, "status": "ok", "nonce": "a" * 32})
        return m

    def test_an_ack_of_an_expired_request_is_not_a_termination(self):
        m = self.worker_after_an_ack(deadline_in=-1)
        self.idle_steps(m)
        self.assertIsNone(m._stopping.termination)

    def test_an_ack_of_this_pods_live_request_still_stops_it(self):
        m = self.worker_after_an_ack(deadline_in=30)
        with self.assertRaises(SystemExit) as cm:
            self.idle_steps(m)
        self.assertEqual(143, cm.exception.code)


class MalformedRequests(Base):
    """Item 8: one malformed request blinded rank 0."""

    def test_one_malformed_request_does_not_hide_the_others(self):
        parent = os.path.dirname(self.signal)
        bad = {"a-deadline": {"generation": 1, "nonce": "", "deadline": "soon"},
               "b-generation": {"generation": "1", "deadline": time.time() + 30},
               "c-bool": {"generation": True, "deadline": time.time() + 30},
               "d-huge": {"generation": 2 ** 70, "deadline": time.time() + 30},
               "e-nan": {"generation": 1, "deadline": float("nan")},
               "f-expired": {"generation": 1, "deadline": time.time() + 30, "expired": "yes"}}
        for pod, req in bad.items():
            os.makedirs(os.path.join(parent, pod))
            with open(os.path.join(parent, pod, proto.REQUEST_FILE), "w") as f:
                f.write(json.dumps(req))
        good = os.path.join(parent, "z-good")
        self.write_request(1, signal=good)
        m = self.migrator(WORLD_SIZE="2")
        m.register("c", Counter())
        m.listening()
        with self.assertLogs("trainguard", "WARNING") as logs:
            self.idle_steps(m)
        ack = proto.read_json(os.path.join(good, proto.ACK_FILE))
        self.assertIsNotNone(ack, "the good request after the malformed ones was never answered")
        self.assertEqual((1, "ok"), (ack["generation"], ack["status"]))
        for pod in bad:
            self.assertFalse(os.path.exists(os.path.join(parent, pod, proto.ACK_FILE)), pod)
        self.assertIn("a-deadline", "".join(logs.output))
        self.assertIn("deadline", "".join(logs.output))

    def test_a_planted_huge_ack_does_not_silence_a_pods_requests(self):
        other = os.path.join(os.path.dirname(self.signal), "worker-1")
        os.makedirs(other)
        proto.write_json_atomic(os.path.join(other, proto.ACK_FILE), {"generation": 2 ** 63 - 1, "status": "ok"})
        m = self.migrator(WORLD_SIZE="2")
        m.register("c", Counter())
        m.listening()
        self.idle_steps(m, 2)
        self.write_request(7, signal=other)
        self.idle_steps(m)
        ack = proto.read_json(os.path.join(other, proto.ACK_FILE))
        self.assertEqual((7, "ok"), (ack["generation"], ack["status"]), "the request was never answered")


class Symlinks(Base):
    """Item 9: the SDK followed directory symlinks on the volume."""

    def test_a_symlinked_signal_parent_is_refused(self):
        outside = tempfile.mkdtemp(prefix="tg-outside-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", outside]))
        os.symlink(outside, os.path.join(self.dir, proto.SIGNAL_SUBDIR))
        m = self.migrator(WORLD_SIZE="2")
        m.register("c", Counter())
        with self.assertRaisesRegex(OSError, r"\.trainguard is a symlink"):
            m.listening()
        self.assertEqual([], os.listdir(outside), "heartbeats or acks written outside the job's directory")

    def test_a_temp_dir_swapped_for_a_symlink_is_not_written_through(self):
        outside = tempfile.mkdtemp(prefix="tg-outside-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", outside]))
        os.chmod(outside, 0o700)
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import torch
            from trainguard import Migrator
            m = Migrator()
            m.register("model", torch.nn.Linear(4, 1))
            try:
                print("saved", m.save_ckpt(), flush=True)
            except OSError as e:
                print("refused", e, flush=True)
        """) % SDK
        env = dict(os.environ, **self.env(TRAINGUARD_TEST_SAVE_DELAY="1.5"))
        proc = subprocess.Popen([PYTHON, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.addCleanup(proc.kill)
        tmp, deadline = None, time.time() + 60
        while tmp is None and time.time() < deadline:
            tmp = next((n for n in os.listdir(self.dir) if n.startswith("." + proto.CKPT_PREFIX)), None)
            time.sleep(0.01)
        self.assertIsNotNone(tmp, "no temp directory appeared")
        time.sleep(0.2)  # into the stalled save: its files are written, commit.json and chmod are next
        os.rename(os.path.join(self.dir, tmp), os.path.join(self.dir, "moved-away"))
        os.symlink(outside, os.path.join(self.dir, tmp))
        out, err = proc.communicate(timeout=120)
        self.assertEqual(0, proc.returncode, err)
        self.assertEqual(0o700, stat.S_IMODE(os.stat(outside).st_mode), "the save chmodded a directory outside")
        self.assertEqual([], os.listdir(outside), "the save wrote into a directory outside: " + out)
        self.assertIn("refused", out)
        self.assertEqual([], storage.list_checkpoints(self.dir))


if __name__ == "__main__":
    unittest.main()
