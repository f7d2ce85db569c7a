"""Sharded state (_shards.py): what register() refuses, a sharded commit
and its load, the world-size refusal, and today's format still loading.
The real ZeroRedundancyOptimizer over gloo is test/checkpoint's
(sharded_test.go); here a stand-in with its shape, no process group."""

import json
import os
import unittest

from test_migrator import Base, Counter

from trainguard import _storage as storage


class ZeroRedundancyOptimizer:
    """The shape of torch's: state_dict() needs a consolidation (a
    collective), the local optimizer holds this rank's part."""

    def __init__(self, n=0, overlap=False):
        self.optim = Counter(n)
        self.optim.param_groups = [{"lr": 0.1, "params": []}]
        self.param_groups = [{"lr": 0.5, "params": []}]
        self._overlap_with_ddp = overlap

    def state_dict(self):
        raise RuntimeError("Optimizer state has not been consolidated on this rank.")

    def load_state_dict(self, state):
        raise AssertionError("a part must go to the local optimizer")

    @staticmethod
    def _sync_param_groups(src, dst):
        for s, d in zip(src, dst):
            d.update({k: v for k, v in s.items() if k != "params"})


class FullyShardedDataParallel(Counter):
    pass


class ShardsTest(Base):
    def test_register_refuses_what_it_cannot_save_and_names_what_it_can(self):
        _, st, _, _, _ = self.parts()
        for name, obj, what in (("model", FullyShardedDataParallel(), "FullyShardedDataParallel holds sharded"),
                                ("opt", ZeroRedundancyOptimizer(overlap=True), r"ZeroRedundancyOptimizer\(overlap_with_ddp=True\)")):
            with self.assertRaisesRegex(TypeError, r"cannot checkpoint %r: %s.*supported for "
                                        r"torch.distributed.optim.ZeroRedundancyOptimizer \(overlap_with_ddp=False\)"
                                        % (name, what)):
                st.register(name, obj)
        self.assertEqual({}, st.objects)
        st.register("opt", ZeroRedundancyOptimizer())
        self.assertEqual(["opt"], st.sharded)

    def test_sharded_commit_holds_every_part_and_loads_each_rank_its_own(self):
        _, st, cps, _, _ = self.parts()
        st.register("c", Counter(3))
        st.register("opt", ZeroRedundancyOptimizer(7))
        st.completed()
        name = cps.save()
        with open(os.path.join(self.dir, name, storage.COMMIT_FILE)) as f:
            commit = json.load(f)
        self.assertEqual((storage.SHARDED_FORMAT, 1), (commit["format"], commit["shards"]))
        self.assertIn("shard-00000.json", commit["files"])

        _, st2, reader, _, _ = self.parts()
        c, opt = Counter(), ZeroRedundancyOptimizer()
        opt.optim.param_groups[0]["lr"] = 0.9
        st2.register("c", c)
        st2.register("opt", opt)
        _, payload = reader.load()
        st2.restore(payload["states"], payload["step"], name, payload["sharded"])
        self.assertEqual((3, 7), (c.n, opt.optim.n))

    def test_another_world_size_is_refused_naming_both_never_an_older_checkpoint(self):
        _, st, cps, _, _ = self.parts()
        st.register("c", Counter(1))
        st.completed()
        cps.save()  # today's format: not sharded
        st.register("opt", ZeroRedundancyOptimizer(2))
        st.completed()
        cps.save()
        _, _, reader, _, _ = self.parts(WORLD_SIZE="2")
        with self.assertRaisesRegex(RuntimeError, "saved by 1 ranks, and this job runs 2 ranks.*Run 1 ranks"):
            reader.resolve()

    def test_a_rank_reports_only_its_own_part(self):
        # Every rank's report of what it wrote becomes commit.json: a
        # report naming another rank's part or the common state put another
        # size there (the checkpoint never loaded), whatever the writer.
        mine = [[{"state.json": 10, "tensors.pt": 20, "shard-00000.json": 3}, ""], [{"shard-00001.json": 4}, ""]]
        self.assertEqual(storage._faults(mine), [])
        for report, want in (
                ({"state.json": 9}, "rank 1: reported files that are not its part"),
                ({"shard-00000.json": 9}, "rank 1: reported files that are not its part"),
                ({"shard-00001.json": -1}, "rank 1: reported files that are not its part"),
                ({"shard-00001.json": True}, "rank 1: reported files that are not its part"),
                ("shard-00001.json", "rank 1: reported files that are not its part")):
            faults = storage._faults([mine[0], [report, ""]])
            self.assertEqual(len(faults), 1, report)
            self.assertTrue(faults[0].startswith(want), faults)
        self.assertEqual(storage._faults([mine[0], [{}, "rank 1: OSError: disk full"]]), ["rank 1: OSError: disk full"])
        self.assertEqual(storage._faults([mine[0], "junk"]), ["rank 1: reported files that are not its part "
                                                              "(shard-00001.json, shard-00001.pt)"])

    def test_a_checkpoint_of_todays_format_still_loads(self):
        # Written as format 2 has always been written, file by file.
        name = storage.ckpt_name(4)
        path = os.path.join(self.dir, name)
        os.makedirs(path)
        state = {"format": 2, "step": 4, "saved_at": 1.0, "world_size": 2, "job": "", "generation": 0,
                 "states": {"c": {"n": 11}}}
        with open(os.path.join(path, "state.json"), "w") as f:
            json.dump(state, f)
        with open(os.path.join(path, "commit.json"), "w") as f:
            json.dump({"format": 2, "generation": 0,
                       "files": {"state.json": os.path.getsize(os.path.join(path, "state.json"))}}, f)
        _, st, reader, _, _ = self.parts(WORLD_SIZE="3", RANK="2")
        c = Counter()
        st.register("c", c)
        chosen, payload = reader.load()
        st.restore(payload["states"], payload["step"], chosen, payload["sharded"])
        self.assertEqual((name, 4, 11), (chosen, payload["step"], c.n))


if __name__ == "__main__":
    unittest.main()
