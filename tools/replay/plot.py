#!/usr/bin/python3
"""Draws replay results (kvatlas-replay --csv) as a PNG: per shape, the prefix hit ratio and
the simulated TTFT p50 / p99 of every policy (docs/routing.md §Trace replay).

usage: plot.py OUT.png [LABEL=]RESULTS.csv ...

One column of panels per CSV (a shape: instances and cache sizes), labelled LABEL or the
file name. Needs matplotlib (Debian python3-matplotlib; run with /usr/bin/python3).
"""

import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read(spec):
    label, _, path = spec.rpartition("=")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {path}: no results")
    return label or os.path.basename(path), rows


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, shapes = sys.argv[1], [read(spec) for spec in sys.argv[2:]]
    fig, axes = plt.subplots(2, len(shapes), figsize=(4.5 * len(shapes), 7), squeeze=False)
    for column, (label, rows) in enumerate(shapes):
        policies = [r["policy"] for r in rows]
        colors = ["tab:green" if p.startswith("kvatlas") else
                  "tab:gray" if p in ("prefix-oracle", "bounded-load") else "tab:blue"
                  for p in policies]
        hit = axes[0][column]
        hit.bar(policies, [float(r["hit_ratio"]) for r in rows], color=colors)
        hit.set_title(label)
        hit.set_ylabel("prefix hit ratio")
        hit.set_ylim(0, 1)
        ttft = axes[1][column]
        x = range(len(rows))
        ttft.bar([i - 0.2 for i in x], [float(r["ttft_p50_ms"]) for r in rows], 0.4,
                 label="p50", color="tab:orange")
        ttft.bar([i + 0.2 for i in x], [float(r["ttft_p99_ms"]) for r in rows], 0.4,
                 label="p99", color="tab:red")
        ttft.set_xticks(list(x), policies)
        ttft.set_yscale("log")
        ttft.set_ylabel("simulated TTFT (ms)")
        ttft.legend()
        for axis in (hit, ttft):
            axis.tick_params(axis="x", labelrotation=35)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
