#!/usr/bin/python3
"""Draws the goodput plot: steps over wall time for the three arms, the
disruptions marked. Reads DIR/progress.csv and DIR/events.csv (written by
hack/goodput), writes OUT.png. Needs Debian's python3-matplotlib.

    hack/goodput/plot.py bin/goodput docs/goodput.png "title"
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"trainguard": "#2a9d3f", "plain": "#d1495b", "kueue-recovery": "#3d7dd8"}


def main(directory, out, title):
    arms = {}
    with open(directory + "/progress.csv") as f:
        for row in csv.DictReader(f):
            xs, ys = arms.setdefault(row["arm"], ([], []))
            xs.append(float(row["seconds"]) / 60)
            ys.append(int(row["step"]))
    with open(directory + "/events.csv") as f:
        events = [(float(r["seconds"]) / 60, r["kind"]) for r in csv.DictReader(f)]
    fig, ax = plt.subplots(figsize=(11, 5.5), dpi=110)
    end = max((t for t, k in events if k == "end"), default=None)
    for t, kind in events:
        if kind == "end":
            continue
        ax.axvline(t, color="#888888", lw=0.8, ls="--")
        ax.text(t, 1.0, " " + kind, rotation=90, va="top", ha="left", fontsize=8, color="#444444",
                transform=ax.get_xaxis_transform())
    for arm, (xs, ys) in arms.items():
        ax.plot(xs, ys, lw=1.6, label=arm, color=COLORS.get(arm))
    if end is not None:
        ax.set_xlim(0, end)
    ax.set_xlabel("wall time since the schedule's start (min)")
    ax.set_ylabel("training step (rank 0)")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.93))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "goodput")
