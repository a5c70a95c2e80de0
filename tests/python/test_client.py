"""kvatlas.Client against a real kvatlas-server: every call, its errors, the Writer's
exactly-once numbering, the GIL being released while a call waits."""

import os
import threading
import time

import pytest

import kvatlas

CTX = kvatlas.Context("m", 4)
H = kvatlas.BlockHasher()


def keys(tokens):
    return H.sequence_hashes(tokens, CTX.block_size)


def store(client, holder, tokens, **fields):
    return client.ingest([kvatlas.stored(CTX, holder, keys(tokens), **fields)])


def test_ingest_and_lookup_by_tokens_and_hashes(client):
    tokens = list(range(1, 17))  # 4 blocks
    answer = store(client, "a", tokens[:12])
    assert answer.events == 1 and answer.blocks == 3 and answer.revision > 0
    store(client, kvatlas.Holder("b", 1), tokens[:4], medium="cpu")

    by_hash = client.lookup(CTX, hashes=keys(tokens), min_revision=answer.revision)
    by_tokens = client.lookup(CTX, tokens=tokens)
    assert by_hash.blocks_queried == 4 and by_hash.blocks_found == 3
    assert by_tokens.instances == by_hash.instances
    assert by_hash.instance("a").blocks.gpu == 3
    b = by_hash.instance("b")
    assert b.blocks.gpu == 0 and b.blocks.cpu == 1 and b.dp_ranks[0].dp_rank == 1
    assert by_hash.instance("nobody") is None
    only_a = client.lookup(CTX, hashes=keys(tokens), instance_id="a")
    assert [i.instance_id for i in only_a.instances] == ["a"]

    removed = client.ingest([kvatlas.removed(CTX, "a", keys(tokens)[2:3])])
    assert client.lookup(CTX, tokens=tokens, min_revision=removed.revision).instance(
        "a").blocks.gpu == 2
    client.ingest([kvatlas.cleared(CTX, "a")])
    assert client.lookup(CTX, tokens=tokens, linearizable=True).instance("a") is None


def test_reused_reports_and_holder_wide_clears(client):
    """origin="reused" re-reports blocks (no new reference: one remove takes them); a
    cleared event of scope "holder" drops every context. Both cross the binary protocol."""
    tokens = list(range(200, 208))  # 2 blocks
    store(client, "r", tokens)
    store(client, "r", tokens, origin="reused")
    removed = client.ingest([kvatlas.removed(CTX, "r", keys(tokens))])
    assert client.lookup(CTX, tokens=tokens, min_revision=removed.revision).instance("r") is None
    store(client, "r", tokens, origin="new")
    store(client, "r", tokens, origin="new")  # two copies: one remove leaves one
    removed = client.ingest([kvatlas.removed(CTX, "r", keys(tokens))])
    assert client.lookup(CTX, tokens=tokens, min_revision=removed.revision).instance(
        "r").blocks.gpu == 2
    event = kvatlas.stored(CTX, "r", keys(tokens), origin="reused")
    assert event.origin == "reused" and kvatlas.stored(CTX, "r", [1]).origin is None
    with pytest.raises(ValueError):
        kvatlas.stored(CTX, "r", [1], origin="copied")
    with pytest.raises(ValueError):
        kvatlas.removed(CTX, "r", [1], origin="reused")

    lora = kvatlas.Context("m", 4, lora_name="adapter")
    client.ingest([kvatlas.stored(lora, "r", H.sequence_hashes(tokens, 4))])
    client.ingest([kvatlas.cleared(CTX, "r")])  # this context only
    assert client.lookup(lora, tokens=tokens, linearizable=True).instance("r") is not None
    assert kvatlas.cleared(CTX, "r", scope="holder").scope == "holder"
    client.ingest([kvatlas.cleared(CTX, "r", scope="holder")])
    assert client.lookup(lora, tokens=tokens, linearizable=True).instance("r") is None
    with pytest.raises(ValueError):
        kvatlas.cleared(CTX, "r", scope="all")


def test_version():
    """kvatlas.__version__ is the build's, and the package metadata's (pyproject.toml)."""
    assert kvatlas.__version__.count(".") == 2 and kvatlas.__version__[0].isdigit()
    pyproject = os.path.join(os.path.dirname(__file__), "..", "..", "client", "python",
                             "pyproject.toml")
    with open(pyproject) as f:
        assert f'version = "{kvatlas.__version__}"' in f.read()


