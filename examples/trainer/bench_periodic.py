"""Benchmark: what periodic checkpoints cost a training loop, measured side
by side with a baseline in the same run.

Trains an MLP (CPU, real PyTorch) in alternating segments of equal length:
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
    p.add_argument("--segment", type=float, default=12.0, help="seconds per segment")
    p.add_argument("--every", type=float, default=4.0, help="seconds between checkpoints in the checkpointing segments")
    p.add_argument("--rounds", type=int, default=3)
    return p.parse_args()


def segment(model, opt, m, seconds, mode, every):
    """Train for `seconds`; returns (steps, checkpoints)."""
    x, y = torch.randn(64, model[0].in_features), torch.randn(64, 1)
    steps = saves = 0
    end = time.monotonic() + seconds
    next_save = time.monotonic() + every
    while time.monotonic() < end:
        with m.step():
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        steps += 1
        if mode == "sync" and time.monotonic() >= next_save:
            m.save_ckpt()
            saves, next_save = saves + 1, time.monotonic() + every
    m._writer.wait()  # the segment's last background save belongs to it
    return steps, saves


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
    segment(model, opt, m.periodic(), 2.0, "none", args.every)  # warm-up: Adam's state exists, caches are hot
    m.save_ckpt()
    size = m._last_bytes
    rates = {"none": [], "background": [], "sync": []}
    saves = {"none": 0, "background": 0, "sync": 0}
    for _ in range(args.rounds):
        for mode in rates:
            m.periodic(seconds=args.every if mode == "background" else 0)
            before = m.periodic_stats["saves"]
            steps, n = segment(model, opt, m, args.segment, mode, args.every)
            rates[mode].append(steps / args.segment)
            saves[mode] += n + m.periodic_stats["saves"] - before
    m.close()
    base = statistics.median(rates["none"])
    print("state %.0f MB per checkpoint; %d rounds of %gs segments, a checkpoint every %gs" %
          (size / 2 ** 20, args.rounds, args.segment, args.every))
    print("%-11s %10s %12s %16s %22s" % ("mode", "steps/s", "checkpoints", "cost/checkpoint", "overhead at 1/minute"))
    for mode, r in rates.items():
        rate = statistics.median(r)
        per = saves[mode] / args.rounds
        cost = (1 - rate / base) * args.segment / per if per else 0.0
        print("%-11s %10.2f %12.1f %15.2fs %21.1f%%" % (mode, rate, per, cost, 100 * max(cost, 0) / 60))
    print("background: the trainer's wait (state copy) %.3fs per checkpoint; %d waited for the previous save" %
          (m.periodic_stats["stall_seconds"] / max(m.periodic_stats["saves"], 1), m.periodic_stats["waited"]))


if __name__ == "__main__":
    main()
