"""A peer's death: the classification table, the exception hooks, the
optimizer step counter and the dying gasp's decisions, in one process.
test_peer_process.py runs the same with real gloo ranks."""

import importlib
import logging
import os
import sys
import tempfile
import threading
import time
import types
import unittest
import warnings
from unittest import mock

from test_migrator import Base, Optimizer

from trainguard import _fence as fence  # noqa: E402
from trainguard import _peer as peer  # noqa: E402
from trainguard import _storage as storage  # noqa: E402

ORIGIN = os.path.join(tempfile.gettempdir(), "tg-fake-torch")


def raised_in(directory, exc):
    """exc with a traceback whose innermost frame is a file under directory,
    as an error raised by torch's own code has."""
    code = compile("raise exc", os.path.join(directory, "distributed", "_trainguard_test_frame.py"), "exec")
    try:
        exec(code, {"exc": exc})
    except BaseException as e:
        return e
    raise AssertionError("not raised")


def raised_here(exc):
    try:
        raise exc
    except BaseException as e:
        return e


class DistBackendError(RuntimeError):
    """torch >= 2's torch.distributed.DistBackendError, by name."""


class DistNetworkError(RuntimeError):
    pass


# Messages as torch 1.13 and 2.x print them.
PEER_LOST = [
    ("[./gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:5030: Connection reset by peer",
     "connection reset by peer"),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.7]:29500",
     "gloo: connection closed by peer"),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:411] writev [10.0.0.7]:9121: Broken pipe",
     "broken pipe to a peer"),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
     "operation to complete", "gloo: collective timed out"),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] Timed out waiting 30000ms for send "
     "operation to complete", "gloo: collective timed out"),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Application timeout caused pair closure",
     "gloo: pair closed after a timeout"),
    ("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, remote process exited or "
     "there was a network error, NCCL version 2.18.1\nncclRemoteError: A call failed possibly due to a network "
     "error or a remote process exiting prematurely.", "NCCL: remote error"),
    ("NCCL communicator was aborted on rank 0.  Original reason for failure was: ...", "NCCL: communicator aborted"),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
     "Timeout(ms)=1800000) ran for 1800234 milliseconds before timing out.", "NCCL: collective timed out"),
    ("Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, ...",
     "NCCL: operations failed or timed out"),
]

# What the user's own mistakes look like, raised inside torch all the same.
USER_ERRORS = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x16 and 8x1)"),
    RuntimeError("Tensors must be contiguous"),
    RuntimeError("Default process group has not been initialized, please make sure to call init_process_group."),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    ValueError("Connection reset by peer"),  # not a RuntimeError: not torch's collective error
    DistBackendError("NCCL error in: ProcessGroupNCCL.cpp:1275, invalid usage, NCCL version 2.18.1"),
]


class Classify(unittest.TestCase):
    def test_a_peer_gone_is_recognised(self):
        for message, why in PEER_LOST:
            with self.subTest(message=message[:60]):
                self.assertEqual(why, peer.classify(raised_in(ORIGIN, RuntimeError(message)), ORIGIN))

    def test_the_user_s_own_errors_are_not(self):
        for exc in USER_ERRORS:
            with self.subTest(exc=repr(exc)[:60]):
                self.assertIsNone(peer.classify(raised_in(ORIGIN, exc), ORIGIN))

    def test_a_peer_message_raised_by_user_code_keeps_the_user_s_verdict(self):
        for message, _ in PEER_LOST:
            with self.subTest(message=message[:60]):
                self.assertIsNone(peer.classify(raised_here(RuntimeError(message)), ORIGIN))
        self.assertIsNone(peer.classify(RuntimeError(PEER_LOST[0][0]), ORIGIN), "no traceback: not torch's")

    def test_torch_2_s_distributed_error_types(self):
        self.assertEqual("torch.distributed DistBackendError",
                         peer.classify(raised_in(ORIGIN, DistBackendError("NCCL error: unhandled system error")),
                                       ORIGIN))
        self.assertEqual("torch.distributed DistNetworkError",
                         peer.classify(raised_in(ORIGIN, DistNetworkError("failed to recv, got 0 bytes")), ORIGIN))

    def test_connection_errors_from_torch(self):
        self.assertEqual("connection reset by peer",
                         peer.classify(raised_in(ORIGIN, ConnectionResetError(104, "Connection reset by peer")),
                                       ORIGIN))

    def test_not_an_exception_of_torch_when_torch_is_not_imported(self):
        exc = raised_in(ORIGIN, RuntimeError(PEER_LOST[0][0]))
        with mock.patch.dict(sys.modules, {"torch": None}):
            self.assertIsNone(peer.classify(exc))


