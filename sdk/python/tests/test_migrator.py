"""Unit tests of the trainguard SDK. Torch-dependent tests fail (not skip)
when torch is missing: `make python-deps` installs it."""

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)

from trainguard import Migrator  # noqa: E402
from trainguard import _protocol as proto  # noqa: E402
from trainguard import _storage as storage  # noqa: E402


NONCE = "0123456789abcdef0123456789abcdef"


class Optimizer:
    """Counted like a torch optimizer (its type name, param_groups, step), no torch needed."""

    def __init__(self):
        self.param_groups = []

    def step(self):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, s):
        pass


class Counter:
    """A minimal object with the state_dict protocol, no torch needed."""

    def __init__(self, n=0):
        self.n = n

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, s):
        self.n = s["n"]


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tg-sdk-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.signal = os.path.join(self.dir, ".trainguard", "pod-0")

    def env(self, **extra):
        e = {"TRAINGUARD_CHECKPOINT_DIR": self.dir, "TRAINGUARD_SIGNAL_DIR": self.signal,
             "TRAINGUARD_POD_NAME": "pod-0", "TRAINGUARD_AFTER_CHECKPOINT": "continue",
             "TRAINGUARD_EXIT_GRACE": "0",  # the exit tests catch SystemExit: no watchdog may end the run
             "TRAINGUARD_STATUS_PORT": "0"}  # no fixed port shared by parallel runs; test_status.py picks free ones
        e.update(extra)
        return e

    def migrator(self, **extra):
        m = Migrator(env=self.env(**extra))
        self.addCleanup(m.close)
        self.addCleanup(m._stopping.sigterm.restore)  # an exit test leaves its SIGTERM flag installed, as a real exit does
        return m

    def parts(self, **env):
        """The Migrator's parts, built as it builds them, without it:
        (settings, state, checkpoints, signal dirs, requests)."""
        from trainguard import _checkpoints, _requests, _state
        settings = proto.Settings(self.env(TRAINGUARD_SERIALIZER="json", **env))
        st = _state.State()
        cps = _checkpoints.Checkpoints(settings, st)
        self.addCleanup(cps.close)
        dirs = _requests.SignalDirs(settings, cps.root)
        self.addCleanup(dirs.close)
        return settings, st, cps, dirs, _requests.Requests(settings, dirs)

    def write_request(self, generation, deadline_in=30.0, nonce="0123456789abcdef0123456789abcdef", signal=None,
                      **extra):
        signal = signal or self.signal
        os.makedirs(signal, exist_ok=True)
        proto.write_json_atomic(os.path.join(signal, proto.REQUEST_FILE), dict({
            "generation": generation, "nonce": nonce, "pod": "pod-0", "requested_at": time.time(),
            "deadline": time.time() + deadline_in, "agent_pid": 1}, **extra))

    def read_ack(self):
        return proto.read_json(os.path.join(self.signal, proto.ACK_FILE))

    def idle_steps(self, m, n=5):
        """n steps, spaced so the listener looks at the signal dir between them."""
        for _ in range(n):
            time.sleep(0.12)
            with m.step():
                pass

    def step_until_ack(self, m, generation, limit=5.0):
        end = time.time() + limit
        while time.time() < end:
            with m.step():
                pass
            ack = self.read_ack()
            if ack and ack["generation"] == generation:
                return ack
            time.sleep(0.02)
        self.fail("no ack of generation %d within %.0fs" % (generation, limit))


