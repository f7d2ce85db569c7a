"""The way out of saturated generations (docs/checkpoint-protocol.md,
"Resetting the generations").

A fence generation cannot go past MAX_GENERATION: once a marker is there
(a job claims one number per start and never gets there; a writer of the
volume put it there) no incarnation can claim, and a restart does not
change that. Removing markers by hand is not a way out: the fence compares
numbers, so a stale process whose number is above every marker left (the
one holding 2^53-1, say) would commit again, and remove the new line's
saves in flight as dead temp directories of older generations.

A reset starts a new line of generations instead. Every claim records the
line it was made in and every check compares it (_fence.check), so from
the moment the new line is written every process of an earlier line is
refused at its next commit, whatever its number, and the new line counts
from 1. Loads rank the current line's commits above every earlier line's
(_storage.ranked), so the first incarnation after the reset resumes where
the job was, and once it commits nothing of an earlier line is resumed.
"""

import stat

from . import _fence as fence
from . import _protocol as proto
from . import _storage as storage


def reset_generations(directory):
    """Reset the generations of a job's checkpoint directory; returns what
    it did: {"line", "newest_before", "markers", "temp_dirs", "resumes"}.

    1. A new line is written: from here on every process that claimed a
       generation before is refused at its next commit.
    2. Every marker and every temp directory is removed (a stale save's
       temp directory is of an earlier line; its commit would be refused).
    3. Another new line is written: an incarnation that started while the
       reset ran claimed in the first line (or in the one before) and may
       have lost its marker in step 2, so a later incarnation could take its
       number again; the second line refuses it at its first commit.

    Checkpoints, the pointer and the signal dirs are left as they are."""
    with proto.opened(directory) as d:
        before = fence.read_line(d)
        if before is None and stat.S_ISDIR(d.lstat(fence.LINE_FILE).st_mode):
            # A directory planted in its place (which fences every process
            # already): a file cannot be renamed over it.
            d.rmtree(fence.LINE_FILE)
        earlier = [] if before is None else [before[0]] + before[1]  # not trainguard's: the history starts again
        newest = fence.newest(d)
        first = fence.new_line(d, earlier, newest)
        markers = fence.remove_markers(d)
        temps = storage.remove_temp_dirs(d, every=True)
        line = fence.new_line(d, [first] + earlier, newest)
        d.fsync()
        best = storage.ranked(d)
        return {"line": line, "newest_before": newest, "markers": markers, "temp_dirs": temps,
                "resumes": best[0] if best else None}
