"""Hostile files on the checkpoint volume: nothing in them runs, nothing of
another job is loaded, pruned or acknowledged. Needs torch (`make python-deps`)."""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from trainguard import Migrator  # noqa: E402
from trainguard import _fence as fence  # noqa: E402
from trainguard import _protocol as proto  # noqa: E402
from trainguard import _storage as storage  # noqa: E402

import torch  # noqa: E402  (a missing torch fails the suite: run `make python-deps`)


class _Payload:
    """Unpickling this runs a shell command: the classic planted checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch " + self.marker,))


JOB_A = "team-a/pytorchjob/job-a"  # the identity Safety.migrator() gets by default


def plant(directory, seq, tensor_objects, step=99, job=JOB_A):
    """A checkpoint directory that looks committed, holding tensor_objects as its tensor file."""
    name = storage.ckpt_name(seq)
    path = os.path.join(directory, name)
    os.makedirs(path)
    torch.save(tensor_objects, os.path.join(path, storage.TENSOR_FILE))
    state = {"format": storage.FORMAT_VERSION, "step": step, "job": job,
             "states": {"s": {"v": {"__tensor__": 0}}}}
    with open(os.path.join(path, storage.STATE_FILE), "w") as f:
        json.dump(state, f)
    files = {n: os.path.getsize(os.path.join(path, n)) for n in (storage.TENSOR_FILE, storage.STATE_FILE)}
    with open(os.path.join(path, storage.COMMIT_FILE), "w") as f:
        # The attacker forges the highest generation, so the plant is tried first.
        json.dump({"format": storage.FORMAT_VERSION, "generation": 1 << 30, "files": files}, f)
    # ...and its marker: a commit's generation counts only up to the newest
    # marker on the volume (a real one is always taken before its commit).
    os.makedirs(os.path.join(directory, fence.marker(1 << 30)), exist_ok=True)
    with open(os.path.join(directory, proto.POINTER_FILE), "w") as f:
        json.dump({"file": name, "seq": seq, "step": step}, f)
    return name


class Safety(unittest.TestCase):
    def setUp(self):
        self.claim = tempfile.mkdtemp(prefix="tg-claim-")
        self.addCleanup(shutil.rmtree, self.claim, True)
        self.dir = os.path.join(self.claim, "team-a", "pytorchjob", "job-a")
        os.makedirs(self.dir)
        self.marker = os.path.join(self.claim, "PWNED")

    def migrator(self, directory=None, key="pytorchjob/job-a", pod="job-a-master-0", **extra):
        directory = directory or self.dir
        env = {"TRAINGUARD_CHECKPOINT_DIR": directory, "TRAINGUARD_POD_NAME": pod,
               "TRAINGUARD_SIGNAL_DIR": os.path.join(directory, ".trainguard", pod),
               "TRAINGUARD_NAMESPACE": "team-a", "TRAINGUARD_CHECKPOINT_KEY": key,
               "TRAINGUARD_AFTER_CHECKPOINT": "continue"}
        env.update(extra)
        m = Migrator(env=env)
        self.addCleanup(m.close)
        return m

    def save_good(self, value):
        m = self.migrator()
        state = {"v": torch.full((3,), float(value))}
        m.register("s", state)
        return m.save_ckpt()

    def test_planted_pickle_never_runs_and_the_previous_checkpoint_is_used(self):
        good = self.save_good(1)
        evil = plant(self.dir, 50, [torch.zeros(3), _Payload(self.marker)])
        restored = {}
        m = self.migrator()
        m.register("s", restored)
        with self.assertLogs("trainguard", "WARNING") as logs:
            meta = m.load_ckpt()
        self.assertFalse(os.path.exists(self.marker), "the planted payload ran")
        self.assertEqual(meta["checkpoint"], good)
        self.assertTrue(torch.equal(restored["v"], torch.full((3,), 1.0)))
        self.assertIn(os.path.join(self.dir, evil, storage.TENSOR_FILE), "".join(logs.output),
                      "the log line must name the refused file")

    def test_planted_pickle_alone_is_a_fresh_start_naming_the_file(self):
        plant(self.dir, 1, [_Payload(self.marker)])
        m = self.migrator()
        m.register("s", {})
        with self.assertLogs("trainguard", "WARNING") as logs:
            self.assertIsNone(m.load_ckpt())
        self.assertFalse(os.path.exists(self.marker), "the planted payload ran")
        self.assertIn("UNSAFE", "".join(logs.output))

    def test_plain_pickle_file_is_not_unpickled(self):
        name = plant(self.dir, 1, [torch.zeros(3)])
        import pickle
        with open(os.path.join(self.dir, name, storage.TENSOR_FILE), "wb") as f:
            pickle.dump(_Payload(self.marker), f)
        size = os.path.getsize(os.path.join(self.dir, name, storage.TENSOR_FILE))
        commit = os.path.join(self.dir, name, storage.COMMIT_FILE)
        with open(commit) as f:
            c = json.load(f)
        c["files"][storage.TENSOR_FILE] = size
        with open(commit, "w") as f:
            json.dump(c, f)
        with self.assertRaises(storage.CorruptCheckpoint):
            storage.load_checkpoint(self.dir, name, JOB_A)
        self.assertFalse(os.path.exists(self.marker))

    def test_another_jobs_checkpoint_is_refused(self):
        self.save_good(1)
        b = self.migrator(key="pytorchjob/job-b")  # misconfigured onto job A's directory
        b.register("s", {})
        with self.assertLogs("trainguard", "WARNING") as logs:
            self.assertFalse(b.resume)
        self.assertIn("belongs to job 'team-a/pytorchjob/job-a'", "".join(logs.output))

    def test_two_jobs_on_one_claim_neither_sees_nor_prunes_the_other(self):
        dir_b = os.path.join(self.claim, "team-a", "pytorchjob", "job-b")
        os.makedirs(dir_b)
        a_names = [self.save_good(i) for i in range(3)]
        b = self.migrator(directory=dir_b, key="pytorchjob/job-b", pod="job-b-master-0")
        b.register("s", {"v": torch.zeros(1)})
        self.assertFalse(b.resume, "job B resumed job A's state")
        for _ in range(4):
            b.save_ckpt()
        self.assertEqual(storage.list_checkpoints(self.dir), a_names[:0:-1], "job B pruned job A's files")

    def test_symlinked_checkpoint_is_never_listed(self):
        other = os.path.join(self.claim, "elsewhere")
        os.makedirs(other)
        os.symlink(other, os.path.join(self.dir, storage.ckpt_name(7)))
        self.assertEqual(storage.list_checkpoints(self.dir), [])

    def test_rank0_never_answers_through_a_symlinked_sibling(self):
        """A symlink among the job's signal dirs pointing at another job's
        signal dir must not make rank 0 acknowledge that job's request."""
        victim = os.path.join(self.claim, "team-a", "pytorchjob", "job-b", ".trainguard", "job-b-master-0")
        os.makedirs(victim)
        proto.write_json_atomic(os.path.join(victim, proto.REQUEST_FILE), {
            "generation": 1, "nonce": "ab" * 16, "deadline": time.time() + 30})
        own = os.path.join(self.dir, ".trainguard")
        os.makedirs(own)
        os.symlink(victim, os.path.join(own, "job-b-master-0"))
        m = self.migrator(WORLD_SIZE="2")
        m.register("s", {"v": torch.zeros(1)})
        m.listening()
        for _ in range(6):
            time.sleep(0.1)
            with m.step():
                pass
        self.assertFalse(os.path.exists(os.path.join(victim, proto.ACK_FILE)), "job A acknowledged job B")

    def test_malformed_nonce_is_not_answered(self):
        m = self.migrator()
        m.register("s", {"v": torch.zeros(1)})
        signal = os.path.join(self.dir, ".trainguard", "job-a-master-0")
        m.listening()
        proto.write_json_atomic(os.path.join(signal, proto.REQUEST_FILE), {
            "generation": 1, "nonce": "../../etc", "deadline": time.time() + 30})
        for _ in range(4):
            time.sleep(0.1)
            with m.step():
                pass
        self.assertIsNone(proto.read_json(os.path.join(signal, proto.ACK_FILE)))

    def test_missing_job_label_is_warned(self):
        for key in ("pytorchjob.kubeflow.org//", "pytorchjob.training.kubedl.io//", "pytorchjob//"):
            with self.subTest(key):
                m = self.migrator(key=key)
                with self.assertLogs("trainguard", "WARNING") as logs:
                    m.listening()
                self.assertIn("no job-name label", "".join(logs.output))
                m.close()

    def test_symlinked_request_is_not_read(self):
        signal = os.path.join(self.dir, ".trainguard", "p")
        os.makedirs(signal)
        target = os.path.join(self.claim, "req.json")
        with open(target, "w") as f:
            json.dump({"generation": 3}, f)
        os.symlink(target, os.path.join(signal, proto.REQUEST_FILE))
        self.assertIsNone(proto.read_json(os.path.join(signal, proto.REQUEST_FILE)))


if __name__ == "__main__":
    unittest.main()
