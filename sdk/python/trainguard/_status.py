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
secret (a step count and two times), nothing is read from the request but
its request line, and the server answers only GET of that path. A serving
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
"""

import json
import logging
import socket
import struct
import threading
import time

from . import _protocol as proto

log = logging.getLogger("trainguard")

PATH = "/trainguard/status"
DEFAULT_PORT = 9602  # Go: contract.StatusPort
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


def serve(env, status):
    """A Server of status() on the port env names, or None: none asked
    (TRAINGUARD_STATUS_PORT=0), a host-network pod, or the port taken
    (logged; training goes on)."""
    port = port_from_env(env)
    if port == 0:
        return None
    if host_network():
        # The controller never reads a host-network pod, and the port
        # would be open on the node's addresses.
        log.info("trainguard: a host-network pod: not serving the work-at-risk status on port %d", port)
        return None
    try:
        return Server(port, status, timeout=timeout_from_env(env))
    except OSError as e:
        log.warning("trainguard: not serving the work-at-risk status on port %d: %s", port, e)
        return None


def _response(code, reason, body=b"", content_type=None):
    head = ["HTTP/1.1 %d %s" % (code, reason), "Content-Length: %d" % len(body), "Connection: close"]
    if content_type:
        head.append("Content-Type: " + content_type)
    return ("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body


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
    timeout seconds."""

    def __init__(self, port, status, host="", timeout=DEFAULT_TIMEOUT, max_in_flight=MAX_IN_FLIGHT):
        self._status = status
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
            answer = self._answer(head)
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
            left = deadline - time.monotonic()
            if left <= 0:
                self._timed_out()
                return None
            conn.settimeout(left)
            try:
                chunk = conn.recv(1024)
            except socket.timeout:
                self._timed_out()
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def _timed_out(self):
        with self._lock:
            self.timed_out += 1

    def _answer(self, head):
        parts = head.split(b"\n", 1)[0].strip().split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return _response(400, "Bad Request")
        method, path = parts[0], parts[1]
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

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
