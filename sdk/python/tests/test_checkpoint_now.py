"""The checkpoint-now request (_status.py POST, _requests.NowRequests):
real HTTP over real sockets, a real Migrator, no torch. The 2-process job
with real PyTorch is test/checkpoint's TestCheckpointNow."""

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
from test_status import free_port, get, read_until_closed, wait_for  # noqa: E402
from trainguard import Migrator  # noqa: E402
from trainguard import _protocol as proto  # noqa: E402
from trainguard import _requests as requests  # noqa: E402
from trainguard import _status as status  # noqa: E402


def post(port, body, path=status.CHECKPOINT_PATH):
    """(code, headers, answer) of a POST of body (bytes or a dict)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    # The server binds in a thread of its own: on a loaded machine the
    # first POST can come before it listens.
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, e.headers, json.loads(raw) if raw else None
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def raw(port, request):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(request)
        return read_until_closed(c)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class ServerPost(unittest.TestCase):
    """status.Server alone: the body, the rate limit, the bounds."""

    def server(self, fail=None, **kw):
        self.filed, self.clock = [], Clock()

        def checkpoint(reason):
            if fail:
                raise fail
            self.filed.append(reason)
            return 7

        s = status.Server(0, lambda: {"format": 1}, host="127.0.0.1", checkpoint=checkpoint,
                          min_interval=30, clock=self.clock, **kw)
        self.addCleanup(s.close)
        return s

    def test_accepted_with_the_step(self):
        s = self.server()
        code, _, answer = post(s.port, {"format": 1, "reason": "node a: MaintenancePlanned\n\x1b[2J" + "x" * 500})
        self.assertEqual(202, code)
        self.assertEqual({"format": 1, "step": 7}, answer)
        self.assertEqual(1, len(self.filed))
        self.assertEqual(proto.MAX_REASON, len(self.filed[0]), "bounded")
        self.assertTrue(self.filed[0].startswith("node a: MaintenancePlanned??[2Jxx"), self.filed[0])
        self.assertEqual(202, post(self.server().port, {"format": 1})[0], "the reason is optional")

    def test_a_second_request_inside_the_interval_is_429_and_files_nothing(self):
        s = self.server()
        self.assertEqual(202, post(s.port, {"format": 1, "reason": "a"})[0])
        self.clock.now += 12.5
        code, headers, answer = post(s.port, {"format": 1, "reason": "b"})
        self.assertEqual(429, code)
        self.assertEqual("18", headers["Retry-After"])
        self.assertIn("TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL", answer["error"])
        self.assertEqual(["a"], self.filed)
        self.assertEqual(1, s.rate_limited)
        self.clock.now += 18
        self.assertEqual(202, post(s.port, {"format": 1, "reason": "c"})[0])
        self.assertEqual(["a", "c"], self.filed)

    def test_bad_bodies_are_400_file_nothing_and_take_no_slot(self):
        s = self.server()
        for name, request, says in (
                ("not JSON", b"trainguard", "not JSON"),
                ("not an object", b"[1]", "not a JSON object"),
                ("nested deep", b"[" * 1000, "not JSON"),
                ("not UTF-8", b'{"format":1,"reason":"\xff"}', "not JSON"),
                ("unknown field", {"format": 1, "reason": "x", "path": "/etc"}, "unknown field 'path'"),
                ("format", {"format": 2}, "format must be 1"),
                ("format true", {"format": True}, "format must be 1"),
                ("no format", {"reason": "x"}, "format must be 1"),
                ("reason not a string", {"format": 1, "reason": ["x"]}, "reason must be a string")):
            with self.subTest(name):
                code, _, answer = post(s.port, request)
                self.assertEqual(400, code)
                self.assertIn(says, answer["error"])
        for name, request, says in (
                ("no Content-Length", b"POST /trainguard/checkpoint HTTP/1.1\r\n\r\n{}", b"Content-Length"),
                ("chunked", b"POST /trainguard/checkpoint HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                            b"Content-Length: 3\r\n\r\n{}\n", b"Transfer-Encoding"),
                ("two lengths", b"POST /trainguard/checkpoint HTTP/1.1\r\nContent-Length: 2\r\n"
                                b"content-length: 9\r\n\r\n{}", b"repeated"),
                ("more than its length", b"POST /trainguard/checkpoint HTTP/1.1\r\nContent-Length: 2\r\n\r\n"
                                         b'{"format":1}', b"Content-Length"),
                # Refused on its Content-Length, before a byte of it is read.
                ("oversized", b"POST /trainguard/checkpoint HTTP/1.1\r\nContent-Length: 2000\r\n\r\n",
                 b"more than 1024 bytes"),
                ("a huge length", b"POST /trainguard/checkpoint HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
                 b"Content-Length")):
            with self.subTest(name):
                answer = raw(s.port, request)
                self.assertTrue(answer.startswith(b"HTTP/1.1 400 "), answer)
                self.assertIn(says, answer)
        self.assertEqual([], self.filed)
        self.assertEqual(202, post(s.port, {"format": 1})[0], "no bad body took the slot")

    def test_a_request_that_cannot_be_filed_is_503_and_frees_the_slot(self):
        s = self.server(fail=OSError("read-only file system"))
        with self.assertLogs("trainguard", "WARNING"):
            code, _, answer = post(s.port, {"format": 1})
        self.assertEqual(503, code)
        self.assertIn("OSError", answer["error"])
        self.assertIsNone(s._last_accepted, "nothing filed: the next request may come at once")

    def test_only_post_and_only_its_path(self):
        s = self.server()
        self.assertTrue(raw(s.port, b"GET /trainguard/checkpoint HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 "))
        self.assertTrue(raw(s.port, b"POST /trainguard/checkpoint/../x HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                        .startswith(b"HTTP/1.1 405 "))
        self.assertEqual(1, get(s.port)["format"], "the status is served as before")
        self.assertEqual([], self.filed)

    def test_a_body_that_never_comes_is_closed_at_the_deadline(self):
        s = self.server(timeout=0.5)
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            c.sendall(b"POST /trainguard/checkpoint HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"format\":")
            started = time.monotonic()
            self.assertEqual(b"", read_until_closed(c))
            self.assertLess(time.monotonic() - started, 2.0)
        self.assertTrue(wait_for(lambda: s.in_flight == 0))
        self.assertEqual(1, s.timed_out)
        self.assertEqual([], self.filed)

    def test_without_a_checkpoint_callable_there_is_no_such_request(self):
        s = status.Server(0, lambda: {"format": 1}, host="127.0.0.1")
        self.addCleanup(s.close)
        self.assertEqual(405, post(s.port, {"format": 1})[0])

    def test_interval_from_env(self):
        self.assertEqual(30.0, proto.Config.from_env({}).now_interval)
        self.assertEqual(5.0, proto.Config.from_env({"TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL": "5s"}).now_interval)
        for bad in ("0", "-1s", "soon"):
            with self.subTest(bad=bad), self.assertLogs("trainguard", "WARNING"):
                self.assertEqual(30.0, proto.Config.from_env({"TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL": bad})
                                 .now_interval, "no setting turns the limit off")


class RankZero(Base):
    """NowRequests as global rank 0 reads the pods' requests."""

    def now(self, **env):
        settings, st, cps, dirs, _ = self.parts(WORLD_SIZE="2", **env)
        dirs.own()
        self.clock = Clock()
        return requests.NowRequests(settings, dirs, clock=self.clock)

    def file(self, pod, step, nonce="a" * 32, at=None, reason="r"):
        d = os.path.join(self.dir, ".trainguard", pod)
        os.makedirs(d, exist_ok=True)
        proto.write_json_atomic(os.path.join(d, proto.NOW_FILE), {
            "nonce": nonce, "step": step, "requested_at": time.time() if at is None else at, "reason": reason})

    def test_commits_the_step_asked_once_reached_then_one_per_interval(self):
        now = self.now()
        self.file("pod-1", 10)
        now.scan(9)
        self.assertFalse(now.due(9, None), "rank 0 has not reached the step the pod was at")
        self.assertTrue(now.due(10, None))
        now.taken(10, extra=True)
        self.assertFalse(now.due(11, None))
        self.file("pod-0", 20, nonce="b" * 32)
        now.scan(20)
        self.assertFalse(now.due(20, 10), "inside the interval: the job takes no second extra checkpoint")
        self.clock.now += 30
        self.assertTrue(now.due(21, 10), "after it, the request still waiting is taken")
        now.scan(21)
        now.taken(21, extra=True)
        self.assertIsNone(now.target, "a request read twice is one request")

    def test_a_commit_that_covers_the_step_answers_it(self):
        now = self.now()
        self.file("pod-1", 10)
        now.scan(10)
        self.assertFalse(now.due(11, 10), "a periodic commit of step 10 answered it")
        self.assertIsNone(now.target)

    def test_a_forged_step_is_the_next_step(self):
        now = self.now()
        self.file("pod-1", proto.MAX_GENERATION)
        now.scan(5)
        self.assertEqual(6, now.target)
        self.assertTrue(now.due(6, None))

    def test_stale_and_malformed_requests_are_not_taken(self):
        now = self.now()
        self.file("pod-1", 3, at=now.started - 3600)
        self.file("pod-2", 1, nonce="../x")
        with self.assertLogs("trainguard", "WARNING") as logs:
            now.scan(3)
        self.assertIn("ignoring the checkpoint-now request", "\n".join(logs.output))
        self.assertIsNone(now.target, "before this incarnation, or malformed")


