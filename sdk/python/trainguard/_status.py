"""The trainer's work at risk, served to trainguard's controller.

trainguard cannot read a job's checkpoint volume, and Kueue cannot see
checkpoints at all. Local rank 0 of every listening pod serves one small
JSON document on TRAINGUARD_STATUS_PORT (default 9602):

    GET /trainguard/status
    {"format": 1, "now": <unix s>, "step": <int>, "committed_step": <int|null>,
     "committed_at": <unix s|null>, "save_seconds": <float|null>}

`committed_*` is the job's last committed checkpoint (global rank 0 knows
it; the other pods read the pointer rank 0 writes), `save_seconds` how long
global rank 0's last save took. The controller turns it into the job's work
at risk and a Kueue priority boost (docs/preemption.md). Nothing here is
secret (a step count and two times), nothing is read from a GET but its
request line, and of that path the server answers only GET. A serving
failure (the port taken) is logged once and training goes on.

The port is reachable by anyone on the pod network, and the trainer's file
descriptors are what its checkpoints, heartbeats and acks are written with:
a server that kept a thread and a descriptor per connection, with no
deadline, let about 1,000 half-sent requests exhaust a real trainer's 1,024
descriptors, and every checkpoint after that failed. So a connection gets
TRAINGUARD_STATUS_TIMEOUT (default 2s, the controller's own timeout) in
all, however slowly its bytes come, and at most MAX_IN_FLIGHT are served at
once; every connection beyond them is closed as soon as it is accepted,
never queued. The server holds at most MAX_IN_FLIGHT + 2 descriptors (the
listener, the connections served, one being turned away) and
MAX_IN_FLIGHT + 1 threads, whatever the port receives. Host-network pods do
not serve at all (host_network()): the controller never reads them, and
there the port would be the node's.

It also takes one request that changes something: POST
/trainguard/checkpoint with {"format": 1, "reason": "<text>"} (at most
MAX_CHECKPOINT_BODY bytes, Content-Length required) asks the job to commit
its next completed step and train on (docs/checkpoint-protocol.md,
"Checkpoint now"). The answer, 202 {"format": 1, "step": S}, promises a
commit of S or later: the caller polls GET /trainguard/status until
committed_step >= S. The server only writes the request into this pod's
signal dir, where global rank 0 reads it; the reason is sanitised and
logged, never used to name anything. Anyone on the pod network can send
it, so at most one is accepted per TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL
(default 30s; 429 with Retry-After before that), and a bad body is refused
(400) before it counts. The deadline and MAX_IN_FLIGHT bound it as a GET.
"""

import json
import logging
import math
import socket
import struct
import threading
import time

from . import _protocol as proto

log = logging.getLogger("trainguard")

PATH = "/trainguard/status"  # Go: contract.StatusPath
CHECKPOINT_PATH = "/trainguard/checkpoint"  # Go: contract.CheckpointNowPath
DEFAULT_PORT = 9602  # Go: contract.StatusPort
# {"format":1,"reason":"..."}: a reason of a few words is about 100 bytes.
MAX_CHECKPOINT_BODY = 1024
FORMAT = 1
# The controller reads one pod of each job every 10 s, with a 2 s timeout
# (internal/controllers/boost): a connection still unanswered after 2 s is
# one nobody waits for any more.
DEFAULT_TIMEOUT = 2.0
# Requests served at once. The controller's leader sends one at a time per
# pod; a few more leave room for a person's curl or a second replica in a
# leader change, and bound the descriptors and threads a flood can take.
MAX_IN_FLIGHT = 4
# The controller's request head is about 100 bytes.
MAX_REQUEST_HEAD = 4096
# The kubelet writes every container's /etc/hosts and starts it with this
# line in a pod on the node's network (pkg/kubelet, managedHostsHeaderWithHostNetwork).
HOSTS_FILE = "/etc/hosts"
HOST_NETWORK_HOSTS_HEADER = b"# Kubernetes-managed hosts file (host network)."


