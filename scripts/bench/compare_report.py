#!/usr/bin/python3
"""Prints scripts/bench/compare's figures side by side, with ratios, and plots them.

usage: compare_report.py RESULTS [--plot DIR]

RESULTS holds one JSON object per line, one per side and repetition, as bench/compare_bench
prints them after "RESULT ". The sides of one repetition follow each other in the file
(kvatlas first); every ratio is taken within one repetition (both figures from the same run)
and shown as the range over repetitions. Exits 1 when a side is missing or had errors.
With --plot DIR: compare-ingest.png (ingest bars), compare-latency.png (lookup p50 and p99
against the rate, each side's floor dashed), compare-memory.png (bytes per entry).
"""

import json
import sys

SIDES = ["kvatlas", "redis-aof", "redis", "redis-set-hset"]
LABELS = {
    "kvatlas": "kvatlas (raft fsync)",
    "redis-aof": "Redis AOF always",
    "redis": "Redis no persistence",
    "redis-set-hset": "Redis SET+HSET (llm-d now)",
}
# Two-line labels for the plots' x axes.
SHORT = {
    "kvatlas": "kvatlas\n(raft fsync)",
    "redis-aof": "Redis\nAOF always",
    "redis": "Redis\nno persistence",
    "redis-set-hset": "Redis SET+HSET\n(llm-d now)",
}


def load(path):
    runs, current = [], None
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r["name"] == SIDES[0] or current is None:
                current = {}
                runs.append(current)
            current[r["name"]] = r
    return runs


def span(values, fmt):
    lo, hi = min(values), max(values)
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else a + "–" + b


def own_bytes(r):
    """The server's own count of its bytes: kvatlas's index memory_bytes, Redis used_memory."""
    return r.get("index_memory", r.get("used_memory"))


def at_rate(r, rate):
    return next(x for x in r["rates"] if x["rate"] == rate)


def table(runs):
    rates = [x["rate"] for x in runs[0]["kvatlas"]["rates"]]
    rows = []  # (figure, per side cell)

    def row(title, get, fmt):
        cells = []
        for s in SIDES:
            cells.append(span([get(run[s]) for run in runs], fmt))
        rows.append((title, cells))

    row("ingest, block events/s", lambda r: r["ingest_per_s"] / 1e3, "{:.0f}k")
    row("server CPU per block event, µs", lambda r: r["ingest_server_cpu_us"], "{:.2f}")
    def pair(rate, what):
        return [span([at_rate(run[s], rate)[what]["p50"] for run in runs], "{:.0f}") + " / " +
                span([at_rate(run[s], rate)[what]["p99"] for run in runs], "{:.0f}")
                for s in SIDES]

    for rate in rates:
        rows.append((f"@{rate}/s: share of own capacity", [
            span([100 * rate / run[s]["capacity_per_s"] for run in runs], "{:.0f}") + " %"
            for s in SIDES]))
        rows.append((f"lookup p50 / p99 @{rate}/s, µs", pair(rate, "lookup")))
        rows.append((f"floor p50 / p99 @{rate}/s, µs", pair(rate, "floor")))
    row("closed-loop capacity, lookups/s", lambda r: r["capacity_per_s"] / 1e3, "{:.1f}k")
    row("server CPU per lookup at capacity, µs", lambda r: r["capacity_server_cpu_us"], "{:.1f}")
    row("memory per entry, RSS, B", lambda r: r["rss_per_entry"], "{:.1f}")
    if all(own_bytes(run[s]) for run in runs for s in SIDES):
        row("own count per entry, B (index / used_memory)",
            lambda r: own_bytes(r) / r["entries"], "{:.1f}")
    return rows


def ratios(runs):
    """kvatlas / a Redis side, each within one run; returned as (figure, text) lines."""
    out = []

    def ratio(title, get, other, invert=False):
        values = [(get(run["kvatlas"]) / get(run[other])) if not invert else
                  (get(run[other]) / get(run["kvatlas"])) for run in runs]
        out.append((title, span(values, "{:.3g}") + "×"))

    ingest = lambda r: r["ingest_per_s"]
    ratio("ingest, kvatlas durable / Redis AOF always (durable vs durable)", ingest, "redis-aof")
    ratio("ingest, kvatlas durable / Redis without persistence", ingest, "redis")
    ratio("ingest, kvatlas durable / Redis SET+HSET without persistence", ingest, "redis-set-hset")
    ratio("server CPU per block event, kvatlas / Redis without persistence",
          lambda r: r["ingest_server_cpu_us"], "redis")
    for x in runs[0]["kvatlas"]["rates"]:
        rate = x["rate"]
        for p in ("p50", "p99"):
            ratio(f"lookup {p} @{rate}/s, kvatlas / Redis",
                  lambda r, rate=rate, p=p: at_rate(r, rate)["lookup"][p], "redis")
        for s in ("kvatlas", "redis"):
            values = [at_rate(run[s], rate)["lookup"]["p99"] / at_rate(run[s], rate)["floor"]["p99"]
                      for run in runs]
            out.append((f"lookup p99 / own floor p99 @{rate}/s, {s}",
                        span(values, "{:.3g}") + "×"))
    ratio("closed-loop capacity, kvatlas / Redis", lambda r: r["capacity_per_s"], "redis")
    ratio("server CPU per lookup, kvatlas / Redis", lambda r: r["capacity_server_cpu_us"], "redis")
    ratio("memory per entry (RSS), kvatlas / Redis", lambda r: r["rss_per_entry"], "redis")
    if all(own_bytes(run[s]) for run in runs for s in ("kvatlas", "redis")):
        ratio("memory per entry (own count), kvatlas index / Redis used_memory", own_bytes,
              "redis")
    return out


