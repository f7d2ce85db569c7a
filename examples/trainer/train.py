"""A small real training job using the trainguard SDK: an MLP on synthetic
regression data, CPU only, deterministic (the batch of step s depends only on
the seed and s), so an interrupted and resumed run ends bit-identical to an
uninterrupted one. Runs alone or under torchrun (DDP over gloo).

    PYTHONPATH=sdk/python /usr/bin/python3 examples/trainer/train.py --steps 200
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node=2 examples/trainer/train.py

--plain (or TRAIN_PLAIN=1) is the same trainer as users write it without
trainguard, the baseline the goodput comparison measures against: no SDK
at all, rank 0 saves with torch.save every --save-every steps into
--ckpt-dir (a temporary file, then a rename), every rank loads the newest
file that loads on start, and a rank whose peer died waits in gloo's
collective until --gloo-timeout (PyTorch's default, 30 minutes).
"""

import argparse
import datetime
import glob
import logging
import os
import re
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_args():
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(env("TRAIN_STEPS", "200")))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--step-delay", type=float, default=float(env("TRAIN_STEP_DELAY", "0")),
                   help="seconds to sleep per step, so tests can stop it mid-run")
    p.add_argument("--save-every", type=int, default=0, help="periodic background checkpoint every N steps (0: off)")
    p.add_argument("--zero", action="store_true",
                   help="shard the optimizer state across ranks (torch.distributed.optim.ZeroRedundancyOptimizer)")
    p.add_argument("--no-listen", action="store_true",
                   help="never call migrator.listening(): a trainer without trainguard's listener (tests)")
    p.add_argument("--extra-if-exists", default="", metavar="PATH",
                   help="tests: if PATH exists, register one more object (code changed between restarts)")
    p.add_argument("--state-mb", type=float, default=0, help="extra registered state in MB (benchmarks)")
    p.add_argument("--dump-state", default="", help="after resume, torch.save the state to PATH.rank<R>")
    p.add_argument("--dump-final", default="", help="at the end, torch.save the state to PATH.rank<R>")
    p.add_argument("--raise-if-exists", default="", metavar="PATH",
                   help="chaos tests: before a step, if PATH exists, remove it and raise RuntimeError "
                        "(a crash in the user's Python code, exit 1)")
    p.add_argument("--bench-raw-save", type=int, default=0, metavar="N",
                   help="benchmark baseline: torch.save + fsync the registered state N times into the "
                        "checkpoint dir, print each time, and exit without training")
    p.add_argument("--bench-raw-sync", action="store_true",
                   help="with --bench-raw-save: os.sync() before each timed save (clean writeback state)")
    p.add_argument("--plain", action="store_true", default=env("TRAIN_PLAIN", "") not in ("", "0"),
                   help="no trainguard SDK: torch.save every --save-every steps, load the newest on start")
    p.add_argument("--ckpt-dir", default=env("CHECKPOINT_DIR", "/checkpoint"),
                   help="--plain: where the checkpoints go (the claim)")
    p.add_argument("--keep", type=int, default=2, help="--plain: checkpoints kept")
    p.add_argument("--gloo-timeout", type=float, default=1800.0,
                   help="seconds a collective waits for a peer (PyTorch's default, 30 minutes)")
    return p.parse_args()


PLAIN_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")


