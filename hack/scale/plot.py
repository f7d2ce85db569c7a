#!/usr/bin/env python3
"""Fits how make scale's figures grow with cluster size and plots them.

Usage: plot.py OUT.png report.json... [samples.tsv]   (one report.json per make scale run)

A samples.tsv (columns: nodes, pods, heap in use MiB, RSS MiB; '#' lines
are comments) is trainguard's memory sampled while one run's pods were
created; it adds a panel of memory against pods at that node count.

Prints a least-squares line per figure (value = a + b * nodes, and b per
training pod at the run's pods per node) and writes a PNG: trainguard's
memory, and the zone outage's decision time, against the number of nodes.
A benchmark-only tool: it needs Debian's python3-matplotlib (make scale-plot
installs it).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def fit(xs, ys):
    n = len(xs)
    if n < 2:
        return ys[0] if ys else 0.0, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def read_samples(path):
    rows = []
    for line in open(path):
        if line.strip() and not line.startswith("#"):
            nodes, pods, heap, rss = line.split()[:4]
            rows.append((int(nodes), int(pods), float(heap), float(rss)))
    return rows


def plot_samples(ax, rows):
    pods = [r[1] for r in rows]
    for i, name in ((3, "RSS (MiB)"), (2, "Go heap in use (MiB)")):
        ax.plot(pods, [r[i] for r in rows], marker=".", label=name)
        a, b = fit(pods, [r[i] for r in rows])
        print(f"samples at {rows[0][0]} nodes, {name}: a={a:.3g} MiB b={b * 1024:.3g} KiB/pod")
    ax.axhline(256, color="grey", linestyle="--", label="the chart's limit and GOMEMLIMIT (256 MiB)")
    ax.set_xlabel(f"pods created so far ({rows[0][0]} nodes)")
    ax.set_ylabel("MiB")
    ax.set_title("trainguard memory while the pods were created")
    ax.grid(True, alpha=0.3)
    ax.legend()


def get(r, *path):
    for p in path:
        if r is None:
            return None
        r = r.get(p)
    return r


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    samples = [row for p in paths if p.endswith(".tsv") for row in read_samples(p)]
    reports = sorted((json.load(open(p)) for p in paths if not p.endswith(".tsv")), key=lambda r: r["Nodes"])
    nodes = [r["Nodes"] for r in reports]
    series = {
        "RSS (MiB)": [get(r, "Steady", "RSSMiB") for r in reports],
        "Go heap in use (MiB)": [get(r, "Steady", "HeapMiB") for r in reports],
        "CPU at rest (% of a core)": [get(r, "Steady", "CPUPercent") for r in reports],
        "own API requests/s": [get(r, "Steady", "RequestsPerSec") for r in reports],
        "outage, brake on: p99 decision (s after deadline)": [get(r, "Outage", "DecisionP99") for r in reports],
        "outage, brake off: p99 decision (s after deadline)": [get(r, "OutageNoBrake", "DecisionP99") for r in reports],
        "populate: create seconds": [r.get("CreateSeconds") for r in reports],
    }
    ppn = reports[-1]["TrainingPods"] / reports[-1]["Nodes"]
    print(f"{'figure':52s} " + " ".join(f"{n:>9d}" for n in nodes) + "   fit: a + b*nodes")
    for name, ys in series.items():
        pts = [(x, y) for x, y in zip(nodes, ys) if y is not None]
        if not pts:
            continue
        a, b = fit([p[0] for p in pts], [p[1] for p in pts])
        vals = " ".join(f"{y:9.2f}" if y is not None else f"{'-':>9s}" for y in ys)
        print(f"{name:52s} {vals}   a={a:.3g} b={b:.4g}/node ({b / ppn:.4g}/training pod at {ppn:.0f} per node)")

    panels = 3 if samples else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2))
    m, d = axes[0], axes[1]
    if samples:
        plot_samples(axes[2], samples)
    for name in ("RSS (MiB)", "Go heap in use (MiB)"):
        pts = [(x, y) for x, y in zip(nodes, series[name]) if y is not None]
        m.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    m.set_xlabel(f"nodes ({ppn:.0f} training + 2 other pods per node)")
    m.set_ylabel("MiB")
    m.set_title("trainguard memory at steady state")
    m.grid(True, alpha=0.3)
    m.legend()
    for (name, key) in (("outage, brake on: p99 decision (s after deadline)", "Outage"),
                        ("outage, brake off: p99 decision (s after deadline)", "OutageNoBrake")):
        pts = [(x, y, r) for x, y, r in zip(nodes, series[name], reports) if y is not None]
        if pts:
            d.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name.split(":")[0])
        for x, y, r in pts:
            decided, affected = get(r, key, "Decided"), get(r, key, "AffectedPods")
            if decided is not None and affected and decided < affected:
                # The scenario's bound ended first: the p99 is of the pods
                # decided by then, a lower bound on the whole zone's.
                d.annotate(f"only {decided:,} of {affected:,}\ndecided in the bound", (x, y), textcoords="offset points",
                           xytext=(-10, -28), ha="right", fontsize=8)
    for x, y, r in zip(nodes, series["RSS (MiB)"], reports):
        limit = get(r, "Steady", "GOMEMLIMIT")
        if y is not None and limit:
            m.annotate(f"GOMEMLIMIT {int(limit) >> 20} MiB", (x, y), textcoords="offset points", xytext=(6, -14), ha="left", fontsize=8)
    d.set_xlabel("nodes (one zone of ten goes silent)")
    d.set_ylabel("p99 seconds from Lease deadline to decision")
    d.set_title("zone outage: time to decide every affected pod")
    d.grid(True, alpha=0.3)
    d.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print("wrote", out)


if __name__ == "__main__":
    main()