class Hooks(unittest.TestCase):
    def setUp(self):
        importlib.import_module("torch")  # classify() looks for torch's frames
        self.seen, self.lost = [], []
        self.hooks = peer.Hooks(lambda exc, why, main: self.lost.append((why, main)))
        self.addCleanup(setattr, sys, "excepthook", sys.excepthook)
        self.addCleanup(setattr, threading, "excepthook", threading.excepthook)
        self.user_hook = sys.excepthook = lambda *a: self.seen.append(a[1])
        threading.excepthook = lambda args: self.seen.append(args.exc_value)
        self.hooks.install()
        self.addCleanup(self.hooks.uninstall)
        self.peer_error = raised_in(peer.torch_dir(), RuntimeError(PEER_LOST[1][0]))

    def test_a_peer_error_runs_the_user_s_hook_then_exits_138(self):
        with self.assertRaises(SystemExit) as cm:
            sys.excepthook(type(self.peer_error), self.peer_error, self.peer_error.__traceback__)
        self.assertEqual(138, cm.exception.code)
        self.assertEqual([self.peer_error], self.seen, "the previous hook (traceback) ran first")
        self.assertEqual([("gloo: connection closed by peer", True)], self.lost)

    def test_a_user_error_is_only_the_user_s_hook(self):
        exc = raised_here(RuntimeError("Connection closed by peer"))
        sys.excepthook(type(exc), exc, exc.__traceback__)  # returns: Python then exits 1
        self.assertEqual([exc], self.seen)
        self.assertEqual([], self.lost)

    def test_a_thread_s_peer_error_ends_the_process_with_138(self):
        err = self.peer_error

        def fail():
            raise err

        with mock.patch.object(os, "_exit") as exit_:
            t = threading.Thread(target=fail)
            t.start()
            t.join()
        exit_.assert_called_once_with(138)
        self.assertEqual([err], self.seen)
        self.assertEqual([("gloo: connection closed by peer", False)], self.lost)

    def test_install_is_once_and_uninstall_restores(self):
        self.hooks.install()
        self.assertIsNot(self.user_hook, sys.excepthook)
        self.hooks.uninstall()
        self.assertIs(self.user_hook, sys.excepthook)


class OptimizerSteps(unittest.TestCase):
    def test_counts_steps_and_keeps_lr_schedulers_working(self):
        import torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        early = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps step before registration
        counter = peer.OptimizerSteps()
        counter.watch(opt)
        counter.watch(opt)  # registered twice: counted once
        late = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps our wrapper
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "optimizer.step() has been overridden" would fail here
            for _ in range(3):
                model(torch.ones(1, 2)).sum().backward()
                opt.step()
                early.step()
                late.step()
        self.assertEqual(3, counter.count)
        self.assertEqual(1, counter.watched)
        self.assertEqual(3, opt._step_count, "the schedulers' own count")

    def test_not_an_optimizer(self):
        counter = peer.OptimizerSteps()
        counter.watch({"step": 1})
        self.assertEqual(0, counter.watched)


class Sharded(unittest.TestCase):
    def test_sharded_and_data_parallel_are_told_by_type(self):
        import torch

        class FullyShardedDataParallel(torch.nn.Module):
            pass

        class DistributedDataParallel(torch.nn.Module):
            def __init__(self, module):
                super().__init__()
                self.module = module

        inner = torch.nn.Linear(2, 2)
        wrapped = torch.nn.Sequential(FullyShardedDataParallel())
        self.assertEqual(["m"], peer.sharded({"m": wrapped, "d": {"step": 1}}))
        self.assertEqual([], peer.sharded({"m": inner}))
        self.assertIsNone(peer.data_parallel({"m": inner}))
        ddp = DistributedDataParallel(inner)
        self.assertEqual("m", peer.data_parallel({"m": inner}), "the module a DDP wraps")
        self.assertEqual("d", peer.data_parallel({"d": ddp}))
        del ddp


