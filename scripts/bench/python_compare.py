#!/usr/bin/python3
"""The Python half of scripts/bench/python: ingests chains of 128 blocks held by 8
instances, runs the C++ bench (bench/python_compare_bench.cc) on them, then times the same
calls through the kvatlas package the same way, and prints both with their ratio."""

import argparse
import json
import subprocess
import time

import kvatlas


def chain_tokens(chain, blocks, block_size):
    return [chain * 1_000_000 + i for i in range(blocks * block_size)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rpc", required=True)
    p.add_argument("--cpp-bench", required=True)
    p.add_argument("--chains", type=int, default=64)
    p.add_argument("--blocks", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--local-iters", type=int, default=200_000)
    p.add_argument("--client-iters", type=int, default=5_000)
    a = p.parse_args()

    ctx = kvatlas.Context("bench", a.block_size)
    hasher = kvatlas.BlockHasher()
    keys = [hasher.sequence_hashes(chain_tokens(c, a.blocks, a.block_size), a.block_size)
            for c in range(a.chains)]
    client = kvatlas.Client([a.rpc])
    revision = 0
    for c, chain in enumerate(keys):
        # Every chain on 3 of 8 instances, one of them only half of it, one in CPU.
        events = [kvatlas.stored(ctx, f"engine-{c % 8}", chain),
                  kvatlas.stored(ctx, f"engine-{(c + 1) % 8}", chain[:a.blocks // 2]),
                  kvatlas.stored(ctx, f"engine-{(c + 2) % 8}", chain, medium="cpu")]
        revision = client.ingest(events).revision

    cpp = json.loads(subprocess.check_output(
        [a.cpp_bench, "--rpc", a.rpc, "--revision", str(revision), "--chains", str(a.chains),
         "--blocks", str(a.blocks), "--block-size", str(a.block_size),
         "--local-iters", str(a.local_iters), "--client-iters", str(a.client_iters)]))

    index = kvatlas.LocalIndex([a.rpc], [ctx])
    index.wait_synced(30.0)
    index.wait_for_revision(revision, 30.0)
    lookup = index.lookup
    n = a.chains
    found = 0
    start = time.perf_counter_ns()
    for i in range(a.local_iters):
        found += lookup(ctx, keys[i % n]).blocks_found
    local_ns = (time.perf_counter_ns() - start) / a.local_iters
    # The same with the answer read the way a router reads it (each instance's GPU prefix).
    start = time.perf_counter_ns()
    for i in range(a.local_iters):
        answer = lookup(ctx, keys[i % n])
        best = max((m.blocks.gpu for m in answer.instances), default=0)
        found += best
    local_read_ns = (time.perf_counter_ns() - start) / a.local_iters
    start = time.perf_counter_ns()
    for i in range(a.client_iters):
        found += client.lookup(ctx, hashes=keys[i % n]).blocks_found
    client_ns = (time.perf_counter_ns() - start) / a.client_iters
    scorer = kvatlas.Scorer()
    candidates = [kvatlas.Candidate(f"engine-{i}", queued_prefill_tokens=16 * i) for i in range(8)]
    iters = max(1, a.local_iters // 10)
    start = time.perf_counter_ns()
    for i in range(iters):
        scorer.rank(lookup(ctx, keys[i % n]), candidates)
    route_ns = (time.perf_counter_ns() - start) / iters

    print(f"{a.blocks}-block prompts, {a.chains} chains on 8 instances (3 copies each)")
    print(f"{'call':44} {'C++ ns':>10} {'Python ns':>10} {'ratio':>7}")
    rows = [("LocalIndex lookup", cpp["local_index_lookup_ns"], local_ns),
            ("LocalIndex lookup + read instances' blocks", cpp["local_index_lookup_ns"],
             local_read_ns),
            ("Client lookup (loopback round trip)", cpp["client_lookup_ns"], client_ns)]
    for name, c, py in rows:
        print(f"{name:44} {c:10.0f} {py:10.0f} {py / c:7.2f}")
    print(f"{'LocalIndex lookup + Scorer.rank (8 cands)':44} {'':>10} {route_ns:10.0f}")
    index.close()
    client.close()


if __name__ == "__main__":
    main()
