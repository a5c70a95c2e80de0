#!/usr/bin/python3
"""Read consistency over the binary protocol (docs/protocol.md §kLookup).

usage: binary_read_test.py KVATLAS_SERVER_BINARY   (PYTHONPATH: the built Python package)

A 3-server cluster. Writes go to the leader over REST; right after each is acknowledged, a
follower is asked over the binary protocol with linearizable=True (the client follows the
follower's not_leader to the leader, which commits a barrier first) — the write must be
seen every time — and with min_revision = the write's revision
(the follower answers once it has applied it). A min_revision far ahead is answered
deadline_exceeded after apply_timeout, never at an older revision. Loopback only, bounded,
cleaned up.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness
import kvatlas  # noqa: E402

WRITES = 30


def main():
    cluster = h.Cluster(sys.argv[1])
    try:
        h.wait_addresses_known(cluster)
        leader = cluster.leader()
        follower = next(n for n in cluster.nodes if n is not leader)
        client = kvatlas.Client([h.addr_of(follower, "rpc.addr")])
        context = kvatlas.Context("m", h.BS)
        missed = []
        for i in range(WRITES):
            key = 5000 + i
            status, body = leader.request("POST", "/v1/events", [{
                "event_type": "stored", "model_name": "m", "block_size": h.BS,
                "backend_id": "w", "seq_hashes": [key]}])
            assert status == 200, body
            revision = body["revision"]
            linearizable = client.lookup(context, hashes=[key], linearizable=True)
            if not linearizable.instances or linearizable.revision < revision:
                missed.append(("lookup linearizable", i, linearizable.revision, revision))
            session = client.lookup(context, hashes=[key], min_revision=revision)
            if not session.instances or session.revision < revision:
                missed.append(("lookup min_revision", i, session.revision, revision))
        assert not missed, f"reads that missed an acknowledged write: {missed}"
        started = time.time()
        try:
            answer = client.lookup(context, hashes=[1], min_revision=10**9, timeout=10.0)
            raise AssertionError(f"min_revision 1e9 answered at revision {answer.revision}")
        except kvatlas.Error as e:
            assert e.code == "deadline_exceeded" and "min_revision 1000000000" in e.message, e
        print(f"binary_read_test: ok ({WRITES} writes; the far min_revision refused after "
              f"{time.time() - started:.1f} s)")
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