class PlainObjects(Base):
    """The pickle path: dicts, lists and state_dict objects, no torch."""

    def test_round_trip_restores_in_place(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        metrics, history, counter = {"best": 0.5}, [1, 2], Counter(7)
        for name, obj in (("metrics", metrics), ("history", history), ("counter", counter)):
            m.register(name, obj)
        for _ in range(3):
            with m.step():
                pass
        name = m.save_ckpt()
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, name))), ["commit.json", "state.json"],
                         "the torch-free path wrote a tensor file")

        m2 = self.migrator()
        metrics2, history2, counter2 = {"junk": 1}, [9], Counter()
        for n, obj in (("metrics", metrics2), ("history", history2), ("counter", counter2)):
            m2.register(n, obj)
        self.assertTrue(m2.resume)
        meta = m2.load_ckpt()
        self.assertEqual(meta["step"], 3)
        self.assertEqual(m2.global_step, 3)
        self.assertEqual(metrics2, {"best": 0.5})
        self.assertEqual(history2, [1, 2])
        self.assertEqual(counter2.n, 7)

    def test_register_refuses_unsupported(self):
        with self.assertRaises(TypeError):
            self.migrator().register("x", 3)

    def test_no_checkpoint_is_a_fresh_start(self):
        m = self.migrator()
        m.register("metrics", {"a": 1})
        self.assertFalse(m.resume)
        with self.assertLogs("trainguard", "WARNING"):
            self.assertIsNone(m.load_ckpt())

    def test_missing_checkpoint_dir_warns_and_does_not_listen(self):
        m = Migrator(env={"TRAINGUARD_CHECKPOINT_DIR": os.path.join(self.dir, "absent")})
        with self.assertLogs("trainguard", "WARNING") as logs:
            m.listening()
        self.assertIn("does not exist", "".join(logs.output))
        self.assertFalse(m.resume)

    def test_corrupt_latest_falls_back_to_previous(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        state = {"v": 1}
        m.register("s", state)
        first = m.save_ckpt()
        state["v"] = 2
        with m.step():
            pass
        second = m.save_ckpt()
        with open(os.path.join(self.dir, second, storage.STATE_FILE), "r+b") as f:
            f.truncate(5)
        m2 = self.migrator()
        restored = {}
        m2.register("s", restored)
        with self.assertLogs("trainguard", "WARNING") as logs:
            self.assertTrue(m2.resume)
        self.assertIn(second, "".join(logs.output))
        self.assertEqual(m2.load_ckpt()["checkpoint"], first)
        self.assertEqual(restored, {"v": 1})

    def test_everything_corrupt_is_a_fresh_start(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("s", {"v": 1})
        name = m.save_ckpt()
        with open(os.path.join(self.dir, name, storage.STATE_FILE), "wb") as f:
            f.write(b"garbage")
        m2 = self.migrator()
        m2.register("s", {})
        with self.assertLogs("trainguard", "WARNING"):
            self.assertFalse(m2.resume)

    def test_leftover_temp_file_is_ignored_and_cleaned(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("s", {"v": 1})
        good = m.save_ckpt()
        tmp = os.path.join(self.dir, "." + storage.ckpt_name(2) + ".tmp-crashed")
        os.mkdir(tmp)
        with open(os.path.join(tmp, storage.STATE_FILE), "wb") as f:
            f.write(b"half a checkpoint")
        self.assertEqual(storage.candidates(self.dir), [good])
        m.save_ckpt()
        self.assertFalse(os.path.exists(tmp))

    def test_keeps_two_checkpoints(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("s", {"v": 1})
        names = [m.save_ckpt() for _ in range(4)]
        self.assertEqual(storage.list_checkpoints(self.dir), [names[3], names[2]])
        with open(os.path.join(self.dir, proto.POINTER_FILE)) as f:
            ptr = json.load(f)
        self.assertEqual(ptr["file"], names[3])

    def test_import_does_not_need_torch(self):
        """A subprocess where `import torch` fails: the SDK still saves and loads (pickle)."""
        code = textwrap.dedent("""
            import os, sys
            sys.modules['torch'] = None  # any `import torch` now raises ImportError
            sys.path.insert(0, %r)
            from trainguard import migrator, Migrator
            d = {'epoch': 3}; l = [1.5]
            migrator.register('d', d); migrator.register('l', l)
            migrator.listening()
            name = migrator.save_ckpt()
            files = os.listdir(os.path.join(os.environ['TRAINGUARD_CHECKPOINT_DIR'], name))
            assert 'tensors.pt' not in files, files
            m2 = Migrator(); d2 = {}; l2 = []
            m2.register('d', d2); m2.register('l', l2)
            assert m2.resume
            m2.load_ckpt()
            assert d2 == {'epoch': 3} and l2 == [1.5], (d2, l2)
            print('OK')
        """ % SDK)
        env = dict(os.environ, **self.env())
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("OK", out.stdout)


class Protocol(Base):
    def test_heartbeat_written(self):
        m = self.migrator()
        m.listening()
        hb = proto.read_json(os.path.join(self.signal, proto.HEARTBEAT_FILE))
        self.assertEqual(hb["pid"], os.getpid())
        self.assertLess(abs(hb["time"] - time.time()), 5)

    def test_request_is_answered_at_a_safe_point(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("s", {"v": 1})
        m.listening()
        self.write_request(3)
        ack = self.step_until_ack(m, 3)
        self.assertEqual(ack["status"], "ok")
        self.assertEqual(ack["nonce"], "0123456789abcdef0123456789abcdef", "the ack must echo the request's nonce")
        self.assertEqual(ack["step"], m.global_step)
        self.assertGreater(ack["bytes"], 0)
        self.assertTrue(os.path.isfile(os.path.join(self.dir, ack["checkpoint"], storage.COMMIT_FILE)))

    def test_request_is_answered_once_even_if_seen_again_during_its_save(self):
        """The listener scans while the save runs: the request it sees again
        must not be queued and answered a second time a step later (seen on
        the real cluster: ack of step N, then N+1 after the agent was done)."""
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("s", {"v": 1})
        m.listening()
        save = m._checkpoints.save

        def save_while_the_listener_scans():
            m._requests.scan()
            return save()
        m._checkpoints.save = save_while_the_listener_scans
        self.write_request(3)
        first = self.step_until_ack(m, 3)
        for _ in range(3):
            with m.step():
                pass
        self.assertEqual(self.read_ack()["step"], first["step"], "the request was answered again")
        self.assertEqual(len(storage.list_checkpoints(self.dir)), 1)

    def test_expired_request_is_ignored(self):
        m = self.migrator()
        m.register("s", {"v": 1})
        self.write_request(4, deadline_in=-1)
        m.listening()
        self.idle_steps(m)
        self.assertIsNone(self.read_ack())
        self.assertEqual(storage.list_checkpoints(self.dir), [])

    def test_already_acknowledged_request_is_not_redone(self):
        """A restarted trainer finds the previous pod's answered request: no new save."""
        self.write_request(2)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": 2, "nonce": "0123456789abcdef0123456789abcdef", "status": "ok", "step": 5,
                                 "checkpoint": "x"})
        m = self.migrator()
        m.register("s", {"v": 1})
        m.listening()
        self.idle_steps(m)
        self.assertEqual(self.read_ack()["step"], 5)
        self.assertEqual(storage.list_checkpoints(self.dir), [])

    def test_failed_save_is_acknowledged_as_error(self):
        m = self.migrator()
        m.register("s", {"v": 1})
        m.listening()
        self.write_request(1)
        with mock.patch.object(storage, "write_checkpoint", side_effect=OSError(28, "No space left on device")):
            with self.assertLogs("trainguard", "ERROR"):
                ack = self.step_until_ack(m, 1)
        self.assertEqual(ack["status"], "error")
        self.assertIn("No space left", ack["error"])

    def test_hold_after_termination_checkpoint(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="hold", TRAINGUARD_HOLD_TIMEOUT="600ms")
        m.register("s", {"v": 1})
        m.listening()
        self.write_request(1)
        start = time.monotonic()
        self.step_until_ack(m, 1)
        self.assertGreaterEqual(time.monotonic() - start, 0.5, "did not hold after the checkpoint")

    def write_done(self, generation, nonce="0123456789abcdef0123456789abcdef", outcome="saved", signal=None):
        proto.write_json_atomic(os.path.join(signal or self.signal, proto.DONE_FILE), {
            "generation": generation, "nonce": nonce, "outcome": outcome, "exit_code": 0, "done_at": time.time()})

    def test_exits_143_after_termination_checkpoint_once_the_agent_is_done(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="", TRAINGUARD_EXIT_WAIT="30s")
        m.register("s", {"v": 1})
        m.listening()
        self.write_request(1)
        self.write_done(1, nonce="f" * 32)  # another request's done.json does not end the wait...
        threading.Timer(0.5, self.write_done, (1,)).start()  # ...this one's does
        with self.assertRaises(SystemExit) as cm, self.assertLogs("trainguard", "INFO") as logs:
            self.step_until_ack(m, 1)
        self.assertIn("agent: saved", "\n".join(logs.output))
        self.assertEqual(cm.exception.code, 143, "a stopped pod must not exit 0 (podFailurePolicy counts 0 as success)")
        self.assertEqual(self.read_ack()["status"], "ok")
        self.assertEqual(self.read_ack()["step"], m.global_step, "a step after the acknowledged one")

    def test_waits_for_done_of_exactly_its_request(self):
        from trainguard import _exit as exiting
        os.makedirs(self.signal, exist_ok=True)
        self.write_done(1, nonce="f" * 32)  # right generation, another request's nonce
        done, why = exiting.wait_done(self.signal, 1, "0" * 32, 0.3, 0.02)
        self.assertEqual((done, why), (None, "timeout"))
        self.write_done(1, nonce="0" * 32)
        done, why = exiting.wait_done(self.signal, 1, "0" * 32, 5, 0.02)
        self.assertEqual((done["outcome"], why), ("saved", "done"))

    def test_sigterm_ends_the_wait_for_done(self):
        import signal
        import threading
        from trainguard import _exit as exiting
        os.makedirs(self.signal, exist_ok=True)
        flag = exiting.SigtermFlag()
        flag.install()
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        try:
            done, why = exiting.wait_done(self.signal, 1, "", 30, 0.02, sigterm=flag)
        finally:
            flag.restore()
        self.assertEqual((done, why), (None, "sigterm"))
        self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL, "the default action is restored")

    def test_torchrun_sigterm_ends_training_at_the_step_boundary(self):
        # torchrun's agent SIGTERMs every worker once one died: the step in
        # progress completes, then the rank exits 143 (rank 0 after its gasp).
        import signal
        self.addCleanup(signal.signal, signal.SIGTERM, signal.SIG_DFL)
        m = self.migrator(TORCHELASTIC_RUN_ID="tg", TRAINGUARD_EXIT_GRACE="0")
        m.register("s", {"v": 1})
        m.listening()
        self.assertNotEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL, "SIGTERM deferred under torchrun")
        with m.step():
            pass
        with self.assertRaises(SystemExit) as cm, self.assertLogs("trainguard", "WARNING") as logs:
            with m.step():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler runs here: the step goes on
                done_in_step = True
        self.assertTrue(done_in_step, "the step in progress completes")
        self.assertEqual(cm.exception.code, 143)
        self.assertEqual(m.global_step, 2)
        self.assertIn("SIGTERM from torchrun's agent; ending training after step 2", "\n".join(logs.output))
        m._stopping.sigterm.restore()  # training goes on after a termination hook: the SIGTERM is forgotten, the handler kept
        self.assertFalse(m._stopping.sigterm.received)
        self.assertNotEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)

    def test_sigterm_keeps_its_default_action_outside_torchrun(self):
        import signal
        m = self.migrator()
        m.listening()
        self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL, "a trainer not under torchrun dies on SIGTERM")

    def test_exits_after_the_wait_bound_without_done(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="300ms")
        m.register("s", {"v": 1})
        m.listening()
        self.write_request(1)
        with self.assertRaises(SystemExit) as cm, self.assertLogs("trainguard", "WARNING") as logs:
            self.step_until_ack(m, 1)
        self.assertEqual(cm.exception.code, 143)
        self.assertIn("stopping anyway", "\n".join(logs.output))

    def test_termination_hook_replaces_the_exit(self):
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="5s")
        m.register("s", {"v": 1})
        m.listening()
        seen = []
        m.termination_hook = seen.append
        self.write_request(2)
        self.write_done(2)
        self.step_until_ack(m, 2)
        self.assertEqual([(i["generation"], i["outcome"], i["why"]) for i in seen], [(2, "saved", "done")])
        with m.step():  # the hook returned: training goes on, the termination is not repeated
            pass
        self.assertEqual(len(seen), 1)

    def test_other_rank_of_the_stopping_pod_exits_too(self):
        """Rank 1 never answers requests; it learns of its pod's acknowledged
        termination checkpoint from the ack, at its next step boundary."""
        m = self.migrator(TRAINGUARD_AFTER_CHECKPOINT="exit", RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
        m.register("s", {"v": 1})
        os.makedirs(self.signal, exist_ok=True)
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE), {"generation": 3, "status": "ok"})
        m.listening()
        with m.step():  # the ack that was there at start is a predecessor's
            pass
        self.write_request(4, nonce="a" * 32)  # an ack ends training only when it answers a live request
        proto.write_json_atomic(os.path.join(self.signal, proto.ACK_FILE),
                                {"generation": 4, "nonce": "a" * 32, "status": "ok"})
        self.write_done(4, nonce="a" * 32)
        with self.assertRaises(SystemExit) as cm:
            with m.step():
                raise RuntimeError("Connection closed by peer")  # rank 0 left the collective
        self.assertEqual(cm.exception.code, 143)

    def test_request_the_agent_expired_is_ignored(self):
        m = self.migrator()
        m.register("s", {"v": 1})
        os.makedirs(self.signal, exist_ok=True)
        proto.write_json_atomic(os.path.join(self.signal, proto.REQUEST_FILE), {
            "generation": 5, "nonce": "0" * 32, "deadline": time.time() + 60, "expired": True})
        m.listening()
        self.idle_steps(m)
        self.assertIsNone(self.read_ack())

    def test_migration_env_names_are_honoured(self):
        cfg = proto.Config.from_env({"MIGRATION_CKPT_PATH": "/ck", "MIGRATION_SIGNAL_PATH": "/ck/sig",
                                     "TRAINGUARD_PRESTOP_TIMEOUT": "1m30s"})
        self.assertEqual((cfg.checkpoint_dir, cfg.signal_dir, cfg.prestop_timeout), ("/ck", "/ck/sig", 90.0))
        cfg = proto.Config.from_env({"TRAINGUARD_CHECKPOINT_DIR": "/a", "MIGRATION_CKPT_PATH": "/b",
                                     "TRAINGUARD_POD_NAME": "p"})
        self.assertEqual((cfg.checkpoint_dir, cfg.signal_dir), ("/a", "/a/.trainguard/p"))
        self.assertEqual(proto._duration_seconds("500ms", 0), 0.5)


