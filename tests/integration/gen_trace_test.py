#!/usr/bin/env python3
"""tools/replay/gen_trace.py writes traces the replay reads, of the shape it names: the same
seed gives the same bytes, another seed other bytes; every block id always follows the
same parent (an id names a whole prefix); shared-prefix requests mostly start with one
system prompt and multi-turn turns extend an earlier prompt; bad flags are refused. Then
kvatlas-replay replays the shared-prefix trace: prefix-oracle herds it onto few
instances, bounded-load keeps the load within about (1 + eps) of the mean.

usage: gen_trace_test.py GEN_TRACE_PY KVATLAS_REPLAY_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile


def generate(gen, *args):
    out = subprocess.run(["/usr/bin/python3", gen, *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def check_prefix_unique(requests):
    parent = {}
    for r in requests:
        assert r["input_length"] > (len(r["hash_ids"]) - 1) * 512, r
        assert r["input_length"] <= len(r["hash_ids"]) * 512, r
        for i, block in enumerate(r["hash_ids"]):
            before = r["hash_ids"][i - 1] if i else None
            assert parent.setdefault(block, before) == before, (block, parent[block], before)
    times = [r["timestamp"] for r in requests]
    assert times == sorted(times)


def main():
    gen, replay = sys.argv[1:3]
    traces = {}
    for shape in ("shared-prefix", "multi-turn", "mixed"):
        text = generate(gen, shape, "--requests", "400", "--seed", "7")
        assert text == generate(gen, shape, "--requests", "400", "--seed", "7"), shape
        assert text != generate(gen, shape, "--requests", "400", "--seed", "8"), shape
        requests = [json.loads(line) for line in text.splitlines()]
        assert len(requests) == 400, (shape, len(requests))
        check_prefix_unique(requests)
        traces[shape] = (text, requests)

    shared = traces["shared-prefix"][1]
    system = [r["hash_ids"][:24] for r in shared if len(r["hash_ids"]) >= 25]
    common = max(system, key=system.count)
    share = sum(r["hash_ids"][:24] == common for r in shared) / len(shared)
    assert 0.8 <= share <= 0.97, share

    turns = traces["multi-turn"][1]
    prompts = {tuple(r["hash_ids"]) for r in turns}
    extended = sum(any(tuple(r["hash_ids"][:k]) in prompts for k in range(1, len(r["hash_ids"])))
                   for r in turns)
    assert extended >= len(turns) // 2, (extended, len(turns))

    bad = subprocess.run(["/usr/bin/python3", gen, "shared-prefix", "--shared-fraction", "2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "shared-fraction" in bad.stderr, bad.stderr
    bad = subprocess.run(["/usr/bin/python3", gen, "spiral"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "spiral" in bad.stderr, bad.stderr

    with tempfile.TemporaryDirectory(prefix="kvatlas-gen-trace-") as tmp:
        path = os.path.join(tmp, "shared.jsonl")
        with open(path, "w") as f:
            f.write(generate(gen, "shared-prefix", "--requests", "1000", "--rate", "20"))
        out = subprocess.run([replay, "--trace", path, "--json", "--policies",
                              "round-robin,prefix-oracle,bounded-load"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    rows = {row["policy"]: row for row in map(json.loads, out.stdout.splitlines())}
    print(json.dumps({p: {k: r[k] for k in ("hit_ratio", "load_imbalance", "ttft_p50_ms")}
                      for p, r in rows.items()}, indent=1))
    oracle, bounded = rows["prefix-oracle"], rows["bounded-load"]
    assert oracle["load_imbalance"] > 3, oracle["load_imbalance"]
    assert bounded["load_imbalance"] < oracle["load_imbalance"] / 1.5, bounded["load_imbalance"]
    assert bounded["ttft_p50_ms"] < oracle["ttft_p50_ms"] / 10
    assert bounded["hit_ratio"] >= 0.95 * oracle["hit_ratio"]
    assert bounded["hit_ratio_vs_bounded_load"] == 1.0
    assert oracle["hit_ratio_vs_oracle"] == 1.0
    print("gen_trace_test: ok")


if __name__ == "__main__":
    main()
