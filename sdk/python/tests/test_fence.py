"""Fencing (docs/checkpoint-protocol.md, "Fencing"): a stale incarnation of a
job's trainer, such as a process on a partitioned node whose pod was
replaced, never commits over its replacement. The last test runs both as
real processes with real PyTorch."""

import os
import subprocess
import sys
import textwrap
import unittest

from test_migrator import SDK, Base, Counter

from trainguard import Fenced
from trainguard import _fence as fence
from trainguard import _protocol as proto
from trainguard import _storage as storage


class Generations(Base):
    def test_claims_are_exclusive_and_increasing_across_processes(self):
        code = "import sys; sys.path.insert(0, %r); from trainguard import _fence as f; print(f.claim(%r, pod='p'))" % (
            SDK, self.dir)
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(8)]
        got = sorted(int(p.communicate(timeout=60)[0]) for p in procs)
        self.assertEqual(list(range(1, 9)), got, "eight racing incarnations, eight distinct generations")
        self.assertEqual(9, fence.claim(self.dir), "the next one is newer than all")

    def test_a_file_or_symlink_named_like_a_marker_is_taken(self):
        open(os.path.join(self.dir, fence.marker(50)), "w").close()
        os.symlink(self.dir, os.path.join(self.dir, fence.marker(60)))
        self.assertEqual(61, fence.claim(self.dir), "a claim never retries a name that is there, whatever it is")

    def test_old_markers_are_dropped_but_the_newest_stays(self):
        for _ in range(fence.KEEP_MARKERS + 5):
            last = fence.claim(self.dir)
        gens = fence.generations(self.dir)
        self.assertEqual(last, gens[-1])
        self.assertEqual(fence.KEEP_MARKERS + 1, len(gens))

    def test_every_migrator_start_is_a_new_generation(self):
        first = self.migrator().listening()
        second = self.migrator().listening()
        self.assertEqual((1, 2), (first.generation, second.generation))
        self.assertEqual(0, self.migrator(RANK="1").listening().generation, "only global rank 0 commits")

    def test_a_load_claims_nothing(self):
        self.migrator().save_ckpt()
        reader = self.migrator()
        reader.register("c", Counter())
        self.assertTrue(reader.resume)
        reader.load_ckpt()
        self.assertEqual((0, [1]), (reader.generation, fence.generations(self.dir)))


class StaleIncarnation(Base):
    def test_stale_commit_is_refused_and_the_replacement_line_wins(self):
        zombie, state = self.migrator().listening(), {"line": "zombie"}
        zombie.register("s", state)
        first = zombie.save_ckpt()

        replacement, mine = self.migrator().listening(), {"line": None}
        replacement.register("s", mine)
        self.assertEqual(first, replacement.load_ckpt()["checkpoint"], "the replacement resumes the last commit")

        with self.assertRaises(Fenced) as refused:
            zombie.save_ckpt()
        self.assertIn("generation 2 (pod pod-0) started", str(refused.exception))
        self.assertEqual(1, zombie.refused_commits)
        self.assertEqual([first], storage.list_checkpoints(self.dir), "nothing committed, nothing pruned")

        mine["line"] = "replacement"
        own = replacement.save_ckpt()
        with self.assertRaises(Fenced):
            zombie.save_ckpt()
        self.assertEqual(own, storage.read_pointer(self.dir)["file"])
        third, got = self.migrator(), {}
        third.register("s", got)
        self.assertEqual(own, third.load_ckpt()["checkpoint"])
        self.assertEqual("replacement", got["line"])

    def test_a_request_to_a_stale_incarnation_is_acknowledged_as_an_error(self):
        zombie = self.migrator().listening()
        zombie.register("s", {"n": 1})
        self.migrator().listening()  # the replacement claims generation 2
        self.write_request(1)
        ack = self.step_until_ack(zombie, 1)
        self.assertEqual("error", ack["status"])
        self.assertIn("stale incarnation", ack["error"])

    def test_a_commit_that_raced_the_claim_ranks_below_the_newer_generation(self):
        # The zombie passed its check, then the replacement claimed and
        # committed, then the zombie's rename landed with a higher number.
        zombie = self.migrator().listening()
        zombie.register("c", Counter(1))
        replacement = self.migrator().listening()
        replacement.register("c", Counter(2))
        own = replacement.save_ckpt()
        real_check = fence.check
        try:
            fence.check = lambda *args: None  # the race: the checks saw no newer generation
            late = storage.write_checkpoint(zombie.config, {"step": 9, "saved_at": 0, "world_size": 1,
                                                            "states": {"c": {"n": 1}}}, zombie.generation)[0]
        finally:
            fence.check = real_check
        self.assertGreater(late, own, "the stale commit has the higher sequence number")
        self.assertEqual([own, late], storage.ranked(self.dir))
        got = Counter()
        reader = self.migrator()
        reader.register("c", got)
        self.assertEqual(own, reader.load_ckpt()["checkpoint"])
        self.assertEqual(2, got.n)
        storage.prune(self.dir, keep=1)
        self.assertIn(own, storage.list_checkpoints(self.dir), "pruning keeps the best, not the last")

    def test_a_claim_between_the_check_and_the_rename_keeps_the_pointer(self):
        # Every order of (zombie check, replacement claim, zombie rename):
        # here the claim lands after the check before the rename (the
        # second: the first runs before the save writes anything).
        zombie = self.migrator().listening()
        zombie.register("c", Counter(1))
        first = zombie.save_ckpt()
        real_check, calls = fence.check, []

        def claim_after_the_check_before_the_rename(directory, generation, line=""):
            calls.append(generation)
            real_check(directory, generation, line)  # the first two pass: no newer generation yet
            if len(calls) == 2:
                fence.claim(directory, pod="replacement")  # the replacement starts now

        fence.check = claim_after_the_check_before_the_rename
        try:
            with self.assertRaises(Fenced):
                zombie.save_ckpt()
        finally:
            fence.check = real_check
        self.assertEqual(2, len(storage.list_checkpoints(self.dir)), "the commit landed")
        self.assertEqual(first, storage.read_pointer(self.dir)["file"], "the pointer did not move")
        self.assertEqual(1, zombie.refused_commits)

    def test_a_torn_commit_of_the_newer_generation_falls_back_to_the_older_line(self):
        zombie = self.migrator().listening()
        zombie.register("c", Counter(1))
        old = zombie.save_ckpt()
        replacement = self.migrator().listening()
        replacement.register("c", Counter(2))
        torn = replacement.save_ckpt()
        os.unlink(os.path.join(self.dir, torn, storage.STATE_FILE))  # damaged after its commit
        got = Counter()
        reader = self.migrator()
        reader.register("c", got)
        with self.assertLogs("trainguard", "WARNING"):
            meta = reader.load_ckpt()
        self.assertEqual(old, meta["checkpoint"], "no valid commit of generation 2: generation 1's is the newest state")
        self.assertEqual(1, got.n)

    def test_a_stale_incarnation_never_removes_a_newer_ones_temp_dir(self):
        newer = os.path.join(self.dir, ".%sg%08d.tmp-live" % (proto.CKPT_PREFIX, 2))
        older = os.path.join(self.dir, ".%sg%08d.tmp-dead" % (proto.CKPT_PREFIX, 1))
        os.makedirs(newer)
        os.makedirs(older)
        storage.remove_temp_dirs(self.dir, generation=1)
        self.assertTrue(os.path.isdir(newer), "a live save of the replacement")
        self.assertFalse(os.path.isdir(older))


