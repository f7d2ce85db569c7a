"""The supervisor with real processes: restarts a trainer a signal killed,
within its budget, and reports the restarts in the termination message."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
sys.path.insert(0, SDK)

from trainguard import _supervise as sup  # noqa: E402

# Ends itself HOW (kill: SIGKILL; raise: an uncaught exception; exit-N:
# sys.exit(N)) while the counter file holds fewer than N lines.
TRAINER = """
import os, signal, sys
path, n, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "a") as f:
    f.write("x\\n")
with open(path) as f:
    runs = len(f.readlines())
if runs <= n:
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "raise":
        raise RuntimeError("a crash in the user's code")
    sys.exit(int(how[len("exit-"):]))
sys.exit(0)
"""


class Supervise(unittest.TestCase):
    script = False  # the trainer as python3 -c: always a new process

    def run_supervised(self, kills, budget, how="kill"):
        d = tempfile.mkdtemp()
        log, runs = os.path.join(d, "termination-log"), os.path.join(d, "runs")
        with open(log, "w") as f:
            f.write("the user's own words")
        # OMP_NUM_THREADS=1: one BLAS thread per trainer, light on a small
        # machine (test_openblas_pool_does_not_keep_it_from_forking runs without).
        env = dict(os.environ, PYTHONPATH=SDK, OMP_NUM_THREADS="1", TRAINGUARD_INPROCESS_RESTARTS=str(budget),
                   TRAINGUARD_TERMINATION_MESSAGE_PATH=log)
        for k in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
            env.pop(k, None)
        cmd = [sys.executable, "-c", TRAINER]
        if self.script:
            cmd = [sys.executable, os.path.join(d, "trainer.py")]
            with open(cmd[1], "w") as f:
                f.write(TRAINER)
        p = subprocess.run([sys.executable, "-m", "trainguard", "supervise", "--"] + cmd + [runs, str(kills), how],
                           env=env, capture_output=True, text=True, timeout=120)
        with open(log) as f:
            return p.returncode, f.read(), p.stderr

    def test_restarts_are_reported_for_the_cap(self):
        code, message, err = self.run_supervised(kills=2, budget=3)
        self.assertEqual(code, 0, err)
        self.assertTrue(message.startswith("the user's own words"), message)
        self.assertEqual(message.strip().splitlines()[-1], "trainguard.io/inprocess-restarts 2")

    def test_the_budget_ends_in_the_signals_code(self):
        code, message, err = self.run_supervised(kills=5, budget=2)
        self.assertEqual(code, 128 + 9, err)
        self.assertIn("restarted 2 times already (TRAINGUARD_INPROCESS_RESTARTS=2): exiting 137", err)
        self.assertEqual(message.strip().splitlines()[-1], "trainguard.io/inprocess-restarts 2")

    def test_no_restart_no_line(self):
        code, message, err = self.run_supervised(kills=0, budget=3)
        self.assertEqual((code, message), (0, "the user's own words"), err)

    def test_an_uncaught_exception_is_restarted_too(self):
        code, message, err = self.run_supervised(kills=2, budget=3, how="raise")
        self.assertEqual(code, 0, err)
        self.assertEqual(err.count("exited 1 (an uncaught exception); starting it again"), 2, err)
        self.assertEqual(err.count("RuntimeError: a crash in the user's code"), 2, err)
        self.assertEqual(message.strip().splitlines()[-1], "trainguard.io/inprocess-restarts 2")

    def test_the_budget_ends_in_the_exceptions_code(self):
        code, message, err = self.run_supervised(kills=5, budget=1, how="raise")
        self.assertEqual(code, 1, err)
        self.assertIn("exited 1 (an uncaught exception) after", err)
        self.assertIn("restarted 1 times already (TRAINGUARD_INPROCESS_RESTARTS=1): exiting 1", err)

    def test_a_trainer_that_exits_to_rejoin_is_started_again(self):
        code, message, err = self.run_supervised(kills=2, budget=3, how="exit-75")
        self.assertEqual(code, 0, err)
        self.assertEqual(err.count("exited 75 to rejoin its group at a new generation; starting it again"), 2, err)
        self.assertEqual(message.strip().splitlines()[-1], "trainguard.io/inprocess-restarts 2")

    def test_the_budget_ends_a_rejoin_in_138(self):
        code, message, err = self.run_supervised(kills=5, budget=1, how="exit-75")
        self.assertEqual(code, 138, err)
        self.assertIn("restarted 1 times already (TRAINGUARD_INPROCESS_RESTARTS=1): exiting 138", err)

    def test_other_exit_codes_are_the_trainers_decision(self):
        for status in (2, 138, 143):
            with self.subTest(status=status):
                code, message, err = self.run_supervised(kills=1, budget=3, how="exit-%d" % status)
                self.assertEqual((code, message), (status, "the user's own words"), err)
                self.assertNotIn("starting it again", err)



class SuperviseScript(Supervise):
    """The same with python3 SCRIPT.py: forked trainers where torch is
    installed (they pass through the supervisor's frames on their way out,
    and must not report restarts themselves), a new process otherwise."""
    script = True

    def test_started_by_fork_where_torch_is(self):
        code, message, err = self.run_supervised(kills=1, budget=3)
        self.assertEqual(code, 0, err)
        if importlib.util.find_spec("torch") is None:
            self.assertIn("preloading torch failed", err)
            return
        self.assertIn("the trainer starts as a fork of this process", err)
        self.assertEqual(err.count("forked the trainer (pid"), 2, err)
        self.assertEqual(message.count("trainguard.io/inprocess-restarts"), 1, message)

    def test_openblas_pool_does_not_keep_it_from_forking(self):
        """Without OMP_NUM_THREADS=1 (as real pods run): `import torch`
        starts OpenBLAS's pool; the supervisor parks it and forks, and the
        trainer's BLAS is parallel again (its pool restarted in the child)."""
        d = tempfile.mkdtemp()
        out = os.path.join(d, "threads")
        with open(os.path.join(d, "trainer.py"), "w") as f:
            f.write("import os, sys, torch\n"
                    "a = torch.ones(256, 256)\n"
                    "assert float((a @ a)[0, 0]) == 256.0\n"
                    "open(sys.argv[1], 'w').write(str(len(os.listdir('/proc/self/task'))))\n")
        env = dict(os.environ, PYTHONPATH=SDK)
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RANK", "WORLD_SIZE", "MASTER_PORT"):
            env.pop(k, None)
        p = subprocess.run([sys.executable, "-m", "trainguard", "supervise", "--", sys.executable,
                            os.path.join(d, "trainer.py"), out], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("the trainer starts as a fork of this process", p.stderr)
        self.assertEqual(p.stderr.count("forked the trainer (pid"), 1, p.stderr)
        with open(out) as f:
            threads = int(f.read())
        if (os.cpu_count() or 1) > 1:
            self.assertGreater(threads, 1, "the trainer's BLAS pool did not start again after the fork")


class Joins(unittest.TestCase):
    """Where the new-process path's supervisor joins each generation."""

    def joins(self, rank, n, hosts=None):
        start = sup._Start.__new__(sup._Start)
        start.env, start.ranks, start.store = {"MASTER_ADDR": "m", "MASTER_PORT": "1"}, (rank, 2), "hosted"
        start.hosts = rank == 0 if hosts is None else hosts
        connected = []
        with mock.patch.object(sup.reform, "connect", side_effect=lambda env, wait: connected.append(1) or object()), \
                mock.patch.object(sup.reform, "join_generation", side_effect=lambda store, r: len(connected)):
            gens = [start._join() for _ in range(n)]
        return gens, len(connected)

    def test_a_worker_connects_afresh_for_each_join(self):
        """After its first join (on the client that proved the store there)
        each join of a worker connects again: rank 0 may have been replaced,
        and a client of a partitioned one hung for minutes."""
        gens, connects = self.joins(rank=1, n=3)
        self.assertEqual(2, connects)
        self.assertEqual([0, 1, 2], gens)

    def test_rank_0_keeps_the_store_it_hosts(self):
        gens, connects = self.joins(rank=0, n=3)
        self.assertEqual(0, connects)

    def test_rank_0_under_torchruns_agent_store_connects_as_a_worker(self):
        """torchrun's agent hosts the store: rank 0's supervisor is one of
        its clients, each join on a fresh one as a worker's."""
        env = {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True"}
        self.assertTrue(sup.agent_store(env))
        self.assertFalse(sup.agent_store(dict(env, TORCHELASTIC_USE_AGENT_STORE="False")))  # c10d: rank 0 hosts
        self.assertFalse(sup.agent_store({"TORCHELASTIC_USE_AGENT_STORE": "True"}))  # the supervisor's own, not torchrun's
        gens, connects = self.joins(rank=0, n=3, hosts=False)
        self.assertEqual(2, connects)


if __name__ == "__main__":
    unittest.main()
