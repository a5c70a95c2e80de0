#!/usr/bin/python3
"""Synthetic request traces in the replay's Mooncake format (docs/routing.md §Trace shapes):
one JSON object per line with timestamp (ms), input_length and output_length (tokens) and
hash_ids (one id per 512-token prompt block; two requests sharing their first k ids share
their first k blocks, and an id always stands for the same prefix). Deterministic: the same
flags and seed write the same bytes. Standard library only.

Shapes:
  shared-prefix  most requests (--shared-fraction) start with one long system prompt
                 (--system-blocks) followed by a short suffix of their own (1-4 blocks);
                 the rest are a prompt of their own (2-24 blocks). Poisson arrivals.
  multi-turn     conversations that start at Poisson times, each of 2-10 turns; a turn's
                 prompt is the previous turn's prompt plus the previous answer and a new
                 user message (1-4 new blocks), after a think time (exponential, mean
                 --think-s). Conversations interleave.
  mixed          half the requests of each, merged by time, with disjoint ids.

usage: gen_trace.py SHAPE [--requests 2000] [--rate R] [--seed S] [--system-blocks B]
                    [--shared-fraction F] [--think-s T] [--out FILE]
"""
import argparse
import json
import random
import sys

BLOCK_TOKENS = 512


class Ids:
    """Fresh block ids, so that every new block names a new prefix."""

    def __init__(self):
        self.next = 0

    def take(self, n):
        first = self.next
        self.next += n
        return list(range(first, first + n))


def tokens(blocks, rng):
    """A prompt of `blocks` blocks: full blocks but a partial last one."""
    return (blocks - 1) * BLOCK_TOKENS + rng.randint(1, BLOCK_TOKENS)


def output_tokens(rng):
    return max(1, int(rng.expovariate(1 / 150)))


def shared_prefix(n, rate, rng, ids, args):
    system = ids.take(args.system_blocks)
    out, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rate) * 1000
        if rng.random() < args.shared_fraction:
            hash_ids = system + ids.take(rng.randint(1, 4))
        else:
            hash_ids = ids.take(rng.randint(2, 24))
        out.append((t, hash_ids, output_tokens(rng)))
    return out


def multi_turn(n, rate, rng, ids, args):
    # Conversations start at `rate` / mean turns per second, so that turns arrive at
    # about `rate` per second once conversations overlap.
    out, start = [], 0.0
    while len(out) < n:
        start += rng.expovariate(rate / 6) * 1000
        hash_ids, t = ids.take(rng.randint(2, 8)), start
        for _ in range(rng.randint(2, 10)):
            answer = output_tokens(rng)
            out.append((t, list(hash_ids), answer))
            t += (rng.expovariate(1 / args.think_s) + answer * 0.02) * 1000
            hash_ids += ids.take(rng.randint(1, 4))
    out.sort(key=lambda r: r[0])
    return out[:n]


def generate(args):
    rng, ids = random.Random(args.seed), Ids()
    if args.shape == "shared-prefix":
        requests = shared_prefix(args.requests, args.rate, rng, ids, args)
    elif args.shape == "multi-turn":
        requests = multi_turn(args.requests, args.rate, rng, ids, args)
    else:
        half = args.requests // 2
        requests = shared_prefix(half, args.rate / 2, rng, ids, args)
        requests += multi_turn(args.requests - half, args.rate / 2, rng, ids, args)
        requests.sort(key=lambda r: r[0])
    for t, hash_ids, answer in requests:
        yield json.dumps({"timestamp": round(t), "input_length": tokens(len(hash_ids), rng),
                          "output_length": answer, "hash_ids": hash_ids})


def positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return value
    return parse


def fraction(text):
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {text!r}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", choices=["shared-prefix", "multi-turn", "mixed"])
    parser.add_argument("--requests", type=positive(int), default=2000)
    parser.add_argument("--rate", type=positive(float),
                        help="requests per second (shared-prefix 12, multi-turn 6, mixed 9: "
                             "8 instances of the replay's default timing kept busy)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--system-blocks", type=positive(int), default=24,
                        help="shared system prompt length in blocks (24 = ~12k tokens)")
    parser.add_argument("--shared-fraction", type=fraction, default=0.9,
                        help="share of shared-prefix requests with the system prompt (0.9)")
    parser.add_argument("--think-s", type=positive(float), default=20.0,
                        help="multi-turn: mean seconds between a turn's answer and the next turn")
    parser.add_argument("--out", help="output file (default: standard output)")
    args = parser.parse_args()
    if args.rate is None:
        args.rate = {"shared-prefix": 12.0, "multi-turn": 6.0, "mixed": 9.0}[args.shape]
    lines = "\n".join(generate(args)) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(lines)
    else:
        sys.stdout.write(lines)


if __name__ == "__main__":
    main()
