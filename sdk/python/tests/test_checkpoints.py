"""_checkpoints.Checkpoints: this process's saves and loads and its fence
generation, without the Migrator."""

import unittest

from test_migrator import Base, Counter

from trainguard import Fenced
from trainguard import _fence as fence
from trainguard import _storage as storage


class CheckpointsTest(Base):
    def test_save_commits_once_per_step_and_load_restores_it(self):
        _, st, cps, _, _ = self.parts()
        st.register("c", Counter(5))
        st.completed()
        name = cps.save()
        self.assertEqual((1, 1), (cps.committed_step, cps.generation), "the first save claims")
        self.assertGreater(cps.last_bytes, 0)
        self.assertIsNone(cps.save(unless_step=1), "the step is already committed")
        self.assertEqual([name], storage.list_checkpoints(self.dir))

        _, st2, reader, _, _ = self.parts()
        got = Counter()
        st2.register("c", got)
        chosen = reader.load()
        self.assertEqual((name, 1), (chosen[0], chosen[1]["step"]))
        self.assertEqual((name, 1), (reader.load()[0], reader.committed_step), "loaded again from the volume")
        self.assertEqual(0, reader.generation, "loading claims nothing")
        self.assertEqual((1, cps.committed_at), reader.committed(), "the pointer rank 0 wrote")

    def test_a_reader_refuses_to_save_or_claim(self):
        _, _, cps, _, _ = self.parts()
        cps.read_only = True
        for call in (cps.save, cps.claim):
            with self.assertRaisesRegex(RuntimeError, "read-only"):
                call()
        self.assertEqual([], fence.generations(self.dir))

    def test_a_stale_incarnation_is_refused_and_counted(self):
        _, st, cps, _, _ = self.parts()
        st.register("c", Counter())
        cps.claim()
        fence.claim(self.dir, pod="replacement")
        with self.assertRaises(Fenced), self.assertLogs("trainguard", "ERROR"):
            cps.save()
        self.assertEqual(1, cps.refused_commits)
        self.assertEqual("training", st.phase, "the phase is put back")


if __name__ == "__main__":
    unittest.main()
