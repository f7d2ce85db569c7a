"""The README's Python snippets, run as written (real torch, 2 steps), so
they cannot rot: a fresh start once died with NameError (start was set
only on resume). Torch-dependent: fails without torch."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def snippets():
    with open(os.path.join(SDK, "README.md")) as f:
        return FENCE.findall(f.read())


class ReadmeSnippetsTest(unittest.TestCase):
    def run_script(self, script, ckpt):
        env = dict(os.environ, PYTHONPATH=SDK, TRAINGUARD_CHECKPOINT_DIR=ckpt, TRAINGUARD_POD_NAME="readme-0",
                   OMP_NUM_THREADS="1")
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)

    def test_the_snippets_run_fresh_and_resume(self):
        blocks = snippets()
        self.assertGreaterEqual(len(blocks), 2, "the README lost its snippets")
        script = "\n".join(blocks)
        # Two steps, each one checkpointed, instead of the README's numbers.
        script, n = re.subn(r"(?m)^total = [0-9_]+$", "total = 2", script)
        self.assertEqual(1, n, "no `total = N` line to shorten")
        script, n = re.subn(r"periodic\(steps=[0-9_]+\)", "periodic(steps=1)", script)
        self.assertEqual(1, n, "the quick start does not turn periodic checkpoints on")
        script += "\nprint('STEP', migrator.global_step, 'START', start, flush=True)\nmigrator.close()\n"
        ckpt = tempfile.mkdtemp(prefix="tg-readme-")
        self.addCleanup(shutil.rmtree, ckpt, True)
        fresh = self.run_script(script, ckpt)
        self.assertEqual(0, fresh.returncode, fresh.stderr)
        self.assertIn("STEP 2 START 0", fresh.stdout)
        self.assertTrue([n for n in os.listdir(ckpt) if n.startswith("trainguard-ckpt-")], "nothing was saved")
        resumed = self.run_script(script, ckpt)
        self.assertEqual(0, resumed.returncode, resumed.stderr)
        self.assertIn("STEP 2 START 2", resumed.stdout)


if __name__ == "__main__":
    unittest.main()
