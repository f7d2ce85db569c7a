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
its path, and the server answers only GET of that path. A serving failure
(the port taken) is logged once and training goes on.
"""

import http.server
import json
import logging
import threading

log = logging.getLogger("trainguard")

PATH = "/trainguard/status"
DEFAULT_PORT = 9602  # Go: contract.StatusPort
FORMAT = 1


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


class Server:
    """Serves status() (a dict) as JSON until close()."""

    def __init__(self, port, status, host=""):
        outer = status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path != PATH:
                    self.send_error(404)
                    return
                try:
                    body = json.dumps(outer()).encode()
                except Exception as e:  # never take the trainer down
                    log.warning("trainguard: status: %s: %s", type(e).__name__, e)
                    self.send_error(500)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt, *args):  # quiet: one poll every few seconds
                pass

        self._httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="trainguard-status", daemon=True)
        self._thread.start()

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