def test_errors_carry_the_server_code(client):
    with pytest.raises(kvatlas.Error) as e:
        client.ingest([kvatlas.stored(kvatlas.Context("m", 0), "a", [1])])
    assert e.value.code == "invalid_argument" and e.value.number == 1
    assert "block_size" in e.value.message
    with pytest.raises(kvatlas.Error) as e:
        client.lookup(kvatlas.Context("", 4), hashes=[1])
    assert e.value.code == "invalid_argument"
    with pytest.raises(ValueError):
        client.lookup(CTX)  # neither tokens nor hashes
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.Client(["127.0.0.1:1"], connect_timeout=0.5)
    assert e.value.code == "unavailable"
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.Client([])
    assert e.value.code == "invalid_argument"


def test_route_matches_the_local_scorer(client):
    tokens = list(range(100, 132))  # 8 blocks
    store(client, "warm", tokens[:24])
    store(client, "cold", tokens[:4])
    candidates = [kvatlas.Candidate("cold"), kvatlas.Candidate("warm"),
                  kvatlas.Candidate("busy", queued_prefill_tokens=64)]
    routed = client.route(CTX, candidates, tokens=tokens)
    assert routed.pick == "warm" and routed.prompt_blocks == 8
    local = kvatlas.Scorer().rank(client.lookup(CTX, tokens=tokens), candidates,
                                  prompt_tokens=len(tokens))
    assert [c.instance_id for c in local.ranked] == [c.instance_id for c in routed.ranked]
    assert [c.cost for c in local.ranked] == [c.cost for c in routed.ranked]
    # Options reach the server: with decode load dominating, the idle candidate wins.
    heavy = [kvatlas.Candidate("warm", active_decode_blocks=1000), kvatlas.Candidate("cold")]
    opts = kvatlas.RoutingOptions(decode_scale=1.0, cpu=0.5)
    assert client.route(CTX, heavy, hashes=keys(tokens), options=opts).pick == "cold"
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.RoutingOptions(gpu=1.5)
    assert e.value.code == "invalid_argument"


def test_route_predicts_for_a_candidate_without_events(client):
    # Approximate mode: "quiet" publishes no events; a route that picks it records the
    # request's blocks as predicted there, so the next route with that prefix prefers it.
    tokens = list(range(5000, 5032))  # 8 blocks
    first = client.route(CTX, [kvatlas.Candidate("quiet", predict=True)], tokens=tokens)
    assert first.pick == "quiet" and first.ranked[0].predicted_blocks == 0
    candidates = [kvatlas.Candidate("other"), kvatlas.Candidate("quiet", predict=True)]
    deadline = time.time() + 10
    while True:  # recorded within 50 ms and one commit
        routed = client.route(CTX, candidates, tokens=tokens)
        if routed.ranked[0].predicted_blocks == 8 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert routed.pick == "quiet", routed.ranked
    assert routed.ranked[0].predicted_blocks == 8 and routed.ranked[0].matched.predicted == 8
    # A zero weight credits the predictions nothing: the tie goes to the first candidate.
    none = client.route(CTX, candidates, tokens=tokens,
                        options=kvatlas.RoutingOptions(predicted=0.0))
    assert none.ranked[0].credit == 0
    assert kvatlas.RoutingOptions().predicted == 1.0
    assert not kvatlas.Candidate("x").predict
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.RoutingOptions(predicted=1.5)
    assert e.value.code == "invalid_argument"


def test_route_queue_scale(client):
    tokens = list(range(300, 332))  # 8 blocks
    store(client, "q-warm", tokens[:24])
    # q-warm: 2 new blocks behind 10 queued ones; q-cold: 8 new blocks, idle.
    candidates = [kvatlas.Candidate("q-warm", queued_prefill_tokens=40), kvatlas.Candidate("q-cold")]
    assert kvatlas.RoutingOptions().queue_scale == 0.4
    # Without the relative terms: 2 + 0.4 * 10 = 6 < 8, the prefix wins; weighing the queue
    # fully (12) sends it away.
    plain = kvatlas.RoutingOptions(replica_credit=0, excess_queue_scale=0)
    assert client.route(CTX, candidates, tokens=tokens, options=plain).pick == "q-warm"
    full = kvatlas.RoutingOptions(queue_scale=1.0, replica_credit=0, excess_queue_scale=0)
    assert full.queue_scale == 1.0
    assert client.route(CTX, candidates, tokens=tokens, options=full).pick == "q-cold"
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.RoutingOptions(queue_scale=-1)
    assert e.value.code == "invalid_argument" and "queue_scale" in str(e.value)


