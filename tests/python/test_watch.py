"""Client.watch(): the change feed as an iterator, across a server restart."""

import time

import pytest

import kvatlas
from conftest import free_port

CTX = kvatlas.Context("m", 4)
H = kvatlas.BlockHasher()


def keys(tokens):
    return H.sequence_hashes(list(tokens), CTX.block_size)


def ingest_retrying(client, events, seconds=20.0):
    """Ingests once the restarted server leads again (unavailable / not_leader until then)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return client.ingest(events)
        except kvatlas.Error as e:
            if e.code not in ("unavailable", "not_leader", "deadline_exceeded") or \
                    time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_watch_yields_records_in_order(client):
    with client.watch_stream(filter=kvatlas.FeedFilter.for_context(CTX)) as stream:
        a = client.ingest([kvatlas.stored(CTX, "a", keys(range(8)))])
        client.ingest([kvatlas.stored(kvatlas.Context("other", 4), "a", keys(range(4)))])
        b = client.ingest([kvatlas.removed(CTX, "a", keys(range(8))[1:])])
        first, second = next(stream), next(stream)
        assert (first.revision, first.op, first.holder.id) == (a.revision, kvatlas.FeedOp.STORED, "a")
        assert first.keys == keys(range(8)) and first.context == CTX
        assert (second.revision, second.op) == (b.revision, kvatlas.FeedOp.REMOVED)
        assert stream.resume_from >= b.revision
    with pytest.raises(StopIteration):
        next(stream)  # cancelled by the with block


def test_watch_errors(client):
    with pytest.raises(kvatlas.Error) as e:
        client.watch_stream(from_revision=10 ** 9)
    assert e.value.code == "invalid_argument"
    stream = client.watch_stream()
    client.close()  # the stream outlives its client and ends with unavailable
    with pytest.raises(kvatlas.Error) as e:
        next(stream)
    assert e.value.code == "unavailable"


def test_watch_iterator_across_a_server_restart(make_server):
    server = make_server(rpc_port=free_port())
    with kvatlas.Client([server.rpc], deadline=2.0) as client:
        records = client.watch(filter=kvatlas.FeedFilter(model="m"))
        first = client.ingest([kvatlas.stored(CTX, "a", keys(range(4)))])
        got = next(records)
        assert (got.revision, got.holder.id) == (first.revision, "a")

        server.restart()  # same data directory, same port
        second = ingest_retrying(client, [kvatlas.stored(CTX, "b", keys(range(8)))])
        third = ingest_retrying(client, [kvatlas.removed(CTX, "b", keys(range(8))[1:])])
        got = next(records)  # the iterator re-watched from its last revision
        assert (got.revision, got.holder.id, got.op) == (second.revision, "b",
                                                         kvatlas.FeedOp.STORED)
        got = next(records)
        assert (got.revision, got.op) == (third.revision, kvatlas.FeedOp.REMOVED)
        records.close()


def test_watch_without_reconnect_raises_unavailable(make_server):
    server = make_server()
    with kvatlas.Client([server.rpc]) as client:
        records = client.watch(reconnect=False)
        client.ingest([kvatlas.stored(CTX, "a", keys(range(4)))])
        next(records)
        server.stop()
        with pytest.raises(kvatlas.Error) as e:
            next(records)
        assert e.value.code == "unavailable"
