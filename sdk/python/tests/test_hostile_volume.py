"""Files a writer of the checkpoint volume can plant that are not pickles:
TorchScript archives, JSON nested past the parser's stack or too big to hold,
checkpoints that name no job. Each must be skipped like a corrupt checkpoint
(the previous one is used), never crash the resume and never run code.
Needs torch (Debian's python3-torch 1.13 under /usr/bin/python3)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import typing
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)
sys.path.insert(0, HERE)

from trainguard import Migrator  # noqa: E402
from trainguard import _protocol as proto  # noqa: E402
from trainguard import _storage as storage  # noqa: E402

import test_safety  # noqa: E402  (plant(), JOB_A)
import torch  # noqa: E402

TS_MARKER = "TRAINGUARD-TORCHSCRIPT-RAN"


class ScriptedPayload(torch.nn.Module):
    """torch.jit.load runs a scripted __setstate__: code from the file."""

    def __init__(self):
        super().__init__()
        self.w = torch.zeros(3)

    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: typing.Tuple[torch.Tensor, bool]):
        print("TRAINGUARD-TORCHSCRIPT-RAN")
        self.w = state[0]
        self.training = state[1]

    def forward(self, x):
        return x + self.w


# Resume in a child process: TorchScript's print writes to the process's
# stdout, which the test reads whole.
_RESUME = textwrap.dedent("""
    import json, logging, sys
    sys.path.insert(0, %r)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from trainguard import Migrator
    m = Migrator(env=json.loads(sys.argv[1]))
    state = {}
    m.register("s", state)
    meta = m.load_ckpt()
    print("CHOSEN", meta and meta["checkpoint"])
""") % SDK


def rewrite_state(directory, name, change):
    """Replace a planted checkpoint's state.json and re-commit its size."""
    path = os.path.join(directory, name)
    data = change if isinstance(change, bytes) else json.dumps(change).encode()
    with open(os.path.join(path, storage.STATE_FILE), "wb") as f:
        f.write(data)
    commit = os.path.join(path, storage.COMMIT_FILE)
    with open(commit) as f:
        c = json.load(f)
    c["files"][storage.STATE_FILE] = len(data)
    with open(commit, "w") as f:
        json.dump(c, f)


