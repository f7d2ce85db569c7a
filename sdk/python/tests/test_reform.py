"""_reform.py without processes: generations and the state's signature."""

import unittest

from trainguard import _reform as reform


class FakeStore:
    """TCPStore's add/compare_set/set semantics (values are decimal strings)."""

    def __init__(self):
        self.kv = {}

    def add(self, key, n):
        self.kv[key] = str(int(self.kv.get(key, "0")) + n)
        return int(self.kv[key])

    def compare_set(self, key, expected, desired):
        if self.kv.get(key, "") == expected:
            self.kv[key] = desired
        return self.kv.get(key, "").encode()

    def set(self, key, value):
        self.kv[key] = value


class Generations(unittest.TestCase):
    def test_first_start_then_survivor_and_restarted_rank_meet(self):
        s = FakeStore()
        self.assertEqual([reform.join_generation(s, 0), reform.join_generation(s, 1)], [1, 1])
        # The restarted rank 1 asks first, the survivor later: both 2.
        self.assertEqual(reform.join_generation(s, 1), 2)
        self.assertEqual(reform.join_generation(s, 0), 2)

    def test_a_rank_that_dies_again_before_joining_moves_everyone_on(self):
        s = FakeStore()
        reform.join_generation(s, 0), reform.join_generation(s, 1)
        reform.join_generation(s, 1)  # restarted, killed again before the survivor came
        self.assertEqual(reform.join_generation(s, 1), 3)
        self.assertEqual(reform.join_generation(s, 0), 3)

    def test_rank_0_replaced_the_survivor_stays_out_and_the_restarted_rank_meets_it(self):
        """Rank 0's pod replaced (its node died): MASTER_ADDR names a new
        store whose rank 0 waits at generation 1. The survivor of the old
        store must not join it, or its restarted successor skips to 2."""
        old = FakeStore()
        reform.join_generation(old, 0), reform.join_generation(old, 1)
        self.assertFalse(reform.replaced(old, 1, 1), "the store it joined")
        new = FakeStore()
        self.assertEqual(reform.join_generation(new, 0), 1)  # the new rank 0's first trainer
        self.assertTrue(reform.replaced(new, 1, 1), "a store with no record of rank 1's generation 1")
        self.assertEqual(reform.join_generation(new, 1), 1, "the restarted rank 1 meets rank 0 at generation 1")

    def test_a_first_start_is_never_a_replaced_store(self):
        self.assertFalse(reform.replaced(FakeStore(), 1, 0))


class Signature(unittest.TestCase):
    def test_mismatch_names_the_object_and_key(self):
        mine = {"model": {"0.weight": "float32[32, 16]"}, "metrics": "dict"}
        theirs = {"model": {"0.weight": "float32[64, 16]"}, "metrics": "dict"}
        self.assertEqual(reform.mismatch(mine, theirs),
                         "model: 0.weight: float32[64, 16] in the peer's state, float32[32, 16] here")
        self.assertEqual(reform.mismatch(mine, mine), "")
        self.assertIn("extra: in the peer's state, not registered here",
                      reform.mismatch(mine, dict(theirs, extra="list")))

    def test_enabled_only_under_the_supervisor(self):
        env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_PORT": "1", "TORCHELASTIC_RESTART_COUNT": "2"}
        self.assertEqual(reform.generation(env), 0)
        self.assertEqual(reform.generation(dict(env, TRAINGUARD_SUPERVISED="1")), 2)
        self.assertEqual(reform.timeout({"TRAINGUARD_REFORM_TIMEOUT": "1m"}), 60.0)
        self.assertEqual(reform.timeout({}), reform.DEFAULT_TIMEOUT)


if __name__ == "__main__":
    unittest.main()
