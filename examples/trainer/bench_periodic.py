"""Benchmark: what periodic checkpoints cost a training loop, measured side
by side with a baseline in the same run.

Trains an MLP (CPU, real PyTorch) in alternating segments of equal steps:
no periodic checkpoints (the baseline), background checkpoints
(Migrator.periodic), and the same checkpoints taken synchronously
(save_ckpt at a step, what a trainer without the background writer pays).
Each mode runs `rounds` times, interleaved, so machine noise hits all three.
Prints steps per second per mode, the training time each checkpoint costs,
and that cost as a share of training at one checkpoint a minute.

    PYTHONPATH=sdk/python /usr/bin/python3 examples/trainer/bench_periodic.py
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
from trainguard import Migrator  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024, help="MLP width (state ~ 3 x 4 x hidden^2 x 2 bytes with Adam)")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per segment")
    p.add_argument("--every", type=int, default=20, help="steps between checkpoints in the checkpointing segments")
    p.add_argument("--rounds", type=int, default=5)
    return p.parse_args()


def segment(model, opt, m, steps, mode, every):
    """Train `steps` steps; returns (seconds, checkpoints)."""
    x, y = torch.randn(64, model[0].in_features), torch.randn(64, 1)
    saves = 0
    started = time.monotonic()
    for i in range(steps):
        with m.step():
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if mode == "sync" and (i + 1) % every == 0:
            m.save_ckpt()
            saves += 1
    m._checkpoints.writer.wait()  # the segment's last background save belongs to it
    return time.monotonic() - started, saves


def main():
    args = parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                          nn.ReLU(), nn.Linear(args.hidden, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    directory = tempfile.mkdtemp(prefix="tg-bench-periodic-")
    env = {"TRAINGUARD_CHECKPOINT_DIR": directory, "TRAINGUARD_POD_NAME": "bench", "TRAINGUARD_AFTER_CHECKPOINT": "continue"}
    m = Migrator(env=env)
    m.register("model", model)
    m.register("optimizer", opt)
    segment(model, opt, m.periodic(), 10, "none", args.every)  # warm-up: Adam's state exists, caches are hot
    m.save_ckpt()
    size = m._checkpoints.last_bytes
    times = {"none": [], "background": [], "sync": []}
    saves = {"none": 0, "background": 0, "sync": 0}
    for _ in range(args.rounds):
        for mode in times:
            m.periodic(steps=args.every if mode == "background" else 0)
            before = m.periodic_stats["saves"]
            seconds, n = segment(model, opt, m, args.steps, mode, args.every)
            times[mode].append(seconds)
            saves[mode] += n + m.periodic_stats["saves"] - before
    m.close()
    base = statistics.median(times["none"])
    step = base / args.steps
    print("state %.0f MB per checkpoint; %d rounds of %d steps (%.0f ms a step), a checkpoint every %d steps" %
          (size / 2 ** 20, args.rounds, args.steps, 1000 * step, args.every))
    print("%-11s %14s %12s %16s %22s" % ("mode", "segment (med)", "checkpoints", "cost/checkpoint", "overhead at 1/minute"))
    for mode, t in times.items():
        per = saves[mode] / args.rounds
        cost = (statistics.median(t) - base) / per if per else 0.0
        print("%-11s %13.2fs %12.1f %15.3fs %21.2f%%" % (mode, statistics.median(t), per, cost, 100 * max(cost, 0) / 60))
    print("background: the trainer's wait (state copy) %.3fs per checkpoint; %d waited for the previous save" %
          (m.periodic_stats["stall_seconds"] / max(m.periodic_stats["saves"], 1), m.periodic_stats["waited"]))


if __name__ == "__main__":
    main()