class WithTorch(Base):
    def setUp(self):
        super().setUp()
        try:
            importlib.import_module("torch")
        except ImportError:
            self.fail("torch is not importable by %s: run `make python-deps`" % sys.executable)

    def test_model_and_optimizer_round_trip_bit_identical(self):
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        m = self.migrator()
        m.register("model", model)
        m.register("optimizer", opt)
        name = m.save_ckpt()
        with open(os.path.join(self.dir, name, storage.TENSOR_FILE), "rb") as f:
            self.assertEqual(f.read(4), b"PK\x03\x04", "torch available but not used")

        model2 = torch.nn.Linear(4, 2)
        opt2 = torch.optim.Adam(model2.parameters(), lr=0.1)
        m2 = self.migrator()
        m2.register("model", model2)
        m2.register("optimizer", opt2)
        m2.load_ckpt()
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a, b))
        s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
        for k in s1:
            for field in ("exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(s1[k][field], s2[k][field]))

    def test_torch_free_checkpoint_loads_with_torch_present(self):
        m = self.migrator(TRAINGUARD_SERIALIZER="pickle")
        m.register("d", {"x": 1})
        m.save_ckpt()
        d = {}
        m2 = self.migrator()
        m2.register("d", d)
        m2.load_ckpt()
        self.assertEqual(d, {"x": 1})


if __name__ == "__main__":
    unittest.main()
