#!/usr/bin/python3
"""Read consistency over the binary protocol (docs/protocol.md §kLookup).

usage: binary_read_test.py KVATLAS_SERVER_BINARY   (PYTHONPATH: the built Python package)

A 3-server cluster. Writes go to the leader over REST; right after each is acknowledged, a
follower is asked over the binary protocol with linearizable=True (the client follows the
follower's not_leader to the leader, which commits a barrier first) — the write must be
seen every time — and with min_revision = the write's revision
(the follower answers once it has applied it). A min_revision far ahead is answered
deadline_exceeded after apply_timeout, never at an older revision. Then the same with
`--groups 3` and writes of several models (each in its home group, revisions per group): a
read's barrier and min_revision are its context's group's. Loopback only, bounded, cleaned
up.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness
import kvatlas  # noqa: E402

WRITES = 30


def run(binary, groups):
    cluster = h.Cluster(binary, extra=("--groups", str(groups)))
    try:
        h.wait_addresses_known(cluster)
        leader = cluster.leader()
        follower = next(n for n in cluster.nodes if n is not leader)
        client = kvatlas.Client([h.addr_of(follower, "rpc.addr")])
        # One model with one group; with several, models whose home groups cover them all.
        models = ["m"] if groups == 1 else [f"m{i}" for i in range(12)]
        missed = []
        for i in range(WRITES):
            model = models[i % len(models)]
            context = kvatlas.Context(model, h.BS)
            key = 5000 + i
            status, body = leader.request("POST", "/v1/events", [{
                "event_type": "stored", "model_name": model, "block_size": h.BS,
                "backend_id": "w", "seq_hashes": [key]}])
            assert status == 200, body
            revision = body["revision"]
            linearizable = client.lookup(context, hashes=[key], linearizable=True)
            if not linearizable.instances or linearizable.revision < revision:
                missed.append(("lookup linearizable", model, i, linearizable.revision, revision))
            session = client.lookup(context, hashes=[key], min_revision=revision)
            if not session.instances or session.revision < revision:
                missed.append(("lookup min_revision", model, i, session.revision, revision))
        assert not missed, f"reads that missed an acknowledged write ({groups} groups): {missed}"
        if groups > 1:
            homes = {h.home_group(m, h.BS, groups) for m in models}
            assert len(homes) == groups, f"the models cover groups {homes} only"
        started = time.time()
        try:
            answer = client.lookup(kvatlas.Context(models[0], h.BS), hashes=[1],
                                   min_revision=10**9, timeout=10.0)
            raise AssertionError(f"min_revision 1e9 answered at revision {answer.revision}")
        except kvatlas.Error as e:
            assert e.code == "deadline_exceeded" and "min_revision 1000000000" in e.message, e
        print(f"binary_read_test: ok with {groups} group(s) ({WRITES} writes; the far "
              f"min_revision refused after {time.time() - started:.1f} s)")
    finally:
        cluster.cleanup()


def main():
    for groups in (1, 3):
        run(sys.argv[1], groups)


if __name__ == "__main__":
    main()
