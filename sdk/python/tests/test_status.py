"""The work-at-risk status the SDK serves to trainguard's controller
(_status.py): real HTTP over a real socket."""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from unittest import mock

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

    def test_timeout_from_env(self):
        self.assertEqual(status.timeout_from_env({}), status.DEFAULT_TIMEOUT)
        self.assertEqual(status.timeout_from_env({"TRAINGUARD_STATUS_TIMEOUT": "500ms"}), 0.5)
        self.assertEqual(status.timeout_from_env({"TRAINGUARD_STATUS_TIMEOUT": "5s"}), 5.0)
        for bad in ("0", "0s", "-1s", "x", "5 parsecs"):
            with self.subTest(bad=bad), self.assertLogs("trainguard", "WARNING"):
                self.assertEqual(status.timeout_from_env({"TRAINGUARD_STATUS_TIMEOUT": bad}), status.DEFAULT_TIMEOUT,
                                 "no setting turns the deadline off")

    def test_the_migrator_serves_with_the_timeout_of_its_env(self):
        port = free_port()
        m = self.migrator(TRAINGUARD_STATUS_PORT=str(port), TRAINGUARD_STATUS_TIMEOUT="300ms")
        m.listening()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET /trainguard/status HTTP/1.1\r\n")
            started = time.monotonic()
            self.assertEqual(b"", read_until_closed(c))
            self.assertLess(time.monotonic() - started, 1.5, "closed at 300 ms, not the default 2 s")


def read_until_closed(conn):
    """What the server sends before it closes the connection (a reset counts as closed)."""
    got = b""
    try:
        while True:
            chunk = conn.recv(4096)
            if not chunk:
                return got
            got += chunk
    except ConnectionResetError:
        return got


def half_sent(port):
    """A connection that sent part of a request and then nothing more."""
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"GET /trainguard/status HTTP/1.1\r\nHost: x\r\n")
    return c