class VolumeCase(unittest.TestCase):
    """A job's directory on a claim, and migrators of that job."""

    def setUp(self):
        self.claim = tempfile.mkdtemp(prefix="tg-hostile-")
        self.addCleanup(shutil.rmtree, self.claim, True)
        self.dir = os.path.join(self.claim, "team-a", "pytorchjob", "job-a")
        os.makedirs(self.dir)

    def env(self, **extra):
        env = {"TRAINGUARD_CHECKPOINT_DIR": self.dir, "TRAINGUARD_POD_NAME": "job-a-master-0",
               "TRAINGUARD_SIGNAL_DIR": os.path.join(self.dir, ".trainguard", "job-a-master-0"),
               "TRAINGUARD_NAMESPACE": "team-a", "TRAINGUARD_CHECKPOINT_KEY": "pytorchjob/job-a",
               "TRAINGUARD_AFTER_CHECKPOINT": "continue"}
        env.update(extra)
        return env

    def migrator(self, **extra):
        m = Migrator(env=self.env(**extra))
        self.addCleanup(m.close)
        return m

    def save_good(self, value):
        m = self.migrator()
        m.register("s", {"v": torch.full((3,), float(value))})
        return m.save_ckpt()

    def resume_in_child(self):
        out = subprocess.run([sys.executable, "-c", _RESUME, json.dumps(self.env())],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout, out.stderr


class HostileVolume(VolumeCase):
    # ------------------------------------------------------------ TorchScript

    def plant_torchscript(self, seq):
        """A committed checkpoint whose tensors.pt is a real torch.jit.save archive."""
        name = test_safety.plant(self.dir, seq, [torch.zeros(3)])
        path = os.path.join(self.dir, name, storage.TENSOR_FILE)
        os.unlink(path)
        torch.jit.save(torch.jit.script(ScriptedPayload()), path)
        commit = os.path.join(self.dir, name, storage.COMMIT_FILE)
        with open(commit) as f:
            c = json.load(f)
        c["files"][storage.TENSOR_FILE] = os.path.getsize(path)
        with open(commit, "w") as f:
            json.dump(c, f)
        return name, path

    def test_torchscript_archive_never_runs_and_the_previous_checkpoint_is_used(self):
        good = self.save_good(1)
        _, evil = self.plant_torchscript(50)
        stdout, stderr = self.resume_in_child()
        self.assertNotIn(TS_MARKER, stdout + stderr, "torch.load ran the planted TorchScript")
        self.assertIn("CHOSEN " + good, stdout)
        self.assertIn(evil + ": UNSAFE, not loaded: a TorchScript archive", stderr)

    def test_torchscript_archive_alone_is_a_fresh_start(self):
        _, evil = self.plant_torchscript(1)
        stdout, stderr = self.resume_in_child()
        self.assertNotIn(TS_MARKER, stdout + stderr, "torch.load ran the planted TorchScript")
        self.assertIn("CHOSEN None", stdout)
        self.assertIn(evil, stderr)

    def test_the_planted_archive_really_runs_code_through_torch_load(self):
        """The premise of the two tests above, on this torch: weights_only=True
        does not stop it (it does from torch 2.6 on)."""
        _, evil = self.plant_torchscript(1)
        code = "import torch, sys; torch.load(sys.argv[1], weights_only=True)"
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, evil],
                             capture_output=True, text=True, timeout=300)
        if tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 6):
            self.assertIn(TS_MARKER, out.stdout + out.stderr)

    # ------------------------------------------------------- nesting, memory

    def test_deeply_nested_pointer_falls_back_to_listing(self):
        good = self.save_good(1)
        with open(os.path.join(self.dir, proto.POINTER_FILE), "w") as f:
            f.write("[" * 60000)  # under the 64 KiB bound, far past the parser's stack
        m = self.migrator()
        restored = {}
        m.register("s", restored)
        meta = m.load_ckpt()
        self.assertEqual(meta["checkpoint"], good)
        self.assertTrue(torch.equal(restored["v"], torch.full((3,), 1.0)))

    def test_deeply_nested_state_is_skipped_like_a_corrupt_one(self):
        depths = {"past the JSON parser": 200000, "parsed, past the decoder": sys.getrecursionlimit() - 10}
        for what, depth in depths.items():
            with self.subTest(what):
                shutil.rmtree(self.dir)
                os.makedirs(self.dir)
                good = self.save_good(1)
                evil = test_safety.plant(self.dir, 50, [torch.zeros(3)])
                rewrite_state(self.dir, evil, ('{"format": 2, "step": 1, "job": "%s", "states": {"s": %s%s}}' % (
                    test_safety.JOB_A, "[" * depth, "]" * depth)).encode())
                m = self.migrator()
                m.register("s", {})
                with self.assertLogs("trainguard", "WARNING") as logs:
                    meta = m.load_ckpt()
                self.assertEqual(meta["checkpoint"], good)
                self.assertIn(os.path.join(self.dir, evil, storage.STATE_FILE), "".join(logs.output))
                self.assertIn("RecursionError", "".join(logs.output))

    def test_state_too_big_to_hold_is_skipped_like_a_corrupt_one(self):
        """A state.json under the size bound that expands past the memory the
        process may use: MemoryError, caught as corrupt. Run in a child whose
        address space is capped, without torch (JSON-only checkpoints)."""
        good = self.migrator(TRAINGUARD_SERIALIZER="json")
        good.register("s", {"n": 1})
        good_name = good.save_ckpt()
        evil = storage.ckpt_name(50)
        os.makedirs(os.path.join(self.dir, evil))
        state = b'{"format": 2, "step": 1, "job": "%s", "states": {"s": [%s[]]}}' % (
            test_safety.JOB_A.encode(), b"[]," * (20 << 20))  # 60 MB of text, ~1.5 GB of lists
        with open(os.path.join(self.dir, evil, storage.COMMIT_FILE), "w") as f:
            json.dump({"format": 2, "generation": 1 << 30, "files": {}}, f)  # forged: tried first...
        os.mkdir(os.path.join(self.dir, "trainguard-gen-%d" % (1 << 30)))  # ...with its marker
        rewrite_state(self.dir, evil, state)
        proto.write_json_atomic(os.path.join(self.dir, proto.POINTER_FILE), {"file": evil, "seq": 50})
        code = textwrap.dedent("""
            import json, resource, sys
            sys.path.insert(0, %r)
            from trainguard import _storage as storage
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * resource.getpagesize()
            limit = used + (400 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            for name in storage.candidates(sys.argv[1]):
                try:
                    storage.load_checkpoint(sys.argv[1], name, sys.argv[2])
                    print("CHOSEN", name)
                    break
                except storage.CorruptCheckpoint as e:
                    print("SKIPPED", e)
        """) % SDK
        out = subprocess.run([sys.executable, "-c", code, self.dir, test_safety.JOB_A],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        self.assertIn("MemoryError", out.stdout)
        self.assertIn("CHOSEN " + good_name, out.stdout)

    # ---------------------------------------------------------------- job

    def test_checkpoint_without_a_job_is_refused(self):
        good = self.save_good(1)
        evil = test_safety.plant(self.dir, 50, [torch.zeros(3)])
        with open(os.path.join(self.dir, evil, storage.STATE_FILE)) as f:
            state = json.load(f)
        del state["job"]
        rewrite_state(self.dir, evil, state)
        m = self.migrator()
        m.register("s", {})
        with self.assertLogs("trainguard", "WARNING") as logs:
            meta = m.load_ckpt()
        self.assertEqual(meta["checkpoint"], good)
        self.assertIn("records no job", "".join(logs.output))

    def test_checkpoint_of_a_job_without_identity_is_not_loaded_by_a_named_job(self):
        anonymous = Migrator(env={"TRAINGUARD_CHECKPOINT_DIR": self.dir, "TRAINGUARD_POD_NAME": "x",
                                  "TRAINGUARD_AFTER_CHECKPOINT": "continue"})
        anonymous.register("s", {"v": torch.zeros(1)})
        anonymous.save_ckpt()
        m = self.migrator()
        m.register("s", {})
        with self.assertLogs("trainguard", "WARNING") as logs:
            self.assertFalse(m.resume)
        self.assertIn("belongs to job ''", "".join(logs.output))

    def test_checkpoints_this_sdk_writes_record_the_job_and_load_again(self):
        """Compatibility: every checkpoint the SDK writes carries "job" (also
        without an identity, as ""), so requiring it refuses none of them."""
        for env in (self.env(), {"TRAINGUARD_CHECKPOINT_DIR": self.dir, "TRAINGUARD_POD_NAME": "x",
                                 "TRAINGUARD_AFTER_CHECKPOINT": "continue"}):
            shutil.rmtree(self.dir)
            os.makedirs(self.dir)
            w = Migrator(env=env)
            w.register("s", {"v": torch.ones(2)})
            name = w.save_ckpt()
            with open(os.path.join(self.dir, name, storage.STATE_FILE)) as f:
                self.assertIn("job", json.load(f))
            r = Migrator(env=env)
            restored = {}
            r.register("s", restored)
            self.assertEqual(r.load_ckpt()["checkpoint"], name)
            self.assertTrue(torch.equal(restored["v"], torch.ones(2)))


class Upgrade(VolumeCase):
    """Job templates' keys moved from "pytorchjob/<name>" (shared by kubeflow
    and KubeDL) to "<kind>.<group>/<name>". A checkpoint the user moved from
    the old directory into the job's new one still resumes; nobody else's."""

    def test_a_moved_checkpoint_of_the_old_prefix_resumes_in_the_new_directory(self):
        old = self.migrator(TRAINGUARD_CHECKPOINT_KEY="pytorchjob/job-a")
        old.register("s", {"v": torch.full((2,), 7.0)})
        name = old.save_ckpt()
        for key, resumes in (("pytorchjob.kubeflow.org/job-a", True), ("pytorchjob.training.kubedl.io/job-a", True),
                             ("pytorchjob.kubeflow.org/job-b", False), ("key/job-a", False),
                             ("pytorchjob.kubeflow.org/job-a/job-a", False)):
            with self.subTest(key):
                m = self.migrator(TRAINGUARD_CHECKPOINT_KEY=key)
                restored = {}
                m.register("s", restored)
                with self.assertLogs("trainguard", "WARNING") as logs:
                    meta = m.load_ckpt()
                if resumes:
                    self.assertEqual(meta["checkpoint"], name)
                    self.assertTrue(torch.equal(restored["v"], torch.full((2,), 7.0)))
                    self.assertIn("before the per-kind directory prefix", "".join(logs.output))
                else:
                    self.assertIsNone(meta, "%s resumed job-a's old checkpoint" % key)

    def test_identity_of_the_new_prefixes_differs_per_kind(self):
        kubeflow = proto.job_identity({"TRAINGUARD_NAMESPACE": "team-a",
                                       "TRAINGUARD_CHECKPOINT_KEY": "pytorchjob.kubeflow.org/train/"})
        kubedl = proto.job_identity({"TRAINGUARD_NAMESPACE": "team-a",
                                     "TRAINGUARD_CHECKPOINT_KEY": "pytorchjob.training.kubedl.io/train/"})
        self.assertNotEqual(kubeflow, kubedl)
        self.assertEqual(proto.legacy_identity(kubeflow), proto.legacy_identity(kubedl))


if __name__ == "__main__":
    unittest.main()