class DyingGasp(Base):
    """The step() boundary in one process, world size 2 by env (no process
    group): the exception a real gloo all_reduce raises when its peer died."""

    def trainer(self, replicated=True, **env):
        import torch
        m = self.migrator(RANK="0", WORLD_SIZE="2", **env)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        m.register("model", model)
        m.register("optimizer", opt)
        if replicated is not None:
            m.replicated(replicated)
        m.listening()
        self.addCleanup(m._peer.hooks.uninstall)

        def train_step(fail=None):
            with m.step():
                model(torch.ones(2, 4)).sum().backward()
                if fail == "before":
                    raise raised_in(peer.torch_dir(), RuntimeError(PEER_LOST[1][0]))
                opt.step()
                opt.zero_grad()
                if fail == "after":
                    raise raised_in(peer.torch_dir(), RuntimeError(PEER_LOST[0][0]))
                if fail == "user":
                    raise RuntimeError("Connection reset by peer")  # the user's own, in the user's code

        return m, model, train_step

    def committed_step(self):
        names = storage.candidates(self.dir)
        if not names:
            return None
        return storage.load_checkpoint(self.dir, names[0], "")["step"]

    def test_peer_lost_mid_step_commits_the_last_completed_step_and_exits_138(self):
        import torch
        m, model, train_step = self.trainer()
        for _ in range(3):
            train_step()
        weights = model.weight.detach().clone()
        with self.assertLogs("trainguard", "WARNING") as logs, self.assertRaises(SystemExit) as cm:
            train_step(fail="before")
        self.assertEqual(138, cm.exception.code)
        self.assertEqual(3, self.committed_step())
        saved = storage.load_checkpoint(self.dir, storage.candidates(self.dir)[0], "")["states"]["model"]
        self.assertTrue(torch.equal(weights, saved["weight"]))
        self.assertTrue(any("dying gasp: committed" in line for line in logs.output), logs.output)

    def test_torn_step_is_not_saved(self):
        m, _, train_step = self.trainer()
        train_step()
        with self.assertLogs("trainguard", "WARNING") as logs, self.assertRaises(SystemExit) as cm:
            train_step(fail="after")
        self.assertEqual(138, cm.exception.code)
        self.assertIsNone(self.committed_step())
        self.assertIn("optimizer stepped after step 1 completed", "\n".join(logs.output))

    def test_not_known_replicated_is_not_saved_and_says_why(self):
        for replicated, says in ((None, "cannot tell that every rank holds the same state"),
                                 (False, "declared not replicated")):
            with self.subTest(replicated=replicated):
                self.setUp()
                m, _, train_step = self.trainer(replicated=replicated)
                train_step()
                with self.assertLogs("trainguard", "WARNING") as logs, self.assertRaises(SystemExit) as cm:
                    train_step(fail="before")
                self.assertEqual(138, cm.exception.code)
                self.assertIsNone(self.committed_step())
                lines = [x for x in logs.output if "no dying-gasp checkpoint" in x]
                self.assertEqual(1, len(lines), logs.output)
                self.assertIn(says, lines[0])

    def test_only_rank_0_saves(self):
        import torch
        m = self.migrator(RANK="1", WORLD_SIZE="2")
        m.register("model", torch.nn.Linear(1, 1))
        m.replicated()
        with m.step():
            pass
        with self.assertLogs("trainguard", "ERROR"), self.assertRaises(SystemExit) as cm, m.step():
            raise raised_in(peer.torch_dir(), RuntimeError(PEER_LOST[1][0]))
        self.assertEqual(138, cm.exception.code)
        self.assertIsNone(self.committed_step())

    def test_a_user_exception_is_raised_unchanged(self):
        m, _, train_step = self.trainer()
        train_step()
        with self.assertRaises(RuntimeError):
            train_step(fail="user")
        self.assertIsNone(self.committed_step())

    def test_bounded_by_the_dump_timeout(self):
        m, _, train_step = self.trainer(TRAINGUARD_DUMP_TIMEOUT="300ms", TRAINGUARD_TEST_SAVE_DELAY="5")
        train_step()
        with self.assertLogs("trainguard", "ERROR") as logs, self.assertRaises(SystemExit):
            train_step(fail="before")
        self.assertIn("not committed within 0.3s", "\n".join(logs.output))
        self.assertIsNone(self.committed_step())

    def test_a_stale_incarnation_s_gasp_is_refused_by_the_fence(self):
        m, _, train_step = self.trainer()
        train_step()
        fence.claim(self.dir, pod="replacement", uid="new")  # the job was recovered elsewhere
        with self.assertLogs("trainguard", "ERROR") as logs, self.assertRaises(SystemExit) as cm:
            train_step(fail="before")
        self.assertEqual(138, cm.exception.code)
        self.assertIn("no dying-gasp checkpoint: Fenced", "\n".join(logs.output))
        self.assertIsNone(self.committed_step())

    def test_a_step_already_committed_is_not_written_again(self):
        m, _, train_step = self.trainer()
        m.periodic(steps=1)
        train_step()
        train_step()  # its periodic save may still be writing when the peer is lost: the gasp waits for it
        with self.assertLogs("trainguard", "INFO") as logs, self.assertRaises(SystemExit):
            train_step(fail="before")
        self.assertEqual(2, self.committed_step())
        self.assertIn("dying gasp: step 2 is already committed", "\n".join(logs.output))
        self.assertNotIn("dying gasp: committed", "\n".join(logs.output))

    def test_off_with_a_zero_timeout(self):
        m, _, train_step = self.trainer(TRAINGUARD_DUMP_TIMEOUT="0")
        train_step()
        with self.assertLogs("trainguard", "ERROR"), self.assertRaises(SystemExit):
            train_step(fail="before")
        self.assertIsNone(self.committed_step())