class MigratorNow(Base):
    """One real Migrator: its port, its signal dir, its commit, and training on."""

    def test_a_request_is_committed_and_training_goes_on(self):
        port = free_port()
        m = self.migrator(TRAINGUARD_STATUS_PORT=str(port), TRAINGUARD_SERIALIZER="json")
        c = Counter()
        m.register("c", c)
        m.listening()
        for _ in range(3):
            with m.step():
                c.n += 1
        code, _, answer = post(port, {"format": 1, "reason": "test"})
        self.assertEqual(202, code)
        self.assertEqual(3, answer["step"])
        for _ in range(40):
            time.sleep(0.1)  # the listener reads the request between steps
            with m.step():
                c.n += 1
            m._checkpoints.writer.wait()
            s = get(port)
            if s["committed_step"] is not None and s["committed_step"] >= answer["step"]:
                break
        else:
            self.fail("not committed: %s" % get(port))
        committed = s["committed_step"]
        self.assertLessEqual(committed, answer["step"] + 3, "within a few steps")
        self.assertEqual(429, post(port, {"format": 1})[0])
        with m.step():
            c.n += 1
        reader = Migrator(env=self.env(TRAINGUARD_SERIALIZER="json"), read_only=True)
        self.addCleanup(reader.close)
        c2 = Counter()
        reader.register("c", c2)
        self.assertEqual(committed, reader.load_ckpt()["step"])
        self.assertEqual(committed, c2.n, "the checkpoint holds that step's state")
        self.assertGreater(m.global_step, committed, "training went on")


if __name__ == "__main__":
    unittest.main()
