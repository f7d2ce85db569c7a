"""A peer's death with real processes and real PyTorch: two gloo ranks, as
two pods of a PyTorchJob run them (RANK, WORLD_SIZE, MASTER_ADDR), one of
them SIGKILLed (or raising) mid-step. Torch-dependent: fails without torch."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)

from trainguard import _storage as storage  # noqa: E402

# MODE: ddp (a DistributedDataParallel; the module registered), unknown (hand
# averaged, not declared), sharded (ZeroRedundancyOptimizer), torn (the peer
# dies after optimizer.step, inside the step), eval (the peer dies between
# steps, the survivor fails in a collective outside any step), user (rank 0's
# own bug), held (the peer dies but a child it forked holds its connections
# open: the survivor's collective neither fails nor ends).
TRAINER = textwrap.dedent("""
    import datetime, logging, os, signal, sys, time
    import torch, torch.distributed as dist
    from trainguard import migrator

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mode, kill_at, steps = os.environ["MODE"], int(os.environ["KILL_AT"]), int(os.environ["STEPS"])
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    net = torch.nn.parallel.DistributedDataParallel(model) if mode == "ddp" else model
    if mode == "sharded":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    migrator.register("model", model)
    migrator.register("optimizer", opt)
    if mode in ("torn", "user", "eval", "held"):
        migrator.replicated()
    migrator.listening()
    start = 0
    if migrator.resume:
        start = migrator.load_ckpt()["step"]
        print("rank %d: resumed at step %d weights %r" % (rank, start, [p.sum().item() for p in model.parameters()]),
              flush=True)

    def die_here(i, where):
        want = {"torn": "after", "eval": "between", "user": None}.get(mode, "before")
        if rank == 1 and i == kill_at and where == want:
            if mode == "held":
                holder = os.fork()
                if holder == 0:
                    os.close(1)
                    os.close(2)
                    time.sleep(300)  # holds the dead rank's sockets open
                    os._exit(0)
                print("holder %d" % holder, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    for i in range(start, steps):
        with migrator.step():
            x = torch.randn(8, 4, generator=torch.Generator().manual_seed(i * 2 + rank))
            opt.zero_grad()
            if mode == "held":
                time.sleep(0.3)  # steps longer than a heartbeat, as in training
            die_here(i, "before")
            if mode == "user" and rank == 0 and i == kill_at:
                raise ValueError("the user's own bug at step %d" % i)
            net(x).pow(2).mean().backward()
            if mode != "ddp":
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad.div_(2)
            opt.step()
            die_here(i, "after")
            if mode == "torn":
                dist.all_reduce(torch.ones(1))  # e.g. averaging the loss to log it
        print("rank %d: completed step %d weights %r" % (rank, i + 1, [p.sum().item() for p in model.parameters()]),
              flush=True)
        if mode == "eval":
            die_here(i, "between")
            dist.all_reduce(torch.ones(1))  # outside the step: an evaluation, a metric
    print("rank %d: done" % rank, flush=True)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PeerDies(unittest.TestCase):
    KILL_AT = 3

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tg-peer-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.script = os.path.join(self.dir, "train.py")
        with open(self.script, "w") as f:
            f.write(TRAINER)
        self.ckpt = os.path.join(self.dir, "ckpt")
        os.makedirs(self.ckpt)

    def env_of(self, rank, port, mode, steps, kill_at):
        pod = ("job-master-0", "job-worker-0")[rank]
        return dict(os.environ, PYTHONPATH=SDK, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                    WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK="0", MODE=mode, KILL_AT=str(kill_at),
                    STEPS=str(steps), TRAINGUARD_CHECKPOINT_DIR=self.ckpt, TRAINGUARD_POD_NAME=pod,
                    TRAINGUARD_SIGNAL_DIR=os.path.join(self.ckpt, ".trainguard", pod))

    def start_job(self, mode, steps=100, kill_at=KILL_AT, port=None):
        port = port or str(free_port())
        return [subprocess.Popen(["/usr/bin/python3", self.script], env=self.env_of(rank, port, mode, steps, kill_at),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]

    def run_job(self, mode, steps=100, kill_at=KILL_AT):
        """Both ranks to the end; returns [(returncode, output)] by rank."""
        procs = self.start_job(mode, steps, kill_at)
        out = []
        for p in procs:
            try:
                text, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            out.append((p.returncode, text))
        return out

    def committed(self):
        names = storage.candidates(self.ckpt)
        return storage.load_checkpoint(self.ckpt, names[0], "")["step"] if names else None

    def weights_after(self, text, rank, step):
        m = re.search(r"rank %d: completed step %d weights (\[.*\])" % (rank, step), text)
        self.assertIsNotNone(m, text)
        return m.group(1)

    def test_ddp_survivor_exits_138_with_the_last_completed_step_committed(self):
        (code0, out0), (code1, out1) = self.run_job("ddp")
        self.assertEqual(-signal.SIGKILL, code1, out1)
        self.assertEqual(138, code0, out0)
        self.assertIn("a peer is gone", out0)
        self.assertIn("dying gasp: committed", out0)
        self.assertEqual(self.KILL_AT, self.committed(), out0)
        expected = self.weights_after(out0, 0, self.KILL_AT)
        # The job restarts: both ranks resume exactly at that step.
        resumed = self.run_job("ddp", steps=self.KILL_AT + 1, kill_at=-1)
        for rank, (code, text) in enumerate(resumed):
            self.assertEqual(0, code, text)
            self.assertIn("rank %d: resumed at step %d weights %s" % (rank, self.KILL_AT, expected), text)

    def test_a_peer_lost_outside_a_step_exits_138_through_the_excepthook(self):
        (code0, out0), (code1, out1) = self.run_job("eval")
        self.assertEqual(-signal.SIGKILL, code1, out1)
        self.assertEqual(138, code0, out0)
        self.assertIn("Traceback (most recent call last)", out0, "the user's excepthook (Python's) ran first")
        self.assertIn("dying gasp: committed", out0)
        self.assertEqual(self.KILL_AT + 1, self.committed(), out0)

    def test_a_user_exception_keeps_exit_1_and_its_peer_exits_138(self):
        (code0, out0), (code1, out1) = self.run_job("user")
        self.assertEqual(1, code0, out0)
        self.assertIn("ValueError: the user's own bug at step %d" % self.KILL_AT, out0)
        self.assertNotIn("a peer is gone", out0)
        self.assertEqual(138, code1, out1)
        self.assertIsNone(self.committed(), "the user's bug is not a dying gasp")

    def test_state_not_known_replicated_is_not_saved_and_says_why(self):
        for mode, why in (("unknown", "cannot tell that every rank holds the same state"),
                          ("sharded", "the state is sharded (optimizer)"),
                          ("torn", "the optimizer stepped after step %d completed" % self.KILL_AT)):
            with self.subTest(mode=mode):
                shutil.rmtree(self.ckpt)
                os.makedirs(self.ckpt)
                (code0, out0), (code1, _) = self.run_job(mode)
                self.assertEqual(-signal.SIGKILL, code1)
                self.assertEqual(138, code0, out0)
                lines = [x for x in out0.splitlines() if "no dying-gasp checkpoint" in x]
                self.assertEqual(1, len(lines), out0)
                self.assertIn(why, lines[0])
                self.assertIsNone(self.committed(), out0)

    def test_a_survivor_blocked_on_a_restarted_peer_exits_138(self):
        """The hang seen on the real cluster: rank 1 died, yet rank 0's
        all_reduce neither failed nor ended (its connection to rank 1 stayed
        open: here a child rank 1 forked holds it). Once rank 1's trainer
        restarts (a new incarnation heartbeats), rank 0 ends with 138 and
        its dying gasp, instead of waiting out gloo's timeout (30 min by
        default; 60 s here)."""
        port = str(free_port())
        rank0, rank1 = self.start_job("held", port=port)
        self.addCleanup(rank0.kill)
        out1, _ = rank1.communicate(timeout=120)
        self.assertEqual(-signal.SIGKILL, rank1.returncode, out1)
        holder = re.search(r"holder (\d+)", out1)
        self.assertIsNotNone(holder, out1)
        self.addCleanup(os.kill, int(holder.group(1)), signal.SIGKILL)
        time.sleep(6)
        self.assertIsNone(rank0.poll(), "rank 0 is blocked in its collective: nothing fails it")
        restarted = subprocess.Popen(
            ["/usr/bin/python3", "-c", "import time\nfrom trainguard import migrator\nmigrator.listening()\ntime.sleep(120)"],
            env=self.env_of(1, port, "held", 100, -1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(restarted.kill)
        t = time.monotonic()
        out0, _ = rank0.communicate(timeout=40)
        took = time.monotonic() - t
        self.assertEqual(138, rank0.returncode, out0)
        self.assertIn("a peer restarted", out0)
        self.assertIn("dying gasp: committed", out0)
        self.assertEqual(self.KILL_AT, self.committed(), out0)
        self.assertLess(took, 15, "ended within the peer watch's bound, not gloo's timeout")
        print("survivor ended %.1fs after the peer's restart" % took, file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
