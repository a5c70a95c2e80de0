#!/usr/bin/python3
"""Approximate mode's predictions made on a follower reach every replica
(docs/routing.md §Approximate mode).

usage: predict_forward_test.py KVATLAS_SERVER_BINARY

A 3-server cluster. A route whose pick is flagged `predict` is sent to a follower: the
follower forwards the predicted blocks to the leader (POST /v1/cluster/predict, signed with
the cluster secret), which submits them through the log, so that the leader's and the other
follower's routes prefer the predicted instance too (bounded wait). Then the internal route
itself: unsigned, malformed, oversized and misdirected calls get 4xx JSON errors naming the
problem. Loopback only, bounded, cleaned up.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness
import peer_auth_test as pa  # noqa: E402 - internal-call signatures

PATH = "/v1/cluster/predict"


def route(node, first, second, predict, extra=0):
    """A route of 8 blocks (+ `extra` tokens) over candidates `first` then `second`: the
    pick (an instance id) and each candidate's predicted blocks."""
    status, body = node.request("POST", "/v1/route", {
        "model_name": "m", "block_size": h.BS, "token_ids": list(range(1, 8 * h.BS + 1 + extra)),
        "candidates": [{"instance_id": first, "predict": predict},
                       {"instance_id": second, "predict": predict}]})
    assert status == 200, (node.id, status, body)
    return body["instance_id"], {c["instance_id"]: c["predicted_blocks"]
                                 for c in body["candidates"]}


def queue(node):
    status, body = node.request("GET", "/v1/stats")
    assert status == 200, (status, body)
    return body["predicted"]["queue"]


def check_forwarded(leader, followers):
    # Nothing known: b (first) wins on the follower, which predicts the prefix on b.
    assert route(followers[0], "b", "a", True)[0] == "b"
    # The leader and the other follower prefer b for a request sharing the prefix (a would
    # win a tie), crediting its 8 predicted blocks: the prediction went through the log.
    # The follower's route is repeated meanwhile (a renewal), so that one forward lost to a
    # slow machine does not fail the test.
    for node in [leader, followers[1], followers[0]]:
        def predicted_there(n=node):
            assert route(followers[0], "b", "a", True)[0] == "b"
            return route(n, "a", "b", False, extra=8) == ("b", {"a": 0, "b": 8})
        h.wait_until(f"server {node.id} routes to b on its prediction", predicted_there)
    assert queue(followers[0])["forwarded"] >= 1, queue(followers[0])
    assert queue(leader)["received"] >= 1, queue(leader)
    print("a follower's prediction reached the leader and the other follower "
          f"(follower's queue: {queue(followers[0])})", flush=True)


def check_internal_route(cluster, leader, follower):
    cluster_id, secret_file = cluster.auth
    secret = pa.read_secret(secret_file)

    def signed_post(node, payload, sender=follower.id):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        header = pa.peer_header(secret, cluster_id, sender, "POST", PATH, body)
        return pa.post_raw(node, PATH, body, {"X-Kvatlas-Peer-Auth": header})

    good = {"predictions": [{"model_name": "m", "block_size": h.BS, "instance_id": "c",
                             "keys": [1, 2, 3]}]}
    status, answer = pa.post_raw(leader, PATH, json.dumps(good).encode(), {})
    assert status == 401 and answer["code"] == "unauthenticated", (status, answer)
    assert "cluster secret" in answer["message"], answer
    status, answer = signed_post(leader, good)
    assert status == 200 and answer == {"status": "ok", "predictions": 1}, (status, answer)
    status, answer = signed_post(follower, good)  # never forwarded again
    assert status == 421 and answer["code"] == "not_leader", (status, answer)
    assert answer["leader_id"] == leader.id, answer

    cases = [
        (b"not json", 400, "body: invalid JSON"),
        ({"predictions": []}, 400, "body.predictions: must be a non-empty array"),
        ({"predictions": [{"model_name": "m", "instance_id": "c", "keys": [1]}]}, 400,
         "body.predictions[0].block_size: is required"),
        ({"predictions": [{"model_name": "m", "block_size": 4, "instance_id": "c",
                           "keys": [1, -2]}]}, 400,
         "body.predictions[0].keys[1]: must be an unsigned integer"),
        ({"predictions": [{"model_name": "m" * 300, "block_size": 4, "instance_id": "c",
                           "keys": [1]}]}, 400,
         "body.predictions[0].model_name: 300 bytes, longer than the limit of 256"),
        ({"predictions": [{"model_name": "m", "block_size": 4, "instance_id": "c",
                           "keys": list(range(65_537))}]}, 413,
         "body.predictions: more than 65536 keys in all"),
        ({"predictions": [good["predictions"][0]] * 4097}, 413,
         "4097 predictions; one call carries at most 4096"),
    ]
    for payload, want_status, want_message in cases:
        status, answer = signed_post(leader, payload)
        assert status == want_status, (want_message, status, answer)
        assert want_message in answer["message"], (want_message, answer)
    print("the internal route refuses unsigned, malformed and oversized calls", flush=True)


def main():
    with h.running_cluster(sys.argv[1]) as cluster:
        leader = cluster.leader()
        h.wait_addresses_known(cluster)
        followers = [n for n in cluster.nodes if n is not leader]
        check_forwarded(leader, followers)
        check_internal_route(cluster, leader, followers[0])
        print("predict forward: ok", flush=True)


if __name__ == "__main__":
    main()