def plain_save(directory, step, state, keep):
    """torch.save to a temporary file, fsync, rename: a crash leaves the
    previous checkpoints and at worst a stray temporary file."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "ckpt-%09d.pt" % step)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in plain_checkpoints(directory)[keep:]:
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass
    return path


def plain_checkpoints(directory):
    """The checkpoint files, newest step first."""
    names = [os.path.basename(f) for f in glob.glob(os.path.join(directory, "ckpt-*.pt"))]
    return [os.path.join(directory, n) for n in sorted((n for n in names if PLAIN_NAME.match(n)), reverse=True)]


def plain_load(directory):
    """The newest checkpoint that loads, with its path; a torn or corrupt
    file (a copy cut short, a disk error) is skipped for the one before."""
    for path in plain_checkpoints(directory):
        try:
            return path, torch.load(path)
        except Exception as e:  # noqa: BLE001 - any unreadable file is skipped the same way
            logging.warning("skipping %s: %s: %s", path, type(e).__name__, e)
    return None, None


def bench_raw_save(n, states, directory, sync=False):
    """What a checkpoint costs at the least: torch.save of the same state, flushed and fsynced."""
    path = os.path.join(directory, "raw-save-baseline.pt")
    for i in range(n):
        if sync:
            os.sync()
        start = time.perf_counter()
        with open(path, "wb") as f:
            torch.save({k: (v.state_dict() if hasattr(v, "state_dict") else v) for k, v in states.items()}, f)
            f.flush()
            os.fsync(f.fileno())
        print("raw save %d: %.3f ms, %d bytes" % (i, (time.perf_counter() - start) * 1000, os.path.getsize(path)),
              flush=True)
    os.unlink(path)


def batch_for(step, args, in_dim=16):
    """The batch of a step depends only on (seed, step): resuming replays the data exactly."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.batch, in_dim, generator=g)
    y = x.sum(dim=1, keepdim=True).sin() + 0.1 * torch.randn(args.batch, 1, generator=g)
    return x, y


def average_gradients(model, world):
    """Data-parallel gradient averaging, one all-reduce per parameter.

    Not DistributedDataParallel: DDP packs gradients into buckets and, after
    its first iteration, rebuilds them in the order autograd produced them.
    The ring all-reduce sums each element in an order that depends on where
    it sits in the flattened bucket, so the first step after a resume (old
    layout) rounds differently from the same step of an uninterrupted run
    (rebuilt layout): the final weights then differ in the last bits although
    the resume itself is exact (docs/e2e.md). One all-reduce per parameter has
    the same layout in every incarnation, so resumed and uninterrupted runs
    end bit-identical.
    """
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def dump(path, model, optimizer, metrics, step, rank):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "metrics": dict(metrics), "step": step}, "%s.rank%d" % (path, rank))


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    # A ZeroRedundancyOptimizer needs the process group: it is made below.
    optimizer = None if args.zero else torch.optim.Adam(model.parameters(), lr=args.lr)
    metrics = {"step": 0, "loss": None}
    if args.plain:
        return plain_main(args, model, optimizer, metrics, world, rank)
    from trainguard import migrator  # not imported by --plain: the baseline has no SDK

    migrator.register("model", model)
    if optimizer is not None:
        migrator.register("optimizer", optimizer)
    migrator.register("metrics", metrics)
    extra = {"blob": torch.rand(int(args.state_mb * 2 ** 20 / 4))} if args.state_mb > 0 else None
    if extra is None and args.extra_if_exists and os.path.exists(args.extra_if_exists):
        extra = {"changed": True}
    if extra is not None:
        migrator.register("extra", extra)
    # Data parallel (gradients averaged by hand, below): every rank holds the
    # same state after each step, so when a peer dies rank 0 may commit the
    # last completed step before it exits (a registered DistributedDataParallel
    # would say so by itself).
    migrator.replicated()
    if args.bench_raw_save:
        states = {"model": model, "optimizer": optimizer, "metrics": metrics}
        if extra is not None:
            states["extra"] = extra
        bench_raw_save(args.bench_raw_save, states, migrator.config.checkpoint_dir, args.bench_raw_sync)
        return
    # Listen (and, on rank 0, claim this incarnation's fence generation)
    # before joining the process group: a stale rank 0 that still holds the
    # other ranks (a partitioned node) is fenced at its next commit, and only
    # then do they come to this one (docs/checkpoint-protocol.md, Fencing).
    if not args.no_listen:
        migrator.listening()
    if args.save_every:
        migrator.periodic(steps=args.save_every)
    if world > 1:
        dist.init_process_group("gloo")
    if args.zero:
        # Each rank keeps the Adam state of its share of the parameters; every
        # rank saves its part of it (docs/checkpoint-protocol.md, "Sharded state").
        from torch.distributed.optim import ZeroRedundancyOptimizer
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr)
        migrator.register("optimizer", optimizer)
    start = 0
    if migrator.resume:
        meta = migrator.load_ckpt()
        start = meta["step"]
        print("rank %d: resumed from %s at step %d, metrics %s" % (rank, meta["checkpoint"], start, metrics),
              flush=True)
        if args.dump_state:
            dump(args.dump_state, model, optimizer, metrics, start, rank)

    if world > 1 and start == 0:
        # Every rank starts from rank 0's parameters. Not after a resume:
        # every rank holds the same state then, and a rank restarted in
        # process (its state from a survivor) must run no collective the
        # survivors do not (docs/checkpoint-protocol.md, In-process recovery).
        for p in model.parameters():
            dist.broadcast(p.data, 0)
    loss_fn = nn.MSELoss()
    # When this pod is stopped, migrator.step() takes the checkpoint at the end
    # of the block and then raises SystemExit(143) once the agent is done; it
    # leaves the process group itself (the destroy_process_group below is for
    # a run that ends normally). Another rank of the pod, whose all_reduce
    # fails when rank 0 leaves, exits 143 the same way. A rank whose peer dies
    # (its all_reduce fails) exits 138, retryable, after rank 0 committed the
    # last completed step (docs/checkpoint-protocol.md, "A peer dies").
    # migrator.steps() rather than range(): after an in-process recovery the
    # abandoned step is taken again.
    for step in migrator.steps(args.steps):
        raise_if_asked(args, step)
        with migrator.step():
            train_step(step, args, model, optimizer, loss_fn, metrics, world, rank)
        if args.step_delay:
            time.sleep(args.step_delay)
    finish(args, model, optimizer, metrics, world, rank)


