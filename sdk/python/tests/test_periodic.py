"""Periodic checkpoints in the background (trainguard._periodic), with real
PyTorch tensors: what is saved is the state at the step, whatever training
does to the tensors afterwards."""

import os
import time
import unittest

import torch

from test_migrator import Base, Counter

from trainguard import Fenced
from trainguard import _periodic as periodic
from trainguard import _protocol as proto
from trainguard import _storage as storage


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class ScheduleTest(unittest.TestCase):
    def test_steps_and_seconds_whichever_first(self):
        clock = FakeClock()
        s = periodic.Schedule(steps=10, seconds=60, clock=clock)
        self.assertFalse(s.due(100), "not begun")
        s.begin(100)  # a resume at step 100
        s.begin(105)  # once
        self.assertFalse(s.due(100))
        self.assertFalse(s.due(109))
        self.assertTrue(s.due(110))
        s.saved(110)
        clock.now = 59
        self.assertFalse(s.due(115))
        clock.now = 60
        self.assertTrue(s.due(115), "60 s of training before 10 more steps")
        self.assertFalse(periodic.Schedule().due(10 ** 6), "off by default")

    def test_snapshot_is_independent_of_the_live_state(self):
        live = {"w": torch.zeros(3), "nested": [torch.ones(2), (1, "x")], "lr": 0.1}
        live_od = torch.nn.Linear(2, 1).state_dict()
        copy = periodic.snapshot({"a": live, "b": live_od}, torch)
        live["w"].add_(5)
        live["nested"][0].mul_(7)
        live_od["weight"].zero_()
        self.assertTrue(torch.equal(copy["a"]["w"], torch.zeros(3)))
        self.assertTrue(torch.equal(copy["a"]["nested"][0], torch.ones(2)))
        self.assertEqual((1, "x"), copy["a"]["nested"][1])
        self.assertFalse(torch.equal(copy["b"]["weight"], live_od["weight"]))
        self.assertEqual(live_od._metadata, copy["b"]._metadata, "a module's version info is kept")


class Background(Base):
    def migrator_with_model(self, **extra):
        m = self.migrator(**extra)
        model = torch.nn.Linear(4, 1)
        m.register("model", model)
        return m, model

    def test_saves_the_state_of_the_step_while_training_goes_on(self):
        m, model = self.migrator_with_model(TRAINGUARD_CHECKPOINT_EVERY_STEPS="3", TRAINGUARD_TEST_SAVE_DELAY="0.5")
        m.listening()
        for _ in range(3):
            with m.step():
                model.weight.data.add_(1)
        at_step_3 = model.weight.detach().clone()
        started = time.monotonic()
        with m.step():  # the save is writing (0.5 s) while this step runs
            model.weight.data.add_(100)
        self.assertLess(time.monotonic() - started, 0.4, "the step did not wait for the write")
        m.close()  # waits for the save in flight
        self.assertEqual(1, m.periodic_stats["saves"])
        restored = torch.nn.Linear(4, 1)
        reader = self.migrator()
        reader.register("model", restored)
        meta = reader.load_ckpt()
        self.assertEqual(3, meta["step"])
        self.assertTrue(torch.equal(at_step_3, restored.weight), "the state at step 3, not after")

    def test_one_save_at_a_time_a_due_save_waits_for_the_last(self):
        m, model = self.migrator_with_model(TRAINGUARD_TEST_SAVE_DELAY="0.3")
        m.periodic(steps=1).listening()
        for _ in range(4):
            with m.step():
                pass
        m.close()
        self.assertEqual(4, m.periodic_stats["saves"], "every due checkpoint is taken")
        self.assertGreaterEqual(m.periodic_stats["waited"], 3, "each waited for the one before")
        self.assertEqual(4, storage.read_pointer(self.dir)["step"])

    def test_a_termination_request_waits_for_the_save_in_flight(self):
        m, model = self.migrator_with_model(TRAINGUARD_TEST_SAVE_DELAY="0.3")
        m.periodic(steps=1).listening()
        with m.step():
            pass  # starts a background save of step 1
        self.write_request(1)
        ack = self.step_until_ack(m, 1)
        self.assertEqual("ok", ack["status"])
        self.assertEqual(ack["checkpoint"], storage.read_pointer(self.dir)["file"], "the request's checkpoint is the latest")
        self.assertEqual(2, len(storage.list_checkpoints(self.dir)), "both committed, one after the other")

    def test_a_refused_background_save_stops_the_stale_trainer(self):
        m, _ = self.migrator_with_model()
        m.periodic(steps=1).listening()
        self.migrator().listening()  # a newer incarnation claims its generation
        with m.step():
            pass  # the background save is refused
        m._checkpoints.writer.wait()
        with self.assertRaises(Fenced):
            with m.step():
                pass
        self.assertEqual([], storage.list_checkpoints(self.dir))

    def test_a_failed_background_save_is_counted_and_training_goes_on(self):
        m, _ = self.migrator_with_model()
        m.periodic(steps=1).listening()
        os.chmod(self.dir, 0o500)
        self.addCleanup(os.chmod, self.dir, 0o755)
        if os.access(self.dir, os.W_OK):  # root ignores the mode: make the write fail another way
            storage_write = storage.write_checkpoint
            storage.write_checkpoint = lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device"))
            self.addCleanup(setattr, storage, "write_checkpoint", storage_write)
        with m.step():
            pass
        m._checkpoints.writer.wait()
        with m.step():
            pass
        m._checkpoints.writer.wait()
        self.assertEqual(2, m.periodic_stats["failures"], "each failed save is counted, none stops training")
        self.assertEqual(2, m.global_step)


class PeriodicTest(Base):
    def test_due_on_global_rank_0_only_and_written_in_the_background(self):
        settings, st, cps, _, _ = self.parts(TRAINGUARD_CHECKPOINT_EVERY_STEPS="2")
        st.register("c", Counter())
        p = periodic.Periodic(settings, st, cps)
        due = []
        for _ in range(4):
            st.completed()
            due.append(p.due())
            if due[-1]:
                p.save()
        cps.writer.wait()
        self.assertEqual([False, True, False, True], due)
        self.assertEqual(2, p.stats["saves"])
        self.assertEqual(4, cps.committed_step)
        other = periodic.Periodic(proto.Settings(self.env(RANK="1", TRAINGUARD_CHECKPOINT_EVERY_STEPS="1")), st, cps)
        st.completed()
        self.assertFalse(other.due())

    def test_the_jobs_own_periodic_call_wins_over_the_platforms_interval(self):
        # The webhook injects the platform's default as TRAINGUARD_CHECKPOINT_EVERY.
        settings, st, cps, _, _ = self.parts(TRAINGUARD_CHECKPOINT_EVERY="600s")
        self.assertEqual(600.0, settings.config.every_seconds)
        p = periodic.Periodic(settings, st, cps)
        p.set(steps=2)
        st.completed()
        p.due()
        self.assertEqual((2, 0.0), (p._schedule.steps, p._schedule.seconds), "periodic() replaces the default")



if __name__ == "__main__":
    unittest.main()
