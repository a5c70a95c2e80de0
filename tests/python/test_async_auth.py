"""AsyncClient under asyncio, and access tokens (docs/security.md)."""

import asyncio
import hashlib
import os
import secrets

import pytest

import kvatlas

CTX = kvatlas.Context("m", 4)
H = kvatlas.BlockHasher()


def test_async_client(server):
    tokens = list(range(16))

    async def main():
        async with await kvatlas.AsyncClient.connect([server.rpc]) as ac:
            records = ac.watch(filter=kvatlas.FeedFilter.for_context(CTX))
            first = asyncio.ensure_future(records.__anext__())
            await asyncio.sleep(0.2)  # the watch starts on the executor
            written = await ac.ingest([kvatlas.stored(CTX, "a", H.sequence_hashes(tokens, 4))])
            answers = await asyncio.gather(*[ac.lookup(CTX, tokens=tokens) for _ in range(20)])
            assert all(a.instance("a").blocks.gpu == 4 for a in answers)
            routed = await ac.route(CTX, [kvatlas.Candidate("a"), kvatlas.Candidate("b")],
                                    tokens=tokens)
            assert routed.pick == "a"
            assert (await ac.stats())["revision"] >= written.revision
            assert (await ac.cluster_status())["state"] == "leader"
            assert len((await ac.snapshot(CTX)).copies) == 4
            assert len((await ac.locate(H.sequence_hashes(tokens, 4)[0])).copies) == 1
            assert (await ac.heartbeat(["a"])).holders == 1
            await ac.ping()
            assert "routers" in await ac.fetch_loads()
            filled = await ac.fill_loads([kvatlas.Candidate("a")], 4)
            assert filled[0].instance_id == "a"
            w = ac.client.writer("async-writer")
            assert (await ac.write(w, [])).events == 0
            record = await asyncio.wait_for(first, 10.0)
            assert record.revision == written.revision
            await records.aclose()
            with pytest.raises(kvatlas.Error) as e:
                await ac.lookup(kvatlas.Context("", 4), tokens=tokens)
            assert e.value.code == "invalid_argument"

    asyncio.run(main())


def test_tokens(make_server, tmp_path):
    tokens = {role: "kvt_" + secrets.token_hex(32) for role in ("read", "write")}
    token_file = tmp_path / "tokens"
    token_file.write_text("".join(
        f"{role}-client:{role}:{hashlib.sha256(t.encode()).hexdigest()}\n"
        for role, t in tokens.items()))
    server = make_server(extra=["--token-file", str(token_file)])
    event = kvatlas.stored(CTX, "a", H.sequence_hashes(list(range(8)), 4))

    with pytest.raises(kvatlas.Error) as e:
        kvatlas.Client([server.rpc], token="kvt_" + "0" * 64)
    assert e.value.code == "unauthenticated"
    with kvatlas.Client([server.rpc], token=tokens["write"]) as writer:
        assert writer.ingest([event]).events == 1
    with kvatlas.Client([server.rpc], token=tokens["read"]) as reader:
        assert reader.lookup(CTX, tokens=list(range(8))).instance("a").blocks.gpu == 2
        with pytest.raises(kvatlas.Error) as e:
            reader.ingest([event])
        assert e.value.code == "permission_denied"
    with kvatlas.LocalIndex([server.rpc], [CTX], token=tokens["read"]) as index:
        index.wait_synced(timeout=10.0)
        assert index.lookup(CTX, tokens=list(range(8))).instance("a").blocks.gpu == 2
    assert os.path.exists(token_file)


def test_tls_options_are_passed_to_the_client(server):
    # A CA file that does not exist is refused by the C++ client's option checks.
    with pytest.raises(kvatlas.Error) as e:
        kvatlas.Client([server.rpc], tls=kvatlas.TlsOptions(ca_file="/nonexistent/ca.pem"))
    assert e.value.code == "invalid_argument"
    assert "ca.pem" in e.value.message
    tls = kvatlas.TlsOptions(server_name="localhost")
    assert tls.enabled and tls.server_name == "localhost"