def plot(runs, directory):
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    colors = {"kvatlas": "tab:blue", "redis-aof": "tab:red", "redis": "tab:orange",
              "redis-set-hset": "tab:brown"}
    n = runs[0]["kvatlas"]["entries"]

    def bars(get, ylabel, title, name, sides=SIDES):
        fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=90)
        means, los, his = [], [], []
        for s in sides:
            v = [get(run[s]) for run in runs]
            m = sum(v) / len(v)
            means.append(m)
            los.append(m - min(v))
            his.append(max(v) - m)
        x = range(len(sides))
        ax.bar(x, means, yerr=[los, his], capsize=4, color=[colors[s] for s in sides])
        ax.set_xticks(list(x), [SHORT[s] for s in sides], fontsize=8)
        for i, m in enumerate(means):
            ax.annotate(f"{m:,.0f}", (i, m), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 2), textcoords="offset points")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(directory, name))
        plt.close(fig)

    bars(lambda r: r["ingest_per_s"] / 1e3, "k block events/s",
         f"Ingest, {n:,} block events (mean, range over {len(runs)} runs)", "compare-ingest.png")
    fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=90)
    width = 0.38
    for k, (get, label, alpha) in enumerate((
            (lambda r: r["rss_per_entry"], "RSS growth / entries", 1.0),
            (lambda r: (own_bytes(r) or 0) / r["entries"],
             "own count (kvatlas index memory_bytes, Redis used_memory)", 0.5))):
        means = [sum(get(run[s]) for run in runs) / len(runs) for s in SIDES]
        xs = [i + (k - 0.5) * width for i in range(len(SIDES))]
        ax.bar(xs, means, width, color=[colors[s] for s in SIDES], alpha=alpha, label=label)
        for x, m in zip(xs, means):
            ax.annotate(f"{m:.0f}", (x, m), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(list(range(len(SIDES))), [SHORT[s] for s in SIDES], fontsize=8)
    ax.set_ylabel("bytes per entry")
    ax.set_title(f"Memory per entry at {n:,} entries (mean of {len(runs)} runs)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "compare-memory.png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=90)
    rates = [x["rate"] for x in runs[0]["kvatlas"]["rates"]]
    for s, label in (("kvatlas", "kvatlas"), ("redis", "Redis")):
        for p, style in (("p50", "o-"), ("p99", "s-")):
            ys = [sorted(at_rate(run[s], rate)["lookup"][p] for run in runs)[len(runs) // 2]
                  for rate in rates]
            ax.plot(rates, ys, style, color=colors[s], label=f"{label} lookup {p}")
        ys = [sorted(at_rate(run[s], rate)["floor"]["p99"] for run in runs)[len(runs) // 2]
              for rate in rates]
        ax.plot(rates, ys, "--", color=colors[s], alpha=0.6,
                label=f"{label} floor p99 ({'ping' if s == 'kvatlas' else 'PING'})")
        capacity = sorted(run[s]["capacity_per_s"] for run in runs)[len(runs) // 2]
        ax.axvline(capacity, color=colors[s], linestyle=":", alpha=0.8,
                   label=f"{label} closed-loop capacity")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("open-loop rate, requests/s")
    ax.set_ylabel("latency, µs")
    ax.set_title("128-block lookup latency against rate (median of runs)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "compare-latency.png"))
    plt.close(fig)
    print(f"plots: {directory}/compare-ingest.png, compare-latency.png, compare-memory.png")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = load(argv[1])
    complete = [run for run in runs if all(s in run for s in SIDES)]
    if not complete or len(complete) != len(runs):
        print("compare: a side produced no figures", file=sys.stderr)
        return 1
    if any(run[s]["errors"] for run in runs for s in SIDES):
        print("compare: a side had failed requests", file=sys.stderr)
        return 1
    n = runs[0]["kvatlas"]["entries"]
    print(f"\nkvatlas and Redis (llm-d layout), {n:,} entries, {len(runs)} run(s); "
          "ranges are min–max over runs")
    rows = table(runs)
    width = max(len(t) for t, _ in rows)
    cols = [max(len(LABELS[s]), *(len(c[i]) for _, c in rows)) for i, s in enumerate(SIDES)]
    print(" | ".join([" " * width] + [LABELS[s].ljust(w) for s, w in zip(SIDES, cols)]))
    for title, cells in rows:
        print(" | ".join([title.ljust(width)] + [c.ljust(w) for c, w in zip(cells, cols)]))
    print("\nratios, each within one run:")
    for title, text in ratios(runs):
        print(f"  {title}: {text}")
    if "--plot" in argv:
        plot(runs, argv[argv.index("--plot") + 1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
