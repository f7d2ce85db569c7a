"""Wake the listener as soon as the agent writes request.json, instead of at
its next polling tick: an inotify watch on the signal directories (Linux,
through libc; no dependency). The rename that publishes request.json is an
IN_MOVED_TO event. Where inotify is unavailable (another OS, a seccomp
profile that forbids it, a watch limit) the listener keeps polling, and it
polls anyway, because a request written by another pod on another node
(shared volume) produces no local event."""

import ctypes
import ctypes.util
import logging
import os
import select

log = logging.getLogger("trainguard")

_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000  # a signal dir swapped for a symlink is not watched through it
_MASK = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_ONLYDIR | _IN_DONT_FOLLOW


class Waker:
    """wait(timeout) returns early when a watched directory changes."""

    def __init__(self):
        self._fd = -1
        self._watched = set()
        try:
            self._libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError) as e:
            log.info("trainguard: no inotify (%s); polling for checkpoint requests", e)
            return
        if fd < 0:
            log.info("trainguard: inotify_init1 failed (%s); polling for checkpoint requests",
                     os.strerror(ctypes.get_errno()))
            return
        self._fd = fd

    @property
    def active(self):
        return self._fd >= 0

    def watch(self, directory):
        if self._fd < 0 or directory in self._watched:
            return
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
        if wd >= 0:
            self._watched.add(directory)

    def wait(self, timeout):
        if self._fd < 0:
            return False
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
        except (OSError, ValueError):
            return False
        if not ready:
            return False
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass
        except OSError:
            return False
        return True

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
