#!/usr/bin/python3
"""ZMQ ingestion against the real kvatlas-server binary and fake engines.

usage: zmq_ingest_test.py KVATLAS_SERVER_BINARY [CASE...]

Each case starts its own server (127.0.0.1, port 0, temporary data directory) and fake
engines (fake_engine_publisher.py: vLLM's PUB + ROUTER replay behaviour), registers the
engines over POST /register and checks what the server answers over POST /query,
GET /v1/streams and GET /v1/blocks. Runs under Debian's /usr/bin/python3 (python3-zmq,
python3-msgpack). Every wait is bounded; a failure prints the server's log tail.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHER = os.path.join(HERE, "fake_engine_publisher.py")
DEADLINE_S = 10.0
BS = 4  # tokens per block in these tests


# More flags for every server the cases start (the suite runs again on servers hosting
# several raft groups: KVATLAS_ZMQ_TEST_SERVER_ARGS="--groups 3").
SERVER_ARGS = os.environ.get("KVATLAS_ZMQ_TEST_SERVER_ARGS", "").split()


class Server:
    """A kvatlas-server process on a temporary (or given) data directory."""

    def __init__(self, binary, data_dir=None, extra=(), preexec_fn=None):
        self.owns_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kvatlas-zmq-")
        self.log_path = os.path.join(self.data_dir, "server.log")
        addr_file = os.path.join(self.data_dir, "http.addr")
        if os.path.exists(addr_file):
            os.remove(addr_file)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--data-dir", self.data_dir, "--http-listen", "127.0.0.1:0",
             "--rpc-listen", "127.0.0.1:0", "--storage-sync", "false", *SERVER_ARGS, *extra],
            stdout=self.log, stderr=self.log, preexec_fn=preexec_fn)
        deadline = time.time() + DEADLINE_S
        while not os.path.exists(addr_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError("server did not start:\n" + self.log_tail())
            time.sleep(0.02)
        with open(addr_file) as f:
            self.base = "http://" + f.read().strip()

    def log_tail(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def request(self, method, path, body=None, expect=200):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=DEADLINE_S) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        answer = json.loads(text) if text else None
        assert expect is None or status == expect, (
            f"{method} {path}: {status} {answer}, expected {expect}")
        return answer

    def register(self, fake, instance, **extra):
        body = {"endpoint": fake.endpoint, "replay_endpoint": fake.replay_endpoint,
                "type": "vLLM", "modelname": "m", "instance_id": instance,
                "block_size": BS, "dp_rank": 0}
        body.update(extra)
        answer = self.request("POST", "/register", body)
        assert answer["status"] == "registered successfully", answer
        # The publisher sees the server's SUB socket once it has connected.
        assert fake.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"], "server did not connect"

    def query(self, tokens, **extra):
        body = {"model": "m", "token_ids": tokens, "block_size": BS}
        body.update(extra)
        return self.request("POST", "/query", body)

    def stream(self, key):
        for s in self.request("GET", "/v1/streams")["streams"]:
            if s["key"] == key:
                return s
        raise AssertionError(f"no stream {key}")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def cleanup(self):
        self.stop()
        if self.owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class Fake:
    """A fake engine driven through its JSON-lines control protocol."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            ["/usr/bin/python3", PUBLISHER, "--replay-endpoint", "tcp://127.0.0.1:0", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        assert ready["ready"], ready
        self.endpoint = ready["endpoint"]
        self.replay_endpoint = ready["replay_endpoint"]

    def cmd(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert "error" not in reply, reply
        return reply

    def store(self, tokens, **extra):
        return self.cmd(op="store", tokens=tokens, block_size=BS, **extra)

    def register_on(self, node, model="m", instance="e1"):
        """Registers this engine (vLLM) on a cluster harness node (cluster_fault_test.Node:
        request() returns (status, body)) and waits until the server subscribed."""
        status, body = node.request("POST", "/register", {
            "endpoint": self.endpoint, "replay_endpoint": self.replay_endpoint, "type": "vLLM",
            "modelname": model, "instance_id": instance, "block_size": BS})
        assert status == 200, body
        assert self.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.cmd(op="quit")
            except Exception:  # noqa: BLE001 - best effort
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def wait_for(what, predicate, server):
    deadline = time.time() + DEADLINE_S
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what} (last: {last})\n" + server.log_tail())


