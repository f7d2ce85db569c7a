"""_exit.Stopping: this pod's termination, without the Migrator."""

import os
import unittest

from test_migrator import NONCE, Base

from trainguard import _exit as exiting
from trainguard import _protocol as proto


class StoppingTest(Base):
    def test_the_ack_found_at_start_is_not_a_termination_the_next_is(self):
        settings, st, _, _, reqs = self.parts(TRAINGUARD_AFTER_CHECKPOINT="exit", TRAINGUARD_EXIT_WAIT="5s")
        self.write_request(1)
        reqs.ack({"pod-0": (1, NONCE)}, 0, "c1", 1, "")
        stopping = exiting.Stopping(settings, st, reqs)
        self.addCleanup(stopping.sigterm.restore)
        stopping.begin()
        stopping.watch_own_ack()
        self.assertIsNone(stopping.termination)
        self.write_request(2)
        reqs.ack({"pod-0": (2, NONCE)}, 0, "", 0, "")
        stopping.watch_own_ack()
        stopping.note(2, NONCE, "c2")  # rank 0 names the checkpoint the listener's note lacked
        self.assertEqual((2, NONCE, "c2"), stopping.termination)
        proto.write_json_atomic(os.path.join(self.signal, proto.DONE_FILE),
                                {"generation": 2, "nonce": NONCE, "outcome": "saved"})
        seen = []
        stopping.terminate(lambda name: None, seen.append)
        self.assertEqual([("c2", "saved", "done")], [(i["checkpoint"], i["outcome"], i["why"]) for i in seen])
        self.assertEqual(("training", None), (st.phase, stopping.termination))


if __name__ == "__main__":
    unittest.main()