def raise_if_asked(args, step):
    """--raise-if-exists: a crash in the user's code before the step."""
    if args.raise_if_exists and os.path.exists(args.raise_if_exists):
        os.unlink(args.raise_if_exists)  # one exception per request
        raise RuntimeError("injected failure before step %d (%s)" % (step + 1, args.raise_if_exists))


def train_step(step, args, model, optimizer, loss_fn, metrics, world, rank):
    """One step, the same in both modes (so their losses compare): the
    step's batch, this rank's share of it, gradients averaged over ranks."""
    x, y = batch_for(step, args)
    x, y = x.chunk(world)[rank], y.chunk(world)[rank]
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    if world > 1:
        average_gradients(model, world)
    optimizer.step()
    metrics["step"], metrics["loss"] = step + 1, loss.item()
    print("rank %d: completed step %d loss %.6f" % (rank, step + 1, metrics["loss"]), flush=True)


def finish(args, model, optimizer, metrics, world, rank):
    if args.dump_final:
        dump(args.dump_final, model, optimizer, metrics, args.steps, rank)
    print("rank %d: done at step %d" % (rank, args.steps), flush=True)
    if world > 1:
        # Every rank is done before any tears the group down: a rank whose
        # peer already closed its gloo pairs can crash in its own teardown.
        dist.barrier()
        dist.destroy_process_group()


def plain_main(args, model, optimizer, metrics, world, rank):
    """The trainer as users write it without trainguard (see the module
    docstring); the same model, data order, step and step time as main()."""
    if world > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.gloo_timeout))
    start = 0
    path, state = plain_load(args.ckpt_dir)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        metrics.update(state["metrics"])
        start = state["step"]
        print("rank %d: resumed from %s at step %d, metrics %s" % (rank, path, start, metrics), flush=True)
    if world > 1:
        for p in model.parameters():
            dist.broadcast(p.data, 0)
    loss_fn = nn.MSELoss()
    for step in range(start, args.steps):
        raise_if_asked(args, step)
        train_step(step, args, model, optimizer, loss_fn, metrics, world, rank)
        if args.save_every and (step + 1) % args.save_every == 0 and rank == 0:
            saved = plain_save(args.ckpt_dir, step + 1, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                                         "metrics": dict(metrics), "step": step + 1}, args.keep)
            print("rank %d: saved %s at step %d" % (rank, saved, step + 1), flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
    finish(args, model, optimizer, metrics, world, rank)


if __name__ == "__main__":
    main()