def match(server, tokens, instance, **extra):
    """The instance's answer for `tokens`, or {} when it matches nothing."""
    return server.query(tokens, **extra).get(extra.get("tenant_id", "default"), {}).get(instance, {})


PROMPT = list(range(100, 100 + 6 * BS))  # 6 blocks


def case_store_offload_remove_clear(binary, encoding):
    server, fake = Server(binary), Fake("--encoding", encoding)
    try:
        server.register(fake, "e1")
        first = fake.store(PROMPT[:3 * BS])
        wait_for("3 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 3 * BS, server)
        # The continuation names its parent by engine hash: the server chains through it.
        fake.store(PROMPT, from_block=3)
        wait_for("6 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 6 * BS, server)
        # Offload (no tokens) resolves the engine hashes through the aliases. The Conductor
        # answer's per-medium keys count each medium alone.
        fake.cmd(op="offload", hashes=first["hashes"][:2], medium="CPU")
        wait_for("CPU copies", lambda: match(server, PROMPT, "e1").get("CPU") == 2 * BS, server)
        # Removing the GPU copy of block 1 leaves its CPU copy: the GPU prefix is 1 block,
        # and the longest prefix over all media is still 6 blocks.
        fake.cmd(op="remove", hashes=[first["hashes"][1]], medium="GPU")
        wait_for("GPU prefix of 1 block",
                 lambda: match(server, PROMPT, "e1").get("GPU") == 1 * BS, server)
        answer = match(server, PROMPT, "e1")
        assert answer["longest_matched"] == 6 * BS, answer
        fake.cmd(op="clear")
        wait_for("clear", lambda: match(server, PROMPT, "e1") == {}, server)
        # The stream's counters are updated by the apply callback, just after readers can
        # see the batch's effect.
        wait_for("clear counted",
                 lambda: server.stream("e1|default|0")["events"]["cleared"] == 1, server)
        s = server.stream("e1|default|0")
        assert s["events"]["stored"] == 3 and s["events"]["removed"] == 1, s
        assert s["events"]["cleared"] == 1 and s["gaps"] == 0 and s["last_seq"] == 4, s
        # Unregister drops the stream (and would drop its entries).
        fake.store(PROMPT[:BS])
        wait_for("re-store", lambda: match(server, PROMPT, "e1").get("GPU") == BS, server)
        server.request("POST", "/unregister", {"instance_id": "e1", "type": "vLLM",
                                               "modelname": "m", "block_size": BS})
        assert match(server, PROMPT, "e1") == {}
        wait_for("stream gone", lambda: not server.request("GET", "/v1/streams")["streams"],
                 server)
        server.request("POST", "/unregister", {"instance_id": "e1"}, expect=404)
    finally:
        fake.close()
        server.cleanup()


def case_gap_is_replayed(binary):
    server, fake = Server(binary), Fake("--replay-style", "old")
    try:
        server.register(fake, "e1")
        fake.store(PROMPT[:BS])
        wait_for("block 0", lambda: match(server, PROMPT, "e1").get("GPU") == BS, server)
        fake.cmd(op="drop_next")
        fake.store(PROMPT[:2 * BS], from_block=1)  # lost on the wire, kept for replay
        fake.store(PROMPT[:3 * BS], from_block=2)  # seq jumps: the server replays the gap
        wait_for("3 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 3 * BS, server)
        s = server.stream("e1|default|0")
        assert s["gaps"] >= 1 and s["replays"] >= 1 and s["replayed_batches"] >= 1, s
        assert s["lost_batches"] == 0 and s["last_seq"] == 2, s
    finally:
        fake.close()
        server.cleanup()


def case_engine_restart_resets(binary):
    server, fake = Server(binary), Fake()
    try:
        server.register(fake, "e1")
        fake.store(PROMPT[:2 * BS])
        fake.store(PROMPT[:3 * BS], from_block=2)
        wait_for("3 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 3 * BS, server)
        # The engine restarts: its sequence starts again at 0 and its cache is empty.
        fake.cmd(op="restart")
        other = list(range(900, 900 + 2 * BS))
        fake.store(other)
        wait_for("new block", lambda: match(server, other, "e1").get("GPU") == 2 * BS, server)
        assert match(server, PROMPT, "e1") == {}, "the restarted engine's old blocks remain"
        s = server.stream("e1|default|0")
        assert s["restarts"] == 1 and s["last_seq"] == 0, s
    finally:
        fake.close()
        server.cleanup()


def holder_entries(server, instance):
    """Entries /v1/holders counts for `instance` (0 when it holds none)."""
    for h in server.request("GET", "/v1/holders")["holders"]:
        if h["holder_id"] == instance:
            return h["entries"]
    return 0


def case_restart_mid_replay(binary):
    """The engine restarts while kvatlas replays a gap from it: the new engine's first batch
    is recognised as a restart at once (the replay is cancelled, the holder cleared) and the
    old engine's replay answer, sent after the restart, is never applied."""
    server, fake = Server(binary), Fake()
    a1, a2, a3 = (list(range(base, base + 2 * BS)) for base in (100, 200, 300))
    b1, b2 = list(range(900, 900 + 2 * BS)), list(range(800, 800 + BS))
    try:
        server.register(fake, "e1")
        fake.cmd(op="replay_options", hold=True)  # answers wait for release_replays
        fake.store(a1)  # 0
        wait_for("a1", lambda: match(server, a1, "e1").get("GPU") == 2 * BS, server)
        fake.cmd(op="drop_next")
        fake.store(a2)  # 1: lost on the wire
        fake.store(a3)  # 2: a gap: kvatlas asks for a replay from 1, whose answer is held
        wait_for("replay request", lambda: fake.cmd(op="status")["held_replays"] == 1, server)
        fake.cmd(op="restart")  # same sockets, sequence back to 0, replay buffer emptied
        fake.store(b1)  # the new engine's 0
        wait_for("b1", lambda: match(server, b1, "e1").get("GPU") == 2 * BS, server)
        assert match(server, a1, "e1") == {}, "the old engine's blocks remain"
        # The old engine's answer (a2, a3 at 1 and 2) goes out now, to the cancelled
        # replay's socket; then the new engine's 1 shows the stream going on.
        assert fake.cmd(op="release_replays")["released"] == 1
        time.sleep(0.3)
        fake.store(b2)  # 1
        wait_for("b2", lambda: match(server, b2, "e1").get("GPU") == BS, server)
        time.sleep(0.3)
        for old in (a1, a2, a3):
            assert match(server, old, "e1") == {}, "an old engine's block came back"
        entries = holder_entries(server, "e1")
        assert entries == 3, (entries, server.stream("e1|default|0"))
        s = server.stream("e1|default|0")
        assert s["restarts"] == 1 and s["replays"] == 1 and s["replay_failures"] == 0, s
        assert s["last_seq"] == 1 and s["state"] == "live", s
        assert s["replayed_batches"] == 0 and s["lost_batches"] == 1, s  # a3, buffered
    finally:
        fake.close()
        server.cleanup()


def case_replay_after_remove(binary):
    """A replay whose answer carries Stored(A) from before the applied Removed(A) does not
    bring A back, and a live batch the replay already handed on is a duplicate, not a
    restart."""
    server, fake = Server(binary), Fake()
    blocks = [list(range(base, base + BS)) for base in (300, 400, 500, 600, 700)]
    try:
        server.register(fake, "e1")
        a = fake.store(PROMPT[:2 * BS])  # 0
        fake.cmd(op="remove", hashes=a["hashes"])  # 1
        fake.store(blocks[0])  # 2
        wait_for("block 0", lambda: match(server, blocks[0], "e1").get("GPU") == BS, server)
        assert match(server, PROMPT, "e1") == {}
        # Replays are answered with the whole buffer (Stored(A) first), once released.
        fake.cmd(op="replay_options", hold=True, whole_buffer=True)
        fake.cmd(op="drop_next")
        fake.store(blocks[1])  # 3: lost on the wire
        fake.store(blocks[2])  # 4: a gap: a replay from 3
        wait_for("replay request", lambda: fake.cmd(op="status")["held_replays"] == 1, server)
        fake.cmd(op="delay_next")
        fake.store(blocks[3])  # 5: reaches kvatlas live only after the replay
        assert fake.cmd(op="release_replays", fresh=True)["released"] == 1  # 0..5
        wait_for("replay applied", lambda: match(server, blocks[3], "e1").get("GPU") == BS and
                 server.stream("e1|default|0")["state"] == "live", server)
        assert fake.cmd(op="send_delayed")["sent"] == 1
        fake.store(blocks[4])  # 6
        wait_for("block 4", lambda: match(server, blocks[4], "e1").get("GPU") == BS, server)
        assert match(server, PROMPT, "e1") == {}, "a replayed Stored(A) brought A back"
        entries = holder_entries(server, "e1")
        assert entries == 5, (entries, server.stream("e1|default|0"))
        s = server.stream("e1|default|0")
        # Duplicates: the answer's 0, 1, 2, the buffered 4 and the live 5.
        assert s["restarts"] == 0 and s["duplicates"] == 5 and s["lost_batches"] == 0, s
        assert s["replays"] == 1 and s["last_seq"] == 6, s
    finally:
        fake.close()
        server.cleanup()


def case_sglang_salt_and_dp_ranks(binary):
    server = Server(binary)
    rank0, rank1 = Fake("--encoding", "sglang"), Fake("--encoding", "sglang", "--dp-rank", "1")
    try:
        server.register(rank0, "e1", type="SGLang")
        server.register(rank1, "e1", type="SGLang", dp_rank=1)
        rank0.store(PROMPT[:2 * BS], cache_salt="s1")
        rank1.store(PROMPT[:4 * BS])
        wait_for("rank 1", lambda: match(server, PROMPT, "e1").get("GPU") == 4 * BS, server)
        answer = match(server, PROMPT, "e1")
        assert answer["DP"] == {"1": 4 * BS}, answer
        salted = wait_for("salted rank 0",
                          lambda: match(server, PROMPT, "e1", cache_salt="s1").get("DP"), server)
        assert salted == {"0": 2 * BS}, salted
    finally:
        rank0.close()
        rank1.close()
        server.cleanup()


def case_positions_survive_server_restart(binary):
    server, fake = Server(binary), Fake()
    data_dir = server.data_dir
    try:
        server.register(fake, "e1")
        fake.store(PROMPT[:BS])
        fake.store(PROMPT[:2 * BS], from_block=1)
        wait_for("2 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 2 * BS, server)
        server.stop()
        # While the server is down the engine publishes; the restarted server sees the next
        # sequence past its recorded position and replays exactly the missing batch.
        fake.store(PROMPT[:3 * BS], from_block=2)
        server = Server(binary, data_dir=data_dir)
        server.owns_dir = True
        assert fake.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"]
        assert match(server, PROMPT, "e1").get("GPU") == 2 * BS  # recovered from disk
        fake.store(PROMPT[:4 * BS], from_block=3)
        wait_for("4 blocks", lambda: match(server, PROMPT, "e1").get("GPU") == 4 * BS, server)
        s = server.stream("e1|default|0")
        # The replay from 2 also returns 3, which arrived live meanwhile: one duplicate.
        assert s["replays"] == 1 and s["lost_batches"] == 0 and s["last_seq"] == 3, s
        # No block was applied twice: every refcount is still 1.
        blocks = server.request("GET", "/v1/holders")
        assert any(h["holder_id"] == "e1" and h["entries"] == 4 for h in blocks["holders"]), blocks
    finally:
        fake.close()
        server.cleanup()


def case_mooncake(binary):
    server, fake = Server(binary), Fake("--encoding", "mooncake")
    try:
        server.register(fake, "store1", type="Mooncake")
        fake.cmd(op="set", model_name="m")  # RFC events name their model themselves
        first = fake.store(PROMPT[:3 * BS], medium="cpu")
        wait_for("3 blocks", lambda: match(server, PROMPT, "store1").get("CPU") == 3 * BS, server)
        fake.cmd(op="remove", hashes=[first["hashes"][2]], medium="cpu")
        wait_for("2 blocks", lambda: match(server, PROMPT, "store1").get("CPU") == 2 * BS, server)
        fake.cmd(op="clear")
        wait_for("clear", lambda: match(server, PROMPT, "store1") == {}, server)
    finally:
        fake.close()
        server.cleanup()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_listener_and_config_publishers(binary):
    """Centralized mode (engines connect to kvatlas) and publishers from the config file."""
    import msgpack
    import zmq
    fake = Fake()
    port = free_port()
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"zmq_listen": f"tcp://127.0.0.1:{port}", "zmq_listen_model": "fallback",
               "zmq_listen_block_size": BS,
               "publishers": [{"endpoint": fake.endpoint, "type": "vLLM", "modelname": "m",
                               "instance_id": "cfg", "block_size": BS}]}, config)
    config.close()
    server = Server(binary, extra=("--config", config.name))
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    try:
        # Config publishers are registered by the leader once it leads (in the background).
        wait_for("config publisher registered", lambda: [
            r["instance_id"] for r in server.request("GET", "/v1/registrations")["registrations"]
        ] == ["cfg"], server)
        assert fake.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"]
        fake.store(PROMPT[:BS])
        wait_for("config publisher", lambda: match(server, PROMPT, "cfg").get("GPU") == BS, server)
        # An engine that connects to kvatlas, llm-d topic "kv@<pod>@<model>", dp rank 2.
        pub.connect(f"tcp://127.0.0.1:{port}")
        stored = ["BlockStored", [11, 12], None, PROMPT[:2 * BS], BS, None, "GPU"]

        def send(seq):
            pub.send_multipart([b"kv@pod-a@m", seq.to_bytes(8, "big"),
                                msgpack.packb([time.time(), [stored], 2])])

        # PUB drops until the connection is up: resend (same sequence 0) until seen.
        wait_for("listener stream",
                 lambda: send(0) or match(server, PROMPT, "pod-a").get("DP") == {"2": 2 * BS},
                 server)
        keys = [s["key"] for s in server.request("GET", "/v1/streams")["streams"]]
        assert f"listen:tcp://127.0.0.1:{port}|kv@pod-a@m|2" in keys, keys
        metrics = urllib.request.urlopen(server.base + "/metrics", timeout=5).read().decode()
        assert 'kvatlas_zmq_events_applied_total{stream="cfg|default|0",event_type="stored"} 1' \
            in metrics, metrics[-2000:]
    finally:
        pub.close(0)
        context.term()
        fake.close()
        server.cleanup()
        os.unlink(config.name)


def case_bad_registrations(binary):
    server = Server(binary)
    try:
        good = {"endpoint": "tcp://127.0.0.1:5557", "type": "vLLM", "modelname": "m",
                "instance_id": "e1", "block_size": 16}
        for field, value, needle in [("endpoint", "localhost:5557", "endpoint"),
                                     ("endpoint", "tcp://*:5557", "endpoint"),
                                     ("type", "TensorRT", "type"),
                                     ("block_size", 0, "block_size"),
                                     ("block_size", "16", "block_size"),
                                     ("instance_id", "", "instance_id"),
                                     ("dp_rank", -1, "dp_rank")]:
            body = dict(good, **{field: value})
            answer = server.request("POST", "/register", body, expect=400)
            assert needle in answer["message"], answer
        del good["modelname"]
        assert "modelname" in server.request("POST", "/register", good, expect=400)["message"]
        assert server.request("GET", "/v1/registrations")["registrations"] == []
    finally:
        server.cleanup()


def lookup_blocks(server, tokens, instance, **extra):
    """Blocks of `tokens` that POST /v1/lookup finds on `instance` (0 when none)."""
    body = {"model_name": "m", "block_size": BS, "token_ids": tokens}
    body.update(extra)
    for i in server.request("POST", "/v1/lookup", body)["instances"]:
        if i["instance_id"] == instance:
            return i["longest_matched"]["blocks"]
    return 0


def case_sglang_map_salt(binary):
    """SGLang's tagged-map events name their cache salt as a field: the blocks are found
    with that salt and not without it; a salt of the wrong type indexes nothing."""
    server = Server(binary)
    fake = Fake("--encoding", "sglang-map")
    try:
        server.register(fake, "e1", type="SGLang")
        fake.store(PROMPT[:3 * BS], cache_salt="tenant-a")
        wait_for("salted blocks",
                 lambda: lookup_blocks(server, PROMPT, "e1", additional_salt="tenant-a") == 3,
                 server)
        assert lookup_blocks(server, PROMPT, "e1") == 0
        assert lookup_blocks(server, PROMPT, "e1", additional_salt="tenant-b") == 0
        other = list(range(500, 500 + 2 * BS))
        fake.store(other, cache_salt=42)  # unreadable: skipped and counted, never unsalted
        fake.store(other[:BS])  # unsalted, after it in the stream
        wait_for("unsalted block", lambda: lookup_blocks(server, other, "e1") == 1, server)
        stream = server.stream("e1|default|0")
        assert stream["skipped_namespace_events"] == 2, stream  # one event per page
        assert stream["skipped_events"] == 0, stream
        assert lookup_blocks(server, other, "e1", additional_salt="42") == 0
        metrics = urllib.request.urlopen(server.base + "/metrics", timeout=5).read().decode()
        assert 'kvatlas_zmq_skipped_namespace_events_total{stream="e1|default|0"} 2' in metrics
    finally:
        fake.close()
        server.cleanup()


def case_report_modes(binary):
    """vLLM's full report mode re-sends a prefix hit as stores of blocks the engine holds,
    then evicts each block once. Registered "full", the blocks go with their one remove;
    registered "incremental" they stay (counted as copies), and /v1/streams shows the
    repeated stores and, past the threshold, a warning. An event's own origin decides over
    either mode."""
    server = Server(binary)
    full, incremental = Fake("--encoding", "vllm-map"), Fake("--encoding", "vllm-map")
    try:
        server.register(full, "full", report_mode="full")
        server.register(incremental, "incr")
        for fake, instance in ((full, "full"), (incremental, "incr")):
            stored = fake.store(PROMPT[:3 * BS])
            fake.store(PROMPT[:3 * BS])  # the re-report of a prefix hit: parent nil
            fake.cmd(op="remove", hashes=stored["hashes"], medium="GPU")
        wait_for("both streams applied", lambda: all(
            server.stream(k)["events"]["removed"] == 1
            for k in ("full|default|0", "incr|default|0")), server)
        assert match(server, PROMPT, "full") == {}, match(server, PROMPT, "full")
        assert match(server, PROMPT, "incr").get("GPU") == 3 * BS  # stale: counted twice
        assert server.stream("full|default|0")["report_mode"] == "full"
        regs = {r["key"]: r for r in server.request("GET", "/v1/registrations")["registrations"]}
        assert regs["full|default|0"]["report_mode"] == "full", regs
        assert regs["incr|default|0"]["report_mode"] == "incremental", regs
        wait_for("tallies", lambda: server.stream("incr|default|0")["repeated_stores"] == 3,
                 server)
        s = server.stream("full|default|0")
        assert s["stored_blocks"] == 6 and s["repeated_stores"] == 3, s
        assert s["removed_blocks"] == 3 and s["unheld_removes"] == 0, s
        assert s["report_mode_warning"] is None, s
        # Enough re-reports on the incremental stream make the server say its mode is wrong.
        other = list(range(1000, 1000 + 4 * BS))
        for _ in range(260):
            incremental.store(other)
        wait_for("mode warning",
                 lambda: server.stream("incr|default|0")["report_mode_warning"], server)
        assert "full" in server.stream("incr|default|0")["report_mode_warning"]
        metrics = urllib.request.urlopen(server.base + "/metrics", timeout=5).read().decode()
        assert 'kvatlas_zmq_repeated_stores_total{stream="incr|default|0"}' in metrics
        assert 'kvatlas_zmq_unheld_removes_total{stream="full|default|0"} 0' in metrics
        # An origin overrides the mode: REUSED on the incremental stream adds no copy.
        origin = list(range(3000, 3000 + 2 * BS))
        first = incremental.store(origin, origin="NEW")
        incremental.store(origin, origin="REUSED")
        incremental.cmd(op="remove", hashes=first["hashes"], medium="GPU")
        wait_for("origin-marked prefix gone", lambda: match(server, origin, "incr") == {},
                 server)
        # Modes are vLLM's: other engines refuse them, unknown modes are refused.
        body = {"endpoint": "tcp://127.0.0.1:5557", "type": "SGLang", "modelname": "m",
                "instance_id": "s1", "block_size": BS, "report_mode": "full"}
        assert "report_mode" in server.request("POST", "/register", body, expect=400)["message"]
        body.update(type="vLLM", report_mode="sometimes")
        assert "report_mode" in server.request("POST", "/register", body, expect=400)["message"]
    finally:
        full.close()
        incremental.close()
        server.cleanup()


def case_operator_clear(binary):
    """An engine that dropped its cache without publishing it (a vLLM weight reload): the
    operator's cleared event of scope "holder" drops the holder's blocks in every context
    (LoRA ones included); the stream goes on from its next batch without a replay."""
    server, fake = Server(binary), Fake()
    try:
        server.register(fake, "e1")
        fake.store(PROMPT[:2 * BS])
        fake.store(PROMPT[:2 * BS], lora_name="adapter")
        wait_for("both contexts", lambda: lookup_blocks(server, PROMPT, "e1") == 2 and
                 lookup_blocks(server, PROMPT, "e1", lora_name="adapter") == 2, server)
        clear = {"event_type": "cleared", "backend_id": "e1", "model_name": "m",
                 "block_size": BS}
        server.request("POST", "/v1/events", [clear])  # its context only
        assert lookup_blocks(server, PROMPT, "e1") == 0
        assert lookup_blocks(server, PROMPT, "e1", lora_name="adapter") == 2
        server.request("POST", "/v1/events", [dict(clear, scope="holder")])
        assert lookup_blocks(server, PROMPT, "e1", lora_name="adapter") == 0
        bad = server.request("POST", "/v1/events", [dict(clear, scope="all")], expect=400)
        assert "scope" in bad["message"], bad
        fake.store(PROMPT[:BS])
        wait_for("the next batch", lambda: lookup_blocks(server, PROMPT, "e1") == 1, server)
        s = server.stream("e1|default|0")
        assert s["gaps"] == 0 and s["replays"] == 0 and s["restarts"] == 0, s
    finally:
        fake.close()
        server.cleanup()


def case_snapshot_guard_drops_new_contexts(binary):
    """Past snapshot_stop_bytes (every snapshot passes 1 byte) an engine stream into a context
    the server never held has those stores dropped and counted; the held context goes on."""
    server = Server(binary, extra=("--snapshot-stop-bytes", "1", "--raft-snapshot-threshold", "16"))
    held, fresh = Fake(), Fake()
    try:
        server.register(held, "e1")
        groups = lambda: server.request("GET", "/v1/groups")["groups"][0]  # noqa: E731
        for i in range(400):  # one batch, one raft entry each, until a snapshot is seen
            held.store(list(range(1000 * (i + 1), 1000 * (i + 1) + BS)))
            if i % 16 == 15:
                time.sleep(0.1)
                if not groups()["accepting"]:
                    break
        wait_for("the group to refuse new contexts", lambda: not groups()["accepting"], server)
        server.register(fresh, "e2", modelname="fresh")
        fresh.store(PROMPT[:2 * BS])
        wait_for("the fresh stream's stores dropped",
                 lambda: server.stream("e2|default|0")["refused_new_context_stores"] == 1, server)
        assert match(server, PROMPT, "e2", model="fresh") == {}
        s = server.stream("e2|default|0")
        assert s["gaps"] == 0 and s["lost_batches"] == 0 and s["last_seq"] == 0, s
        held.store(PROMPT[:BS])
        wait_for("the held context still written",
                 lambda: match(server, PROMPT, "e1").get("GPU") == BS, server)
        assert server.stream("e1|default|0")["refused_new_context_stores"] == 0
    finally:
        held.close()
        fresh.close()
        server.cleanup()


CASES = {
    "vllm_array": lambda b: case_store_offload_remove_clear(b, "vllm-array"),
    "vllm_map": lambda b: case_store_offload_remove_clear(b, "vllm-map"),
    "vllm_legacy": lambda b: case_store_offload_remove_clear(b, "vllm-legacy"),
    "gap_replay": case_gap_is_replayed,
    "engine_restart": case_engine_restart_resets,
    "restart_mid_replay": case_restart_mid_replay,
    "replay_after_remove": case_replay_after_remove,
    "sglang_salt_dp": case_sglang_salt_and_dp_ranks,
    "server_restart": case_positions_survive_server_restart,
    "mooncake": case_mooncake,
    "listener_and_config": case_listener_and_config_publishers,
    "bad_registrations": case_bad_registrations,
    "sglang_map_salt": case_sglang_map_salt,
    "report_modes": case_report_modes,
    "operator_clear": case_operator_clear,
    "snapshot_guard": case_snapshot_guard_drops_new_contexts,
}


def run_cases(cases):
    """Runs the cases named on the command line after the server binary (all by default),
    reporting each; exits 1 if any failed."""
    binary = sys.argv[1]
    names = sys.argv[2:] or list(cases)
    failed = []
    for name in names:
        start = time.time()
        try:
            cases[name](binary)
            print(f"PASS {name} ({time.time() - start:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            failed.append(name)
            print(f"FAIL {name}: {e}", flush=True)
    print(f"{len(names) - len(failed)}/{len(names)} cases passed")
    sys.exit(1 if failed else 0)


def main():
    run_cases(CASES)


if __name__ == "__main__":
    main()
