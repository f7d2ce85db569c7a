"""python3 -m trainguard reset-generations [DIR]: the operator's way out of a
checkpoint directory whose fence generations are saturated
(docs/checkpoint-protocol.md, "Resetting the generations").

python3 -m trainguard supervise -- <command>: run the trainer under the
supervisor (docs/checkpoint-protocol.md, "In-process recovery").

trainguard-python ARGS (python_exec): python3 ARGS under the supervisor,
with this interpreter. torchrun starts each worker as $PYTHON_EXEC -u
SCRIPT ..., so PYTHON_EXEC=trainguard-python puts every worker it starts
under a supervisor of its own."""

import argparse
import os
import sys

from . import _reset


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m trainguard")
    sub = p.add_subparsers(dest="command", required=True)
    reset = sub.add_parser("reset-generations", help="start a new line of fence generations in a job's checkpoint "
                                                     "directory; every earlier incarnation stays fenced")
    reset.add_argument("directory", nargs="?", help="the job's checkpoint directory (default: "
                                                    "$TRAINGUARD_CHECKPOINT_DIR, then $MIGRATION_CKPT_PATH)")
    sup = sub.add_parser("supervise", help="run the trainer's command, restart it in place when a signal kills it, "
                                           "and host the job's rendezvous store on global rank 0")
    sup.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the trainer's command")
    args = p.parse_args(argv)
    if args.command == "supervise":
        from . import _supervise
        return _supervise.run(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
    directory = args.directory or os.environ.get("TRAINGUARD_CHECKPOINT_DIR") or os.environ.get("MIGRATION_CKPT_PATH")
    if not directory:
        p.error("reset-generations: name the job's checkpoint directory (or set TRAINGUARD_CHECKPOINT_DIR)")
    try:
        done = _reset.reset_generations(directory)
    except OSError as e:
        print("trainguard: cannot reset the generations of %s: %s" % (directory, e), file=sys.stderr)
        return 1
    print("trainguard: reset the generations of %s" % directory)
    print("  removed %s (the newest was %d) and %s"
          % (_count(done["markers"], "generation marker"), done["newest_before"],
             _count(done["temp_dirs"], "temp directory", "temp directories")))
    print("  new line %s: every incarnation that claimed a generation before is refused at its next commit"
          % done["line"])
    print("  the next incarnation claims generation 1 and resumes from %s"
          % (done["resumes"] or "nothing (no committed checkpoint): a fresh start"))
    return 0


def python_exec(argv=None):
    """The trainguard-python command: this interpreter with argv (default:
    this process's arguments) under the supervisor."""
    from . import _supervise
    return _supervise.run([sys.executable] + list(sys.argv[1:] if argv is None else argv))


def _count(items, one, many=None):
    return "%d %s" % (len(items), one if len(items) == 1 else many or one + "s")


if __name__ == "__main__":
    sys.exit(main())