def test_route_relative_terms(client):
    tokens = list(range(400, 432))  # 8 blocks
    store(client, "r-warm", tokens[:24])
    candidates = [kvatlas.Candidate("r-warm", queued_prefill_tokens=40), kvatlas.Candidate("r-cold")]
    d = kvatlas.RoutingOptions()
    assert (d.replica_credit, d.excess_queue_scale, d.excess_queue_epsilon) == (1.0, 0.7, 0.5)
    # r-warm queues 10 blocks against a mean of 5: its 6 blocks earn r-cold a credit of
    # 1 x 6 / 2 = 3 (cost 8 - 3 = 5), and its queue past 1.5 x 5 weighs 0.7 x 2.5 more
    # (2 + 0.4 x 10 + 1.75 = 7.75): the copy is made on r-cold.
    routed = client.route(CTX, candidates, tokens=tokens)
    assert routed.pick == "r-cold"
    assert [c.cost for c in routed.ranked] == pytest.approx([5.0, 7.75])
    local = kvatlas.Scorer().rank(client.lookup(CTX, tokens=tokens), candidates,
                                  prompt_tokens=len(tokens))
    assert [c.cost for c in local.ranked] == [c.cost for c in routed.ranked]
    # Each term alone reaches the server.
    no_credit = kvatlas.RoutingOptions(replica_credit=0)
    assert [c.cost for c in client.route(CTX, candidates, tokens=tokens,
                                         options=no_credit).ranked] == pytest.approx([7.75, 8.0])
    no_excess = kvatlas.RoutingOptions(excess_queue_scale=0)
    assert [c.cost for c in client.route(CTX, candidates, tokens=tokens,
                                         options=no_excess).ranked] == pytest.approx([5.0, 6.0])
    wide = kvatlas.RoutingOptions(excess_queue_epsilon=1.0)  # bound 10: no excess
    assert [c.cost for c in client.route(CTX, candidates, tokens=tokens,
                                         options=wide).ranked] == pytest.approx([5.0, 6.0])
    for field in ("replica_credit", "excess_queue_scale", "excess_queue_epsilon"):
        with pytest.raises(kvatlas.Error) as e:
            kvatlas.RoutingOptions(**{field: -1})
        assert e.value.code == "invalid_argument" and field in str(e.value)


def test_writer_applies_each_batch_once(client):
    w = client.writer("py-writer-1")
    assert w.writer_id == "py-writer-1" and w.next_sequence == 1
    first = w.write([kvatlas.stored(CTX, "w", keys(list(range(4))))])
    assert w.next_sequence == 2 and not w.has_pending
    w.settle()
    # A resend of sequence 1 (its answer lost, say) changes nothing; sequence 2 applies.
    before = client.stats()["applied"]["stored"]
    client.ingest([kvatlas.stored(CTX, "w", keys(list(range(8))))],
                  writer_id="py-writer-1", sequence=1)
    assert client.stats()["applied"]["stored"] == before
    assert client.lookup(CTX, tokens=list(range(8))).instance("w").blocks.gpu == 1
    second = w.write([kvatlas.stored(CTX, "w", keys(list(range(8))))])
    assert second.revision > first.revision
    assert client.lookup(CTX, tokens=list(range(8))).instance("w").blocks.gpu == 2
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.Writer(client, "bad id!").write([])
    assert e.value.code == "invalid_argument"
    with pytest.raises(ValueError):
        client.ingest([], writer_id="x")


def test_heartbeat_stats_snapshot_locate_ping(client):
    answer = client.heartbeat([kvatlas.Holder("a"), "b"])
    assert answer.holders == 2 and answer.ttl_seconds == 0
    tokens = list(range(40, 52))
    written = store(client, "a", tokens, medium="GPU")
    stats = client.stats()
    assert stats["revision"] >= written.revision and stats["index"]["blocks"] == 3
    assert stats["hash_seed"] == 1337
    snap = client.snapshot(CTX)
    assert snap.revision >= written.revision and snap.context == CTX
    assert sorted(c.key for c in snap.copies) == sorted(keys(tokens))
    assert {c.copy.holder.id for c in snap.copies} == {"a"}
    located = client.locate(keys(tokens)[1], CTX)
    assert len(located.copies) == 1
    copy = located.copies[0]
    assert copy.holder == kvatlas.Holder("a") and copy.depth == 1
    assert copy.tier == kvatlas.Tier.GPU
    assert client.locate(12345).copies == []
    client.ping(timeout=2.0)
    assert client.open_connections == 1
    with pytest.raises(kvatlas.Error) as e:
        client.heartbeat([""])
    assert e.value.code == "invalid_argument"