def port_from_env(env):
    """The port to serve on, or 0 for none (TRAINGUARD_STATUS_PORT=0 or off)."""
    raw = (env.get("TRAINGUARD_STATUS_PORT") or "").strip()
    if raw == "":
        return DEFAULT_PORT
    if raw.lower() in ("0", "off", "disabled"):
        return 0
    try:
        port = int(raw)
    except ValueError:
        log.warning("trainguard: TRAINGUARD_STATUS_PORT=%r is not a port; serving on %d", raw, DEFAULT_PORT)
        return DEFAULT_PORT
    if not 1 <= port <= 65535:
        log.warning("trainguard: TRAINGUARD_STATUS_PORT=%d is out of range; serving on %d", port, DEFAULT_PORT)
        return DEFAULT_PORT
    return port


def timeout_from_env(env):
    """Seconds one connection may take in all (TRAINGUARD_STATUS_TIMEOUT, a
    Go duration such as 2s or 500ms). There is no "no timeout": that is the
    flood this bound is for, so 0, a negative or an unreadable value is the
    default, with a warning."""
    raw = (env.get("TRAINGUARD_STATUS_TIMEOUT") or "").strip()
    if raw == "":
        return DEFAULT_TIMEOUT
    seconds = proto._duration_seconds(raw, None)
    if seconds is None or not seconds > 0:
        log.warning("trainguard: TRAINGUARD_STATUS_TIMEOUT=%r is not a positive duration; using %gs",
                    raw, DEFAULT_TIMEOUT)
        return DEFAULT_TIMEOUT
    return seconds


def host_network(hosts_file=None):
    """True when this container is in a pod on the node's network, as the
    kubelet's header of /etc/hosts says. The webhook injects nothing that
    tells (and status.podIP equals status.hostIP only there, but neither is
    injected); the kubelet's file is there in every container unless the
    container mounts its own /etc/hosts, and then this says False: the
    server is opened, as before."""
    try:
        with open(hosts_file or HOSTS_FILE, "rb") as f:
            first = f.read(len(HOST_NETWORK_HOSTS_HEADER))
    except OSError:
        return False
    return first == HOST_NETWORK_HOSTS_HEADER


def serve(env, status, checkpoint=None, min_interval=proto.DEFAULT_NOW_INTERVAL):
    """A Server of status() (and of checkpoint-now requests, Server) on the
    port env names, or None: none asked (TRAINGUARD_STATUS_PORT=0), a
    host-network pod, or the port taken (logged; training goes on)."""
    port = port_from_env(env)
    if port == 0:
        return None
    if host_network():
        # The controller never reads a host-network pod, and the port
        # would be open on the node's addresses.
        log.info("trainguard: a host-network pod: not serving the work-at-risk status on port %d", port)
        return None
    try:
        return Server(port, status, timeout=timeout_from_env(env), checkpoint=checkpoint, min_interval=min_interval)
    except OSError as e:
        log.warning("trainguard: not serving the work-at-risk status on port %d: %s", port, e)
        return None