TRAINER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %(sdk)r)
    import torch
    from trainguard import Fenced, Migrator
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    m = Migrator()
    m.register("model", model)
    m.register("opt", opt)
    m.listening()
    if m.resume:
        print("resumed", m.load_ckpt()["step"], flush=True)
    print("generation", m.generation, flush=True)
    x = torch.ones(8, 4)
    try:
        for i in range(int(os.environ["STEPS"])):
            with m.step():
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
            m.save_ckpt()
            print("committed", m.global_step, flush=True)
            time.sleep(float(os.environ.get("PAUSE", "0")))
    except Fenced as e:
        print("fenced", m.refused_commits, e, flush=True)
        sys.exit(75)
""")


class RealProcesses(Base):
    def test_a_partitioned_trainer_never_overwrites_its_replacement(self):
        script = os.path.join(self.dir, "train.py")
        with open(script, "w") as f:
            f.write(TRAINER % {"sdk": SDK})
        env = dict(os.environ, **self.env(TRAINGUARD_NAMESPACE="team", TRAINGUARD_CHECKPOINT_KEY="pytorchjob/j"))
        zombie = subprocess.Popen(["/usr/bin/python3", script], env=dict(env, STEPS="1000", PAUSE="0.05"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(zombie.kill)
        committed = 0
        while committed < 5:  # the zombie has a line of its own
            line = zombie.stdout.readline()
            self.assertTrue(line, "the zombie trainer died early")
            committed = int(line.split()[1]) if line.startswith("committed") else committed
        replacement = subprocess.run(["/usr/bin/python3", script], env=dict(env, STEPS="20"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(0, replacement.returncode, replacement.stdout)
        self.assertIn("generation 2", replacement.stdout)
        out, _ = zombie.communicate(timeout=60)
        self.assertEqual(75, zombie.returncode, "the zombie stops at its first refused commit: " + out[-2000:])
        self.assertRegex(out, r"fenced 1 generation 2( \(pod pod-0\))? started")  # owner.json may not be written yet
        resumed = int(replacement.stdout.split("resumed ")[1].split()[0])
        ptr = storage.read_pointer(self.dir)
        self.assertEqual(2, ptr["generation"])
        self.assertEqual(resumed + 20, ptr["step"], "the job's latest is the replacement's own line")
        self.assertEqual(storage.ranked(self.dir)[0], ptr["file"])


if __name__ == "__main__":
    unittest.main()