def test_cluster_status(client):
    status = client.cluster_status()
    assert status["state"] == "leader" and status["id"] == 1
    assert [m["id"] for m in status["members"]] == [1]


def test_closed_client_raises_unavailable(server):
    c = kvatlas.Client([server.rpc])
    c.close()
    with pytest.raises(kvatlas.Error) as e:
        c.ping()
    assert e.value.code == "unavailable"
    c.close()  # idempotent


def test_calls_release_the_gil(client):
    """A call waiting in C++ (a quiet watch's next) lets other Python threads run."""
    stream = client.watch_stream()
    waited = []
    t = threading.Thread(target=lambda: waited.append(stream.next(timeout=2.0)))
    t.start()
    time.sleep(0.1)
    spins = 0
    while t.is_alive() and spins < 1000:
        spins += 1  # runs only if the waiting thread dropped the GIL
        client.ping()
    assert t.is_alive(), "the waiting call returned before the other thread ran"
    t.join()
    assert waited == [[]]
    stream.cancel()


def test_threads_share_one_client(client):
    tokens = list(range(200, 216))
    store(client, "t", tokens)
    errors, answers = [], []

    def work():
        try:
            for _ in range(50):
                answers.append(client.lookup(CTX, tokens=tokens).instance("t").blocks.gpu)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and answers == [4] * 400


def test_load_reporter_shares_a_routers_in_flight_load(client):
    """Two routers' reporters are summed for a route whose candidates give no load
    (docs/routing.md §Shared load); closing one takes its load away at once."""
    def queued_on_a():
        answer = client.route(CTX, [kvatlas.Candidate("a")], tokens=list(range(64)))
        return answer.ranked[0].queued_prefill_blocks

    def wait_queued(want):
        for _ in range(200):
            if queued_on_a() == want:
                return True
            time.sleep(0.05)
        return False

    with pytest.raises(kvatlas.Error, match="interval"):
        kvatlas.LoadReporter(client, "r", interval_s=5.0)
    r1 = kvatlas.LoadReporter(client, "r1", interval_s=0.05)
    with kvatlas.LoadReporter(client, "r2", interval_s=0.05) as r2:
        token = r1.route_started("a", 0, 4, 40)
        r2.route_started("a", 0, 3, 30)
        assert r1.summary() == [{"instance_id": "a", "dp_rank": 0, "prefill_blocks": 4,
                                 "decode_blocks": 40}]
        assert wait_queued(7)
        r1.route_finished(token)
        assert wait_queued(3)
        assert r2.reports_sent >= 1
    assert wait_queued(0)  # r2 left with an empty report
    r1.close()


def test_fill_loads_gives_a_local_scorer_the_fleets_load(client):
    """fetch_loads and fill_loads (binary kLoadView): a scheduler scoring in its own process
    fills the candidates that give no load with the fleet's sum, as a server's route does."""
    with kvatlas.LoadReporter(client, "fill-r1", interval_s=0.05) as r1, \
            kvatlas.LoadReporter(client, "fill-r2", interval_s=0.05) as r2:
        r1.route_started("fill-x", 0, 5, 7)
        r2.route_started("fill-x", 1, 2, 1)
        r1.flush()
        r2.flush()
        view = client.fetch_loads()
        ids = {r["router_id"]: r for r in view["routers"]}
        assert ids["fill-r1"]["loads"] == [{"instance_id": "fill-x", "dp_rank": 0,
                                            "prefill_blocks": 5, "decode_blocks": 7}]
        assert 0 < ids["fill-r1"]["expires_in_ms"] <= 2000
        filled = client.fill_loads([kvatlas.Candidate("fill-x"),
                                    kvatlas.Candidate("fill-x", dp_rank=1),
                                    kvatlas.Candidate("fill-x", queued_prefill_tokens=3)], 16)
        assert [(c.queued_prefill_tokens, c.active_decode_blocks) for c in filled] == [
            (7 * 16, 8), (2 * 16, 1), (3, 0)]
    assert not [r for r in client.fetch_loads()["routers"] if r["router_id"] == "fill-r1"]
