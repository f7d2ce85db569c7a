#!/usr/bin/python3
"""Draws docs/dashboard.png from the panels hack/tools/promtool/dashboard-data
evaluated (JSON on argv[1]), laid out on Grafana's 24-column grid.

Run through hack/render-dashboard.sh. Needs Debian's python3-matplotlib.
"""
import json
import sys
from datetime import datetime, timezone

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

BG, PANEL, TEXT, GRID = "#111217", "#181b1f", "#d8d9da", "#2c3235"
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a", "#c4162a", "#96d98d"]
ROW_H = 0.42  # inches per grid row
COL_W = 0.62  # inches per grid column


def human(v, unit):
    if unit == "bytes":
        for u in ["B", "KiB", "MiB", "GiB", "TiB"]:
            if abs(v) < 1024:
                return f"{v:.1f} {u}"
            v /= 1024
        return f"{v:.1f} PiB"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.1f} s"
    if unit == "reqps":
        return f"{v:.2f} req/s"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2f}".rstrip("0").rstrip(".")


def stat(ax, panel):
    values = [s["values"][-1] for s in panel["series"] if s["values"]]
    v = sum(values) if values else 0.0
    bad = panel["title"].startswith(("Checkpoints not saved", "Rescheduler brake", "Refused"))
    color = "#f2495c" if bad and v >= 1 else "#73bf69"
    ax.text(0.5, 0.42, human(v, panel["unit"]), ha="center", va="center", fontsize=22, color=color, weight="bold",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def timeseries(ax, panel):
    for i, s in enumerate(panel["series"]):
        if not s["values"]:
            continue
        t = [datetime.fromtimestamp(ms / 1000, tz=timezone.utc) for ms in s["times"]]
        ax.plot(t, s["values"], color=COLORS[i % len(COLORS)], linewidth=1.1, label=s["legend"] or None)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    ax.xaxis.set_major_locator(mdates.HourLocator(interval=3))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human(v, panel["unit"])))
    ax.tick_params(colors=TEXT, labelsize=6)
    ax.grid(color=GRID, linewidth=0.5)
    if any(s["legend"] for s in panel["series"]):
        ax.legend(fontsize=5.5, loc="upper left", ncol=3, frameon=False, labelcolor=TEXT)


def main(data_path, out_path):
    panels = json.load(open(data_path))
    rows = max(p["y"] + p["h"] for p in panels)
    width, height = 24 * COL_W, rows * ROW_H + 0.5
    fig = plt.figure(figsize=(width, height), facecolor=BG)
    fig.text(0.01, 1 - 0.25 / height, "trainguard", color=TEXT, fontsize=12, weight="bold", va="center")
    for p in panels:
        pad = 0.05
        left = (p["x"] * COL_W + pad) / width
        bottom = 1 - ((p["y"] + p["h"]) * ROW_H + 0.5 - pad) / height
        ax = fig.add_axes([left + 0.035 * (p["type"] != "stat"), bottom + 0.03 * (p["type"] != "stat"),
                           (p["w"] * COL_W - 2 * pad) / width - 0.04 * (p["type"] != "stat"),
                           (p["h"] * ROW_H - 2 * pad - 0.25) / height - 0.03 * (p["type"] != "stat")], facecolor=PANEL)
        for spine in ax.spines.values():
            spine.set_color(GRID)
        ax.set_title(p["title"], color=TEXT, fontsize=8, loc="left")
        (stat if p["type"] == "stat" else timeseries)(ax, p)
    fig.savefig(out_path, dpi=80, facecolor=BG)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