class PeerLossTest(Base):
    def peer_loss(self, save, **env):
        settings, st, _, _, _ = self.parts(RANK="0", WORLD_SIZE="2", **env)
        st.register("optimizer", Optimizer())
        st.replicated = True
        stopped = []
        return st, peer.PeerLoss(settings, st, save, lambda: stopped.append(True)), stopped

    def test_the_gasp_saves_the_last_completed_step_through_the_given_save(self):
        saves = []
        st, loss, stopped = self.peer_loss(lambda unless_step: saves.append(unless_step) or "c")
        st.completed()
        with self.assertLogs("trainguard", "WARNING") as logs:
            loss.lost(RuntimeError("Connection closed by peer"), "test", False)
            loss.lost(RuntimeError("again"), "test", False)
        self.assertEqual(([1], [True]), (saves, stopped), "once, with the step it must not write twice")
        self.assertIn("dying gasp: committed c, the last completed step 1", "\n".join(logs.output))

    def test_a_torn_step_or_no_step_is_refused(self):
        st, loss, _ = self.peer_loss(lambda unless_step: self.fail("saved"))
        self.assertEqual("no step has completed yet", loss.refusal())
        st.completed()
        st.objects["optimizer"].step()
        self.assertIn("the state is between two steps", loss.refusal())
        st.replicated = False
        self.assertIn("declared not replicated", loss.refusal())

    def test_bounded_by_the_dump_timeout(self):
        st, loss, _ = self.peer_loss(lambda unless_step: time.sleep(5), TRAINGUARD_DUMP_TIMEOUT="200ms")
        st.completed()
        started = time.monotonic()
        with self.assertLogs("trainguard", "ERROR") as logs:
            loss.dying_gasp()
        self.assertLess(time.monotonic() - started, 2)
        self.assertIn("not committed within 0.2s", "\n".join(logs.output))



class PeersTest(unittest.TestCase):
    """peer.Peers: a peer that restarted since this rank last completed a
    step with it; heartbeats on the volume are hostile."""

    def beat(self, started, time_=100.0):
        return {"started": started, "time": time_, "pid": 7}

    def test_a_peer_restarted_after_a_completed_step(self):
        p = peer.Peers()
        self.assertIsNone(p.observe({"w": self.beat(10.0)}, 0, 50.0), "no step yet: nothing known")
        self.assertIsNone(p.observe({"w": self.beat(10.0)}, 3, 50.0), "step 3 completed with incarnation 10")
        self.assertIsNone(p.observe({"w": self.beat(10.0)}, 3, 50.0))
        self.assertEqual("w", p.observe({"w": self.beat(60.0, 101.0)}, 3, 50.0))

    def test_a_new_incarnation_before_any_step_is_not_a_restart(self):
        p = peer.Peers()
        self.assertIsNone(p.observe({"w": self.beat(10.0)}, 0, 50.0))
        self.assertIsNone(p.observe({"w": self.beat(60.0)}, 0, 50.0), "no step completed with either")
        self.assertIsNone(p.observe({"w": self.beat(60.0)}, 1, 50.0))

    def test_stale_and_hostile_heartbeats_are_ignored(self):
        p = peer.Peers()
        p.observe({"w": self.beat(10.0)}, 1, 50.0)
        for hb in (None, [], "x", {"started": "99", "time": 200.0}, {"started": True, "time": 200.0},
                   {"started": float("nan"), "time": 200.0}, {"started": 1e300, "time": 200.0},
                   {"started": 99.0}, self.beat(99.0, time_=40.0)):
            with self.subTest(hb=hb):
                self.assertIsNone(p.observe({"w": hb}, 1, 50.0))
        self.assertIsNone(p.observe({"v": self.beat(99.0)}, 1, 50.0), "a pod never trained with")
        self.assertIsNone(p.observe({"w": self.beat(5.0)}, 1, 50.0), "an older incarnation is no restart")



