"""The supervisor with real processes: restarts a trainer a signal killed,
within its budget, and reports the restarts in the termination message."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)

# Kills itself with SIGKILL while the counter file holds fewer than N lines.
TRAINER = """
import os, signal, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "a") as f:
    f.write("x\\n")
with open(path) as f:
    runs = len(f.readlines())
if runs <= n:
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(0)
"""


class Supervise(unittest.TestCase):
    script = False  # the trainer as python3 -c: always a new process

    def run_supervised(self, kills, budget):
        d = tempfile.mkdtemp()
        log, runs = os.path.join(d, "termination-log"), os.path.join(d, "runs")
        with open(log, "w") as f:
            f.write("the user's own words")
        # OMP_NUM_THREADS=1: Debian's OpenBLAS otherwise starts a thread pool at
        # import torch, and the supervisor (rightly) refuses to fork then.
        env = dict(os.environ, PYTHONPATH=SDK, OMP_NUM_THREADS="1", TRAINGUARD_INPROCESS_RESTARTS=str(budget),
                   TRAINGUARD_TERMINATION_MESSAGE_PATH=log)
        for k in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
            env.pop(k, None)
        cmd = [sys.executable, "-c", TRAINER]
        if self.script:
            cmd = [sys.executable, os.path.join(d, "trainer.py")]
            with open(cmd[1], "w") as f:
                f.write(TRAINER)
        p = subprocess.run([sys.executable, "-m", "trainguard", "supervise", "--"] + cmd + [runs, str(kills)],
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


if __name__ == "__main__":
    unittest.main()
