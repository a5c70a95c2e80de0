"""kvatlas.LocalIndex: the in-process replica converges with the server's index."""

import random

import pytest

import kvatlas

CTX = kvatlas.Context("m", 4)
OTHER = kvatlas.Context("m", 4, lora_name="lora")
H = kvatlas.BlockHasher()


def keys(tokens, ctx=CTX):
    return H.sequence_hashes(list(tokens), ctx.block_size)


def prompts(rng, n):
    """Prompts sharing prefixes: a few roots, each extended by random blocks."""
    roots = [[rng.randrange(1000) for _ in range(8)] for _ in range(3)]
    return [rng.choice(roots) + [rng.randrange(1000) for _ in range(4 * rng.randrange(6))]
            for _ in range(n)]


def assert_converged(index, client, all_prompts, revision):
    index.wait_for_revision(revision, timeout=10.0)
    for tokens in all_prompts:
        remote = client.lookup(CTX, tokens=tokens, min_revision=revision)
        local = index.lookup(CTX, keys(tokens))
        assert local.revision >= revision
        assert local.blocks_queried == remote.blocks_queried
        assert local.blocks_found == remote.blocks_found
        assert local.instances == remote.instances
        assert index.lookup(CTX, tokens=tokens).instances == remote.instances
        for holder in ("h0", "h1"):
            only = client.lookup(CTX, tokens=tokens, instance_id=holder)
            assert index.lookup(CTX, keys(tokens), instance_id=holder).instances == only.instances


def test_local_index_converges_with_the_server(client, server):
    rng = random.Random(7)
    all_prompts = prompts(rng, 12)
    tiers = ["GPU", "cpu", "disk"]
    # Data before the index starts (its snapshot) and after (its watch).
    first = client.ingest([kvatlas.stored(CTX, "h0", keys(p)) for p in all_prompts[:4]])
    with kvatlas.LocalIndex([server.rpc], [CTX, OTHER]) as index:
        index.wait_synced(timeout=10.0)
        assert index.revision >= first.revision
        revision = first.revision
        for step in range(30):
            p = rng.choice(all_prompts)
            holder = kvatlas.Holder(f"h{rng.randrange(3)}", rng.randrange(2))
            op = rng.random()
            if op < 0.6:
                event = kvatlas.stored(CTX, holder, keys(p), medium=rng.choice(tiers))
            elif op < 0.9:
                event = kvatlas.removed(CTX, holder, keys(p)[rng.randrange(max(1, len(p) // 4)):]
                                        or keys(p))
            else:
                event = kvatlas.cleared(CTX, holder)
            revision = client.ingest([event]).revision
            if step % 10 == 9:
                assert_converged(index, client, all_prompts, revision)
        assert_converged(index, client, all_prompts, revision)
        stats = index.stats()
        assert stats.synced and stats.staleness == 0.0 and stats.revision >= revision
        assert stats.records_applied > 0 and stats.snapshots_loaded >= 2
        assert stats.state == "synced"
        assert stats.last_error_code == "" and stats.last_error == ""
        status = {s.context.lora_name: s for s in index.context_status()}
        assert set(status) == {CTX.lora_name, OTHER.lora_name}
        for s in status.values():
            assert s.state == "synced" and s.failures == 0 and s.last_error_code == ""
            assert s.buffered_records == 0 and s.buffered_bytes == 0
        assert status[CTX.lora_name].snapshot_revision >= 1
        assert status[CTX.lora_name].snapshot_copies > 0

        with pytest.raises(kvatlas.Error) as e:
            index.lookup(kvatlas.Context("unknown", 4), [1, 2])
        assert e.value.code == "not_found"
        with pytest.raises(ValueError):
            index.lookup(CTX)
    with pytest.raises(kvatlas.Error) as e:
        index.lookup(CTX, [1])
    assert e.value.code == "unavailable"


def test_local_index_and_scorer_route_like_the_server(client, server):
    tokens = list(range(500, 540))  # 10 blocks
    client.ingest([kvatlas.stored(CTX, "warm", keys(tokens[:32])),
                   kvatlas.stored(CTX, "cool", keys(tokens[:8]), medium="cpu")])
    candidates = [kvatlas.Candidate("cool"), kvatlas.Candidate("warm", queued_prefill_tokens=8),
                  kvatlas.Candidate("idle")]
    with kvatlas.LocalIndex([server.rpc], [CTX]) as index:
        index.wait_synced(timeout=10.0)
        local = kvatlas.Scorer().rank(index.lookup(CTX, keys(tokens)), candidates,
                                      prompt_tokens=len(tokens))
    remote = client.route(CTX, candidates, tokens=tokens)
    assert local.ranked == remote.ranked
    assert local.pick == "warm"


def test_local_index_options_are_checked(server):
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.LocalIndex([server.rpc], [])
    assert e.value.code == "invalid_argument"
