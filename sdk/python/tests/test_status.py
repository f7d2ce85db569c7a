"""The work-at-risk status the SDK serves to trainguard's controller
(_status.py): real HTTP over a real socket."""

import json
import os
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from test_migrator import Base, Counter  # noqa: E402
from trainguard import _status as status  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path=status.PATH):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        return json.loads(r.read())


class StatusTest(Base):
    def test_serves_the_last_commit_and_the_save_time(self):
        port = free_port()
        m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
        m.register("c", Counter())
        m.listening()
        s = get(port)
        self.assertEqual(s["format"], 1)
        self.assertIsNone(s["committed_at"], "nothing committed yet")
        for _ in range(3):
            with m.step():
                pass
        before = time.time()
        m.save_ckpt()
        with m.step():
            pass
        s = get(port)
        self.assertEqual(s["step"], 4)
        self.assertEqual(s["committed_step"], 3)
        self.assertLessEqual(abs(s["committed_at"] - before), 5)
        self.assertGreaterEqual(s["save_seconds"], 0)
        self.assertLessEqual(s["now"] - time.time(), 1)

    def test_another_rank_reads_rank_zeros_pointer(self):
        port = free_port()
        writer = self.migrator(TRAINGUARD_STATUS_PORT="0")
        writer.register("c", Counter())
        with writer.step():
            pass
        writer.save_ckpt()
        other = self.migrator(TRAINGUARD_STATUS_PORT=str(port), RANK="1", WORLD_SIZE="2",
                              TRAINGUARD_POD_NAME="pod-1", TRAINGUARD_SIGNAL_DIR=self.signal + "-1")
        other.register("c", Counter())
        other.listening()
        s = get(port)
        self.assertEqual(s["committed_step"], 1)
        self.assertIsNotNone(s["committed_at"])
        self.assertIsNone(s["save_seconds"], "only the writer knows its save time")

    def test_only_the_status_path(self):
        port = free_port()
        m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
        m.listening()
        with self.assertRaises(urllib.error.HTTPError) as e:
            get(port, "/../etc/passwd")
        self.assertEqual(e.exception.code, 404)

    def test_a_taken_port_does_not_stop_training(self):
        with socket.socket() as taken:
            taken.bind(("", 0))
            taken.listen()
            port = taken.getsockname()[1]
            m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
            m.register("c", Counter())
            with self.assertLogs("trainguard", "WARNING") as logs:
                m.listening()
            self.assertIn("not serving the work-at-risk status", "\n".join(logs.output))
            with m.step():
                pass
            m.save_ckpt()

    def test_closed_with_the_migrator(self):
        port = free_port()
        m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
        m.listening()
        get(port)
        m.close()
        with self.assertRaises(OSError):
            get(port)

    def test_port_from_env(self):
        self.assertEqual(status.port_from_env({}), 9602)
        self.assertEqual(status.port_from_env({"TRAINGUARD_STATUS_PORT": "off"}), 0)
        self.assertEqual(status.port_from_env({"TRAINGUARD_STATUS_PORT": "0"}), 0)
        self.assertEqual(status.port_from_env({"TRAINGUARD_STATUS_PORT": "9700"}), 9700)
        with self.assertLogs("trainguard", "WARNING"):
            self.assertEqual(status.port_from_env({"TRAINGUARD_STATUS_PORT": "99999"}), 9602)
        with self.assertLogs("trainguard", "WARNING"):
            self.assertEqual(status.port_from_env({"TRAINGUARD_STATUS_PORT": "x"}), 9602)


if __name__ == "__main__":
    unittest.main()