def _response(code, reason, body=b"", content_type=None, headers=()):
    head = ["HTTP/1.1 %d %s" % (code, reason), "Content-Length: %d" % len(body), "Connection: close"]
    if content_type:
        head.append("Content-Type: " + content_type)
    head.extend(headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


def _json(code, reason, obj, headers=()):
    return _response(code, reason, json.dumps(obj).encode(), "application/json", headers)


def _refuse(code, reason, error, headers=()):
    """An error answer naming the problem and the fix."""
    return _json(code, reason, {"format": FORMAT, "error": error}, headers)


CHECKPOINT_BODY_HELP = 'send {"format":1,"reason":"<text>"} with a Content-Length of at most %d bytes' % MAX_CHECKPOINT_BODY


def parse_checkpoint_body(body):
    """The sanitised reason of a checkpoint-now body, or ValueError naming
    the problem."""
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("the body is not JSON: " + CHECKPOINT_BODY_HELP) from None
    if not isinstance(obj, dict):
        raise ValueError("the body is not a JSON object: " + CHECKPOINT_BODY_HELP)
    unknown = sorted(proto.sanitize_reason(k) for k in obj if k not in ("format", "reason"))
    if unknown:
        raise ValueError("unknown field %s: %s" % (", ".join(repr(k) for k in unknown[:3]), CHECKPOINT_BODY_HELP))
    if obj.get("format") != FORMAT or isinstance(obj.get("format"), bool):
        raise ValueError("format must be %d" % FORMAT)
    reason = obj.get("reason", "")
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    return proto.sanitize_reason(reason)


def _drop(conn):
    """Close at once with a reset: no FIN handshake or TIME_WAIT is kept for
    a connection that was never going to be served."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    conn.close()


class Server:
    """Serves status() (a dict) as JSON until close(): one accepting thread,
    at most max_in_flight connections handled at once, each for at most
    timeout seconds. With checkpoint, a callable(reason) that files a
    checkpoint-now request and returns the step this process is at (raising
    when it cannot), it also answers POST CHECKPOINT_PATH, accepting at
    most one request per min_interval seconds."""

    def __init__(self, port, status, host="", timeout=DEFAULT_TIMEOUT, max_in_flight=MAX_IN_FLIGHT,
                 checkpoint=None, min_interval=proto.DEFAULT_NOW_INTERVAL, clock=time.monotonic):
        self._status = status
        self._checkpoint = checkpoint
        self._min_interval = float(min_interval)
        self._clock = clock
        self._last_accepted = None  # clock() of the last checkpoint-now request accepted
        self.accepted = 0  # checkpoint-now requests accepted
        self.rate_limited = 0  # ... answered 429
        self._timeout = float(timeout)
        self._max = int(max_in_flight)
        self._lock = threading.Lock()
        self._in_flight = 0
        self.refused = 0  # connections closed unserved because max_in_flight were being served
        self.timed_out = 0  # connections closed unanswered at their deadline
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(64)
            # accept() wakes up this often to see close(): an idle server costs
            # two wake-ups a second, as http.server's serve_forever did.
            self._sock.settimeout(0.5)
        except OSError:
            self._sock.close()
            raise
        self.port = self._sock.getsockname()[1]
        self._accept_error_logged = False
        self._thread = threading.Thread(target=self._accept, name="trainguard-status", daemon=True)
        self._thread.start()

    @property
    def in_flight(self):
        with self._lock:
            return self._in_flight

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                # EMFILE and the like (the process short of descriptors for
                # reasons of its own): the connection waits in the kernel's
                # queue; do not spin on it.
                if not self._accept_error_logged:
                    self._accept_error_logged = True
                    log.warning("trainguard: status: accept: %s", e)
                self._stop.wait(0.1)
                continue
            with self._lock:
                admitted = self._in_flight < self._max
                if admitted:
                    self._in_flight += 1
                else:
                    self.refused += 1
            if not admitted:
                _drop(conn)
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), name="trainguard-status-conn", daemon=True).start()
            except RuntimeError:  # no thread to be had: drop it rather than queue it
                self._release()
                _drop(conn)

    def _release(self):
        with self._lock:
            self._in_flight -= 1

    def _serve(self, conn):
        try:
            deadline = time.monotonic() + self._timeout
            head = self._read_head(conn, deadline)
            if head is None:
                return
            answer = self._answer(head, conn, deadline)
            if answer is None:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            conn.settimeout(left)
            conn.sendall(answer)
        except OSError:  # reset, timed out while sending: nothing to tell anyone
            pass
        finally:
            conn.close()
            self._release()

    def _read_head(self, conn, deadline):
        """The request's head (its request line and headers), read within the
        deadline however the bytes are spread, or None (timed out, closed,
        or larger than MAX_REQUEST_HEAD: not the controller)."""
        buf = b""
        while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
            if len(buf) > MAX_REQUEST_HEAD:
                return None
            chunk = self._recv(conn, 1024, deadline)
            if not chunk:
                return None
            buf += chunk
        return buf

    def _recv(self, conn, n, deadline):
        """Up to n bytes before the deadline: b"" when the peer closed, None
        when the deadline passed (counted)."""
        left = deadline - time.monotonic()
        if left <= 0:
            self._timed_out()
            return None
        conn.settimeout(left)
        try:
            return conn.recv(n)
        except socket.timeout:
            self._timed_out()
            return None

    def _timed_out(self):
        with self._lock:
            self.timed_out += 1

    def _answer(self, buf, conn, deadline):
        """The answer to the request buf begins (its head, perhaps the start
        of a body), or None when its body did not come by the deadline."""
        ends = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n") for i in [buf.find(sep)] if i >= 0]
        end, sep = min(ends)
        head, rest = buf[:end], buf[end + sep:]
        lines = head.split(b"\n")
        parts = lines[0].strip().split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return _response(400, "Bad Request")
        method, path = parts[0], parts[1]
        if self._checkpoint is not None and path == CHECKPOINT_PATH.encode():
            if method != b"POST":
                return _response(405, "Method Not Allowed", headers=("Allow: POST",))
            return self._post(lines[1:], rest, conn, deadline)
        if method != b"GET":
            return _response(405, "Method Not Allowed")
        if path != PATH.encode():
            return _response(404, "Not Found")
        try:
            body = json.dumps(self._status()).encode()
        except Exception as e:  # never take the trainer down
            log.warning("trainguard: status: %s: %s", type(e).__name__, e)
            return _response(500, "Internal Server Error")
        return _response(200, "OK", body, "application/json")

    def _post(self, header_lines, rest, conn, deadline):
        """A checkpoint-now request: its body checked, then the rate limit,
        then the request filed."""
        headers = {}
        for line in header_lines:
            name, colon, value = line.strip().partition(b":")
            if not name:
                continue
            if not colon:
                return _refuse(400, "Bad Request", "a header line has no colon")
            name = name.strip().lower()
            if name in headers:
                return _refuse(400, "Bad Request", "header %s is repeated" % proto.sanitize_reason(name.decode("latin-1"))[:40])
            headers[name] = value.strip()
        if b"transfer-encoding" in headers:
            return _refuse(400, "Bad Request", "Transfer-Encoding is not accepted: " + CHECKPOINT_BODY_HELP)
        length = headers.get(b"content-length", b"")
        if not length.isdigit() or len(length) > 6:
            return _refuse(400, "Bad Request", "Content-Length is missing or not a number: " + CHECKPOINT_BODY_HELP)
        length = int(length)
        if length > MAX_CHECKPOINT_BODY:
            return _refuse(400, "Bad Request", "the body is more than %d bytes: %s"
                           % (MAX_CHECKPOINT_BODY, CHECKPOINT_BODY_HELP))
        if len(rest) > length:  # one request per connection: nothing may follow the body
            return _refuse(400, "Bad Request", "more bytes than the Content-Length: " + CHECKPOINT_BODY_HELP)
        body = self._read_body(conn, rest, length, deadline)
        if body is None:
            return None
        try:
            reason = parse_checkpoint_body(body)
        except ValueError as e:
            return _refuse(400, "Bad Request", str(e))
        with self._lock:
            now, last = self._clock(), self._last_accepted
            if last is not None and now - last < self._min_interval:
                self.rate_limited += 1
                wait = max(1, math.ceil(self._min_interval - (now - last)))
                return _refuse(429, "Too Many Requests",
                               "one checkpoint-now request per %gs (TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL); retry in "
                               "%ds" % (self._min_interval, wait), headers=("Retry-After: %d" % wait,))
            self._last_accepted = now
        try:
            step = self._checkpoint(reason)
        except Exception as e:  # the volume, most likely: training goes on, the caller may retry
            with self._lock:
                if self._last_accepted == now:
                    self._last_accepted = last  # nothing was filed: the slot is not taken
            log.warning("trainguard: checkpoint-now request not filed: %s: %s", type(e).__name__, e)
            return _refuse(503, "Service Unavailable", "the request could not be filed: %s" % type(e).__name__)
        with self._lock:
            self.accepted += 1
        return _json(202, "Accepted", {"format": FORMAT, "step": step})

    def _read_body(self, conn, body, length, deadline):
        """body (what came with the head) and the rest of its length bytes,
        read within the deadline, or None."""
        while len(body) < length:
            chunk = self._recv(conn, length - len(body), deadline)
            if not chunk:
                return None
            body += chunk
        return body

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
