"""Approximate mode from Python: Client.record_prediction records a local decision, a
LocalIndex with predictions=True sees it (LookupAnswer.predicted) and Scorer.rank credits
it as the server's route does; a watch with FeedFilter(predicted=True) receives the
PREDICTED record, one without it does not."""

import time

import pytest

import kvatlas

CTX = kvatlas.Context("m", 4)
KEYS = list(range(500, 508))


def eventually(probe, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.02)
    return False


def test_record_prediction_reaches_a_local_index_and_its_scorer(client, server):
    with kvatlas.LocalIndex([server.rpc], [CTX], predictions=True) as index:
        index.wait_synced(timeout=10.0)
        plain = client.watch_stream(filter=kvatlas.FeedFilter.for_context(CTX))
        wanted = kvatlas.FeedFilter.for_context(CTX)
        wanted.predicted = True
        predicted = client.watch_stream(filter=wanted)
        assert client.record_prediction(CTX, kvatlas.Holder("p", 0), KEYS) == 8

        def seen():
            return [p for p in index.lookup(CTX, KEYS).predicted if p.instance_id == "p"]
        assert eventually(lambda: len(seen()) == 1)
        assert (seen()[0].dp_rank, seen()[0].blocks) == (0, 8)

        candidates = [kvatlas.Candidate("q"), kvatlas.Candidate("p")]
        ranked = kvatlas.Scorer().rank(index.lookup(CTX, KEYS), candidates,
                                       prompt_blocks=len(KEYS))
        remote = client.route(CTX, candidates, hashes=KEYS)
        assert ranked.pick == remote.pick == "p"
        # The binary kRoute answers predicted_blocks apart only to approximate requests; the
        # credit carries them either way.
        assert ranked.ranked[0].predicted_blocks == 8
        assert [c.credit for c in ranked.ranked] == [c.credit for c in remote.ranked]
        assert [c.cost for c in ranked.ranked] == [c.cost for c in remote.ranked]

        records = []
        assert eventually(lambda: records.extend(predicted.next(0.1)) or
                          any(r.op == kvatlas.FeedOp.PREDICTED for r in records))
        record = next(r for r in records if r.op == kvatlas.FeedOp.PREDICTED)
        assert record.keys == KEYS and record.holder.id == "p"
        assert record.expires_at_ms > time.time() * 1000
        assert all(r.op != kvatlas.FeedOp.PREDICTED for r in plain.next(0.2))
        assert index.stats().predicted_entries == 8


def test_record_prediction_refuses_bad_input(client):
    with pytest.raises(kvatlas.Error) as refused:
        client.record_prediction(CTX, kvatlas.Holder("", 0), KEYS)
    assert refused.value.code == "invalid_argument"
    with pytest.raises(kvatlas.Error) as empty:
        client.record_prediction(CTX, kvatlas.Holder("p", 0), [])
    assert empty.value.code == "invalid_argument"
