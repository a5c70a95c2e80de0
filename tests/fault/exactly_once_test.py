#!/usr/bin/python3
"""Exactly-once writes across a leader failover (docs/api.md §Idempotent writes).

usage: exactly_once_test.py KVATLAS_SERVER_BINARY

Three writers name themselves (writer_id) and number their batches; a batch whose answer
is lost or refused (the leader is killed under them) is resent with the same sequence, to
whichever server leads then, until acknowledged; every fourth batch is also resent once
after its acknowledgement, as if the answer had been lost. Each batch stores one unique 2-block
prompt under the publisher's own hashes. At the end every acknowledged prompt is removed
once, by those hashes: a batch applied twice would hold its blocks with refcount 2 and
survive the removal. So the check is: every acknowledged prompt was present on every
server (acked ⊆ applied), and none is present after one removal (no duplicates), on the
survivors and on the restarted old leader. Loopback only, bounded in time, cleaned up.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

WRITERS = 3
RUN_BEFORE_KILL_S = 1.5
RUN_AFTER_FAILOVER_S = 1.5


def own_hashes(i):
    return [7_000_000 + 2 * i, 7_000_000 + 2 * i + 1]


def event(i, event_type):
    e = {"event_type": event_type, "model_name": "m", "block_size": h.BS, "backend_id": "w",
         "seq_hashes": own_hashes(i)}
    if event_type == "stored":
        e["token_ids"] = h.prompt(i)
    return e


def send_until_acked(cluster, body, stop_by):
    """Resends `body` (same writer sequence) until a leader acknowledges it; the revision."""
    while time.time() < stop_by:
        target = h.current_leader(cluster.nodes)
        if target is not None:
            status, answer = target.request("POST", "/v1/events", body)
            if status == 200:
                return answer["revision"]
            assert status in (0, 421, 429, 500, 503, 504), (status, answer)
        time.sleep(0.02)
    raise AssertionError(f"batch {body.get('writer_sequence')} never acknowledged")


def main():
    binary = sys.argv[1]
    cluster = h.Cluster(binary)
    try:
        old_leader = cluster.leader()
        acked, lock, stop = [], threading.Lock(), threading.Event()
        resends = [0]

        def writer(k):
            sequence = 0
            while not stop.is_set():
                sequence += 1
                i = k * 1_000_000 + sequence
                body = {"events": [event(i, "stored")], "writer_id": f"fault-{k}",
                        "writer_sequence": sequence}
                # The first send may be lost with the leader; count the batches resent.
                target = h.current_leader(cluster.nodes)
                status = target.request("POST", "/v1/events", body)[0] if target else 0
                if status != 200:
                    with lock:
                        resends[0] += 1
                    send_until_acked(cluster, body, time.time() + h.DEADLINE_S)
                if sequence % 4 == 0:
                    # As if the answer had been lost after the batch was applied.
                    send_until_acked(cluster, body, time.time() + h.DEADLINE_S)
                    with lock:
                        resends[0] += 1
                with lock:
                    acked.append(i)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
        for t in threads:
            t.start()
        time.sleep(RUN_BEFORE_KILL_S)
        old_leader.kill(signal.SIGKILL)
        new_leader = cluster.leader(exclude=(old_leader.id,))
        time.sleep(RUN_AFTER_FAILOVER_S)
        stop.set()
        for t in threads:
            t.join(timeout=h.DEADLINE_S * 2)
        assert acked, "no write was acknowledged"

        # acked ⊆ applied on the survivors.
        survivors = [n for n in cluster.nodes if n.alive()]
        last = new_leader.request("GET", "/v1/cluster")[1]["revision"]
        for node in survivors:
            h.wait_applied(node, last)
            missing = [i for i in acked if not h.holds(node, i)]
            assert not missing, f"server {node.id} lost acked writes {missing[:10]}"

        # One removal per acknowledged prompt: nothing may be left of any of them.
        removals = [event(i, "removed") for i in acked]
        for start in range(0, len(removals), 500):
            status, answer = new_leader.request(
                "POST", "/v1/events", {"events": removals[start:start + 500]})
            assert status == 200, (status, answer)
            last = answer["revision"]
        old_leader.start()  # comes back on its data directory and catches up
        for node in cluster.nodes:
            h.wait_applied(node, last)
            doubled = [i for i in acked if h.holds(node, i)]
            assert not doubled, f"server {node.id}: writes applied twice {doubled[:10]}"
        print(f"PASS exactly_once: {len(acked)} acked batches, {resends[0]} resent across "
              f"the failover, none lost, none applied twice", flush=True)
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