def wait_for(cond, limit=5.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


class BoundedServer(unittest.TestCase):
    """status.Server alone: its deadline and its cap, over real sockets."""

    def server(self, **kw):
        s = status.Server(0, lambda: {"format": 1}, host="127.0.0.1", **kw)
        self.addCleanup(s.close)
        return s

    def connections(self):
        conns = []
        self.addCleanup(lambda: [c.close() for c in conns])
        return conns

    def test_a_half_sent_request_is_closed_at_the_deadline(self):
        s = self.server(timeout=0.5)
        conns = self.connections()
        conns.append(half_sent(s.port))
        self.assertTrue(wait_for(lambda: s.in_flight == 1))
        started = time.monotonic()
        self.assertEqual(b"", read_until_closed(conns[0]), "closed unanswered")
        took = time.monotonic() - started
        self.assertLess(took, 2.0, "the deadline, not never")
        self.assertTrue(wait_for(lambda: s.in_flight == 0), "its slot is free again")
        self.assertEqual(1, s.timed_out)

    def test_the_deadline_is_for_the_whole_request_however_slow_its_bytes(self):
        """One byte every 0.2 s keeps every single read short: the deadline
        still ends the connection at 1 s in all."""
        s = self.server(timeout=1.0)
        conns = self.connections()
        c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        conns.append(c)
        started = time.monotonic()
        closed_at = None
        request = b"GET /trainguard/status HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 100
        for byte in request:
            try:
                c.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic()
                break
            time.sleep(0.2)
            if s.in_flight == 0:
                closed_at = time.monotonic()
                break
        self.assertIsNotNone(closed_at, "the server kept the dribbling connection")
        self.assertLess(closed_at - started, 2.5)
        self.assertEqual(1, s.timed_out)

    def test_beyond_the_cap_a_connection_is_closed_at_once_not_queued(self):
        s = self.server(timeout=3.0, max_in_flight=3)
        conns = self.connections()
        for _ in range(3):
            conns.append(half_sent(s.port))
        self.assertTrue(wait_for(lambda: s.in_flight == 3))
        # Every slot is taken: a fourth is turned away well before any deadline.
        for i in range(5):
            started = time.monotonic()
            try:
                extra = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            except ConnectionResetError:  # reset before connect() returned (gVisor's stack does that)
                pass
            else:
                conns.append(extra)
                try:
                    extra.sendall(b"GET /trainguard/status HTTP/1.1\r\n\r\n")
                except OSError:
                    pass
                self.assertEqual(b"", read_until_closed(extra), "turned away unanswered")
            self.assertLess(time.monotonic() - started, 1.5, "closed at once, not when a slot frees")
        self.assertEqual(5, s.refused)
        self.assertEqual(3, s.in_flight, "never more than the cap")
        # Once the held connections reach their deadline, a request is served.
        self.assertTrue(wait_for(lambda: s.in_flight == 0, 5))
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (s.port, status.PATH), timeout=5) as r:
            self.assertEqual({"format": 1}, json.loads(r.read()))

    def test_many_half_sent_connections_take_no_more_threads_than_the_cap(self):
        s = self.server(timeout=10.0, max_in_flight=4)
        conns = self.connections()
        before = threading.active_count()
        for _ in range(100):
            try:
                conns.append(half_sent(s.port))
            except OSError:  # turned away before the send: as good
                pass
        self.assertTrue(wait_for(lambda: s.refused == 96, 10))
        self.assertEqual(4, s.in_flight)
        self.assertLessEqual(threading.active_count() - before, 4)

    def test_answers_a_whole_request_and_nothing_else(self):
        s = self.server(timeout=2.0)
        for request, want in ((b"GET /trainguard/status HTTP/1.0\r\n\r\n", b"HTTP/1.1 200 OK"),
                              (b"GET /trainguard/status?x=1 HTTP/1.1\r\n\r\n", b"HTTP/1.1 404 "),
                              (b"POST /trainguard/status HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 405 "),
                              (b"nonsense\r\n\r\n", b"HTTP/1.1 400 ")):
            with self.subTest(request=request), socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
                c.sendall(request)
                self.assertTrue(read_until_closed(c).startswith(want))
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            c.sendall(b"GET /" + b"a" * (status.MAX_REQUEST_HEAD + 10))
            self.assertEqual(b"", read_until_closed(c), "an endless head is not read to its end")


class HostNetwork(Base):
    """The kubelet writes /etc/hosts with a header of its own in a pod on the
    node's network; the controller never reads such a pod."""

    KUBELET_POD = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n10.88.0.7\tjob-master-0\n"
    KUBELET_HOST = "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n10.0.0.3 node-a\n"

    def hosts(self, text):
        f = tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False)
        self.addCleanup(os.unlink, f.name)
        with f:
            f.write(text)
        return f.name

    def test_host_network(self):
        self.assertTrue(status.host_network(self.hosts(self.KUBELET_HOST)))
        self.assertFalse(status.host_network(self.hosts(self.KUBELET_POD)))
        self.assertFalse(status.host_network(self.hosts("127.0.0.1 localhost\n")), "not the kubelet's: served")
        self.assertFalse(status.host_network(os.path.join(self.dir, "missing")))

    def test_not_served_in_a_host_network_pod(self):
        port = free_port()
        with mock.patch.object(status, "HOSTS_FILE", self.hosts(self.KUBELET_HOST)):
            m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
            with self.assertLogs("trainguard", "INFO") as logs:
                m.listening()
        self.assertIn("a host-network pod: not serving", "\n".join(logs.output))
        self.assertIsNone(m._status)
        with self.assertRaises(OSError):
            get(port)
        with socket.socket() as s:
            s.bind(("", port))  # nobody holds the port

    def test_served_in_a_pod_on_the_pod_network(self):
        port = free_port()
        with mock.patch.object(status, "HOSTS_FILE", self.hosts(self.KUBELET_POD)):
            m = self.migrator(TRAINGUARD_STATUS_PORT=str(port))
            m.listening()
        self.assertEqual(1, get(port)["format"])


if __name__ == "__main__":
    unittest.main()