class SupersededTest(unittest.TestCase):
    """peer.Superseded: a newer fence generation claimed while this rank's
    group completes no step is a replaced rank 0, even when the old one (a
    zombie) still writes its pod's heartbeat."""

    def test_a_newer_generation_while_stuck_ends_the_group(self):
        s = peer.Superseded()
        self.assertIsNone(s.observe(3, 0), "no step yet: nothing known")
        self.assertIsNone(s.observe(3, 5), "step 5 completed under generation 3")
        self.assertIsNone(s.observe(3, 5))
        self.assertEqual(4, s.observe(4, 5), "generation 4 claimed and no step since")

    def test_a_step_under_the_new_generation_is_no_supersession(self):
        s = peer.Superseded()
        s.observe(3, 5)
        self.assertIsNone(s.observe(4, 6), "a step completed since: this group claimed it")
        self.assertIsNone(s.observe(4, 6))

    def test_a_reset_and_hostile_values_are_ignored(self):
        s = peer.Superseded()
        s.observe(9, 1)
        self.assertIsNone(s.observe(2, 1), "a reset: the new line's generation is the base")
        self.assertEqual(3, s.observe(3, 1))
        for v in (None, "7", True, -1, 0, 7.5):
            with self.subTest(v=v):
                self.assertIsNone(peer.Superseded().observe(v, 1))

    def test_a_group_re_formed_in_process_takes_its_new_generation(self):
        loss = peer.PeerLoss.__new__(peer.PeerLoss)
        loss.superseded = peer.Superseded()
        loss.superseded.observe(3, 5)
        loss.reset_peers()  # the returning rank 0 claimed 4 while the survivor re-formed
        self.assertIsNone(loss.superseded.observe(4, 5), "no step since, but 4 is the re-formed group's")
        self.assertEqual(5, loss.superseded.observe(5, 5))

    def watching(self, env):
        calls = []
        loss = peer.PeerLoss.__new__(peer.PeerLoss)
        loss.peers, loss.superseded, loss.started, loss.paused = peer.Peers(), peer.Superseded(), 50.0, False
        loss._state = types.SimpleNamespace(step=5)
        loss._settings = types.SimpleNamespace(config=types.SimpleNamespace(rank=1), env=env)
        loss.lost = lambda exc, why, main, code=peer.EXIT_PEER_LOST: calls.append((str(exc), code))
        return loss, calls

    def test_the_watch_exits_retryably_on_a_newer_generation(self):
        loss, calls = self.watching({})
        zombie = {"master-0": {"started": 10.0, "time": 100.0}}  # the old rank 0's heartbeat, still written
        loss.watch(zombie, 3)
        with mock.patch.object(peer.os, "_exit") as exit_:
            loss.watch(zombie, 4)
        exit_.assert_called_once_with(peer.EXIT_PEER_LOST)
        self.assertIn("claimed fence generation 4 (after 3)", calls[0][0])
        self.assertEqual(peer.EXIT_PEER_LOST, calls[0][1])

    def test_the_watch_never_rejoins(self):
        """Not even under the supervisor: this rank may be a partitioned
        zombie, and a trainer started again would claim a newer fence
        generation than its replacement's."""
        for env, want in (({peer.ENV_SUPERVISED: "1"}, 138), ({peer.ENV_SUPERVISED: "0"}, 138)):
            with self.subTest(env=env):
                loss, calls = self.watching(env)
                worker = {"worker-0": {"started": 40.0, "time": 100.0}}
                loss.watch(worker, None)  # the incarnation it trains with
                with mock.patch.object(peer.os, "_exit") as exit_:
                    loss.watch({"worker-0": {"started": 90.0, "time": 100.0}}, None)  # a new one
                exit_.assert_called_once_with(want)
                self.assertEqual(want, calls[0][1])
                self.assertIn("the trainer of worker-0 restarted", calls[0][0])

    def test_a_pod_being_stopped_does_not_rejoin(self):
        """Its preStop asked for a checkpoint: a trainer started again would
        hold the pod until the end of its grace period."""
        loss, _ = self.watching({peer.ENV_SUPERVISED: "1"})
        self.assertEqual(peer.EXIT_REJOIN, loss.rejoin_code())
        loss.pod_stopping = lambda: True
        self.assertEqual(peer.EXIT_PEER_LOST, loss.rejoin_code())

if __name__ == "__main__":
    logging.basicConfig()
    unittest.main()
