"""_state.State: what the trainer holds, captured and restored in place."""

import unittest

from test_migrator import Counter, Optimizer

from trainguard import _state as state


class StateTest(unittest.TestCase):
    def test_capture_and_restore_in_place(self):
        s = state.State()
        metrics, history, counter = {"loss": 1.0}, [1], Counter(3)
        for name, obj in (("metrics", metrics), ("history", history), ("counter", counter)):
            s.register(name, obj)
        s.completed()
        captured = s.capture(serializer="json")  # a copy training cannot change
        metrics["loss"], counter.n = 0.5, 9
        history.append(2)
        self.assertEqual({"metrics": {"loss": 1.0}, "history": [1], "counter": {"n": 3}}, captured)
        with self.assertLogs("trainguard", "WARNING") as logs:
            s.restore(dict(captured, extra=1), 7, "ckpt-7")
        self.assertIn("'extra', which nobody registered", "\n".join(logs.output))
        self.assertEqual(({"loss": 1.0}, [1], 3, 7), (metrics, history, counter.n, s.step))

    def test_a_step_is_torn_when_the_optimizer_stepped_since_the_boundary(self):
        s, opt = state.State(), Optimizer()
        s.register("optimizer", opt)
        self.assertFalse(s.torn())
        opt.step()
        self.assertTrue(s.torn(), "stepped inside a step() block that did not complete")
        s.completed()
        self.assertFalse(s.torn())
        opt.step()
        with self.assertLogs("trainguard", "WARNING"):
            s.restore({}, 4, "ckpt")
        self.assertFalse(s.torn(), "a restored state is at a boundary")

    def test_register_refuses_what_it_cannot_restore(self):
        with self.assertRaisesRegex(TypeError, "cannot checkpoint 'x' \\(int\\)"):
            state.State().register("x", 3)


if __name__ == "__main__":
    unittest.main()
