#!/usr/bin/python3
"""Fake inference engine that publishes KV-cache events like vLLM's ZmqEventPublisher.

For integration tests (run with /usr/bin/python3: Debian's python3-zmq and python3-msgpack;
--help lists the options). A PUB socket sends 3-frame messages [topic, seq (u64 big-endian),
msgpack batch]; seq starts at 0, +1 per batch; the last --buffer-steps batches are kept for
replay on an optional ROUTER socket: request [identity, "", start_seq]; reply one message per
buffered batch with seq >= start_seq, then an end marker (seq 0xFF * 8, empty payload);
frames after the envelope are [topic, seq, payload] (--replay-style new, vLLM >= 0.26) or
[seq, payload] (old).

A port 0 endpoint binds a free port. Encodings (--encoding or "set"):
  vllm-array   batch [ts, events, dp_rank]; events positional [tag, field...] (vLLM < 0.26)
  vllm-map     batch still positional; events {"type": tag, field: value...} (vLLM >= 0.26)
  vllm-legacy  batch [ts, events]; events positional without lora_name and later fields
  sglang       batch [ts, events, dp_rank]; one BlockStored per page, [tag, [hash], parent,
               tokens, block_size, lora_id, medium] + {"cache_salt": s} when salted; hashes
               are signed int64 = first 8 bytes of a SHA-256 chain over u32-LE tokens
  sglang-map   as sglang, but events are tagged maps {"type": tag, field: value...} and a
               salted store carries "cache_salt": s and "session_id" as fields (SGLang's
               newer form; s is sent as given, any JSON value); a salted chain is seeded
               with sha256("sglang-cache-salt-v1\0" + s), as SGLang namespaces salted hashes
  mooncake     batch [ts, events, dp_rank]; RFC #1527 maps (event_id, event_type, ...)
vLLM hashes follow sha256_cbor (NONE_HASH = sha256(cbor(str(hash_seed))), block i hashes
cbor [parent digest, tokens, extra keys or null]; extra keys = [lora_name] on every block,
then cache_salt on block 0) and are sent as the last 8 digest bytes, big-endian, as uint64.

Control: one JSON command per stdin line, one JSON reply per line on stdout. At start it
prints {"ready": true, "endpoint": E, "replay_endpoint": R or null}. Commands:
  {"op": "store", "tokens": [...], "block_size": 16, "from_block": 0, "medium": "GPU",
   "lora_name": null, "cache_salt": null}   tokens = the whole prompt; its full blocks
      from_block.. are announced, parent = hash of block from_block-1 (null for block 0)
      -> {"seq": n, "sent": bool, "hashes": [new blocks' hashes], "all_hashes": [...]}
  {"op": "offload", "hashes": [...], "medium": "CPU", "block_size": 0}
      BlockStored with parent null and no tokens (offloading-connector shape)
  {"op": "remove", "hashes": [...], "medium": "GPU"}       BlockRemoved
  {"op": "clear"}                                           AllBlocksCleared
      each -> {"seq": n, "sent": bool}
  {"op": "batch", "events": [{"op": "store", ...}, {"op": "remove", ...}, ...]}
      all of them in one batch -> {"seq": n, "sent": bool, "results": [{...}, ...]}
  {"op": "oversized", "bytes": N}   one message [topic, next seq, N zero bytes] (hostile:
      past the subscriber's size limit); the sequence is not consumed -> {"ok": true}
  {"op": "drop_next"}   the next batch is buffered for replay, not sent -> {"ok": true}
  {"op": "delay_next"}  the next batch is buffered for replay but sent only on "send_delayed"
      (it reaches subscribers after later replays) -> {"ok": true}
  {"op": "send_delayed"}   sends the delayed batches -> {"ok": true, "sent": k}
  {"op": "replay_options", "hold": false, "whole_buffer": false}   hold: a replay request is
      answered (with the buffer as it is when the request comes) only on "release_replays";
      whole_buffer: answers with every buffered batch, also those before the start sequence
      (a publisher answering from before the gap) -> {"ok": true}
  {"op": "release_replays", "fresh": false}   sends the held replay answers; fresh: built from
      the buffer as it is now, not as it was when the request came -> {"ok": true, "released": k}
  {"op": "restart", "rebind": false}   seq (and mooncake event_id) back to 0, replay buffer
      emptied; rebind: close and rebind both sockets, same ports -> {"ok": true, "endpoint": E,
      "replay_endpoint": R}
  {"op": "wait_peer", "count": 1, "timeout_ms": 5000}   waits for that many connected
      subscribers (and ~100 ms for their subscriptions) -> {"ok": bool, "peers": k}
  {"op": "set", "dp_rank": 1, "encoding": "sglang", "topic": "t", "replay_style": "old",
   "hash_seed": "0", "model_name": "m", "tenant_id": "t", "backend_id": "b",
   "additional_salt": ""}  (any subset; the last four fill the mooncake envelope) -> {"ok": true}
  {"op": "status"} -> {"next_seq": n, "buffered": k, "replays": r, "peers": p,
      "held_replays": h}   (replays counts requests answered or held)
  {"op": "quit"} -> {"ok": true}, then exits
A bad command gets {"error": "..."} and publishes nothing.
"""

import argparse
import collections
import hashlib
import json
import os
import struct
import sys
import time

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

END_SEQ = b"\xff" * 8
ENCODINGS = ("vllm-array", "vllm-map", "vllm-legacy", "sglang", "sglang-map", "mooncake")
VLLM_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                      "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind")


def cbor(obj):
    """Canonical CBOR for the types vLLM hashes: uint, str, bytes, list, tuple, None."""
    def head(major, n):
        if n < 24:
            return bytes([major << 5 | n])
        for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if n < 1 << (8 * struct.calcsize(fmt)):
                return bytes([major << 5 | extra]) + struct.pack(fmt, n)
        raise ValueError("integer too large for CBOR")
    if obj is None:
        return b"\xf6"
    if isinstance(obj, int) and not isinstance(obj, bool):
        return head(0, obj) if obj >= 0 else head(1, -1 - obj)
    if isinstance(obj, bytes):
        return head(2, len(obj)) + obj
    if isinstance(obj, str):
        data = obj.encode()
        return head(3, len(data)) + data
    if isinstance(obj, (list, tuple)):
        return head(4, len(obj)) + b"".join(cbor(x) for x in obj)
    raise TypeError("cannot CBOR-encode %r" % type(obj))


def vllm_chain(tokens, block_size, seed, lora_name=None, cache_salt=None):
    """sha256_cbor digests of every full block of tokens."""
    parent = hashlib.sha256(cbor(str(seed))).digest()
    digests = []
    for i in range(len(tokens) // block_size):
        extra = [lora_name] * bool(lora_name) + [cache_salt] * bool(cache_salt and i == 0)
        block = tokens[i * block_size:(i + 1) * block_size]
        parent = hashlib.sha256(cbor([parent, block, extra or None])).digest()
        digests.append((parent, extra or None))
    return digests


def sglang_chain(tokens, page_size, salt=None):
    """SGLang per-page chain: sha256(prior digest || u32-LE tokens), first 8 bytes signed;
    a salted chain starts from sha256("sglang-cache-salt-v1\0" + salt)."""
    prior, out = b"", []
    if isinstance(salt, str) and salt:
        prior = hashlib.sha256(b"sglang-cache-salt-v1\0" + salt.encode()).digest()
    for i in range(len(tokens) // page_size):
        page = tokens[i * page_size:(i + 1) * page_size]
        prior = hashlib.sha256(prior + struct.pack("<%dI" % len(page), *page)).digest()
        out.append(struct.unpack(">q", prior[:8])[0])
    return out


class Publisher:
    def __init__(self, args):
        self.ctx, self.args = zmq.Context(), args
        self.cfg = dict(dp_rank=args.dp_rank, encoding=args.encoding, topic=args.topic,
                        replay_style=args.replay_style, hash_seed=args.hash_seed,
                        model_name="model", tenant_id="default", backend_id="fake-0",
                        additional_salt="")
        self.buffer = collections.deque(maxlen=args.buffer_steps)
        self.next_seq, self.replays, self.peers, self.drop_next = 0, 0, 0, False
        self.delay_next, self.delayed = False, []
        self.hold_replays, self.whole_buffer, self.held = False, False, []
        self.event_id, self.lora_ids = 0, {}
        self.endpoint, self.replay_endpoint = args.endpoint, args.replay_endpoint or None
        self.bind()

    def bind(self):
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, self.args.hwm)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.monitor = self.pub.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        bind_retrying(self.pub, self.endpoint)
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.router = None
        if self.replay_endpoint:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            bind_retrying(self.router, self.replay_endpoint)
            self.replay_endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)

    def close(self):
        self.pub.disable_monitor()
        for sock in (self.monitor, self.pub, self.router):
            if sock is not None:
                sock.close(0)
        self.peers = 0

    # ---- events -------------------------------------------------------------------------

    def lora_id(self, name):
        return None if not name else self.lora_ids.setdefault(name, len(self.lora_ids) + 1)

    def vllm_event(self, tag, fields):
        """fields: (name, value) pairs in schema order; array, map or legacy form."""
        enc = self.cfg["encoding"]
        if enc == "vllm-map":
            return dict([("type", tag)] + fields)
        if enc == "vllm-legacy":
            legacy = ("block_hashes", "parent_block_hash", "token_ids", "block_size",
                      "lora_id", "medium")
            fields = [f for f in fields if f[0] in legacy]
        return [tag] + [v for _, v in fields]

    def mooncake_event(self, event_type, medium, block_size, lora_name, **rest):
        event = {"event_id": self.event_id, "timestamp": int(time.time() * 1000),
                 "event_type": event_type, "model_name": self.cfg["model_name"],
                 "block_size": block_size, "additional_salt": self.cfg["additional_salt"],
                 "lora_name": lora_name, "tenant_id": self.cfg["tenant_id"],
                 "backend_id": self.cfg["backend_id"], "medium": medium,
                 "dp_rank": self.cfg["dp_rank"]}
        event.update(rest)
        self.event_id += 1
        return event

    def store(self, cmd):
        tokens, bs = [int(t) for t in cmd["tokens"]], int(cmd.get("block_size", 16))
        first, medium = int(cmd.get("from_block", 0)), cmd.get("medium", "GPU")
        lora, salt = cmd.get("lora_name"), cmd.get("cache_salt")
        n = len(tokens) // bs
        if bs <= 0 or not 0 <= first < n:
            raise ValueError("from_block must name a full block of tokens")
        enc = self.cfg["encoding"]
        if enc == "sglang-map":
            hashes = sglang_chain(tokens, bs, salt)
            events = []
            for i in range(first, n):
                ev = {"type": "BlockStored", "block_hashes": [hashes[i]],
                      "parent_block_hash": hashes[i - 1] if i else None,
                      "token_ids": tokens[i * bs:(i + 1) * bs], "block_size": bs,
                      "lora_id": self.lora_id(lora), "medium": medium}
                if salt is not None:
                    ev.update(cache_salt=salt, session_id="session-%d" % self.next_seq)
                events.append(ev)
            return events, {"hashes": hashes[first:], "all_hashes": hashes}
        if enc == "sglang":
            hashes = sglang_chain(tokens, bs)
            events = []
            for i in range(first, n):
                ev = ["BlockStored", [hashes[i]], hashes[i - 1] if i else None,
                      tokens[i * bs:(i + 1) * bs], bs, self.lora_id(lora), medium]
                events.append(ev + [{"cache_salt": salt}] if salt else ev)
            return events, {"hashes": hashes[first:], "all_hashes": hashes}
        chain = vllm_chain(tokens, bs, self.cfg["hash_seed"], lora, salt)
        hashes = [int.from_bytes(d[-8:], "big") for d, _ in chain]
        parent = hashes[first - 1] if first else None
        new_tokens = tokens[first * bs:n * bs]
        if enc == "mooncake":
            ev = self.mooncake_event("stored", medium, bs, lora, seq_hashes=hashes[first:],
                                     base_block_idx=first, parent_hash=parent,
                                     token_ids=new_tokens)
        else:
            ev = self.vllm_event("BlockStored", list(zip(VLLM_STORED_FIELDS, [
                hashes[first:], parent, new_tokens, bs, self.lora_id(lora), medium, lora,
                [e for _, e in chain[first:]], 0, "full_attention"])))
            if cmd.get("origin") is not None:  # vLLM's "NEW" / "REUSED" (map form only)
                if enc != "vllm-map":
                    raise ValueError("origin needs --encoding vllm-map")
                ev["origin"] = cmd["origin"]
        return [ev], {"hashes": hashes[first:], "all_hashes": hashes}

    def offload(self, cmd):
        hashes, medium = [int(h) for h in cmd["hashes"]], cmd.get("medium", "CPU")
        bs = int(cmd.get("block_size", 0))
        enc = self.cfg["encoding"]
        if enc == "mooncake":
            return [self.mooncake_event("stored", medium, bs, None, seq_hashes=hashes,
                                        base_block_idx=int(cmd.get("base_block_idx", 0)),
                                        parent_hash=None, token_ids=None)]
        if enc == "sglang":
            return [["BlockStored", hashes, None, [], bs, None, medium]]
        if enc == "sglang-map":
            return [{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None,
                     "token_ids": [], "block_size": bs, "lora_id": None, "medium": medium}]
        return [self.vllm_event("BlockStored", list(zip(VLLM_STORED_FIELDS[:7], [
            hashes, None, [], bs, None, medium, None])))]

    def remove(self, cmd):
        hashes, medium = [int(h) for h in cmd["hashes"]], cmd.get("medium", "GPU")
        enc = self.cfg["encoding"]
        if enc == "mooncake":
            return [self.mooncake_event("removed", medium, int(cmd.get("block_size", 16)),
                                        None, seq_hashes=hashes)]
        if enc == "sglang":
            return [["BlockRemoved", [h], medium] for h in hashes]
        if enc == "sglang-map":
            return [{"type": "BlockRemoved", "block_hashes": [h], "medium": medium}
                    for h in hashes]
        return [self.vllm_event("BlockRemoved", [("block_hashes", hashes),
                                                 ("medium", medium), ("group_idx", 0)])]

    def clear(self, _cmd):
        if self.cfg["encoding"] == "mooncake":
            return [self.mooncake_event("cleared", None, 0, None)]
        if self.cfg["encoding"] == "sglang-map":
            return [{"type": "AllBlocksCleared"}]
        return [self.vllm_event("AllBlocksCleared", [])]

    def events_for(self, cmd):
        """(events, reply fields) for one event command."""
        if cmd.get("op") not in ("store", "offload", "remove", "clear"):
            raise ValueError("not an event command: %r" % cmd.get("op"))
        return self.store(cmd) if cmd["op"] == "store" else (getattr(self, cmd["op"])(cmd), {})

    # ---- transport ----------------------------------------------------------------------

    def publish(self, events):
        batch = [time.time(), events]
        if self.cfg["encoding"] != "vllm-legacy":
            batch.append(self.cfg["dp_rank"])
        seq = self.next_seq
        self.next_seq += 1
        frames = [self.cfg["topic"].encode(), struct.pack(">Q", seq),
                  msgpack.packb(batch, use_bin_type=True)]
        self.buffer.append(frames)
        sent = not self.drop_next and not self.delay_next
        if self.delay_next:
            self.delayed.append(frames)
        self.drop_next = self.delay_next = False
        if sent:
            self.pub.send_multipart(frames)
        return {"seq": seq, "sent": sent}

    def serve_replay(self):
        frames = self.router.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:
            return
        ident, start = frames[0], struct.unpack(">Q", frames[2])[0]
        answer = self.replay_answer(ident, start)
        self.replays += 1
        if self.hold_replays:
            self.held.append((ident, start, answer))
            return
        for frames in answer:
            self.router.send_multipart(frames)

    def replay_answer(self, ident, start):
        """The messages answering a replay request from `start`, end marker included."""
        new = self.cfg["replay_style"] == "new"
        answer = []
        for topic, seq, payload in list(self.buffer):
            if self.whole_buffer or struct.unpack(">Q", seq)[0] >= start:
                answer.append([ident, b""] + ([topic] if new else []) + [seq, payload])
        answer.append([ident, b""] + ([self.cfg["topic"].encode()] if new else []) +
                      [END_SEQ, b""])
        return answer

    def drain_monitor(self, timeout_ms=0):
        while self.monitor.poll(timeout_ms):
            event = recv_monitor_message(self.monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.peers += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self.peers = max(0, self.peers - 1)
            timeout_ms = 0

    def wait_peer(self, cmd):
        want = int(cmd.get("count", 1))
        deadline = time.monotonic() + int(cmd.get("timeout_ms", 5000)) / 1000
        while self.peers < want and time.monotonic() < deadline:
            self.drain_monitor(max(1, int((deadline - time.monotonic()) * 1000)))
        for _ in range(5 if self.peers >= want else 0):
            # The SUBSCRIBE follows the handshake, and a PUB reads it (and attaches the new
            # pipe) only when its own thread touches the socket: let it do so a few times.
            self.pub.getsockopt(zmq.EVENTS)
            time.sleep(0.02)
        return {"ok": self.peers >= want, "peers": self.peers}

    # ---- control ------------------------------------------------------------------------

    def handle(self, cmd):
        op = cmd.get("op")
        if op in ("store", "offload", "remove", "clear"):
            events, extra = self.events_for(cmd)
            return dict(self.publish(events), **extra)
        if op == "batch":
            parts = [self.events_for(c) for c in cmd.get("events", [])]
            if not parts:
                raise ValueError("empty batch")
            reply = self.publish([e for events, _ in parts for e in events])
            return dict(reply, results=[extra for _, extra in parts])
        if op == "oversized":
            self.pub.send_multipart([self.cfg["topic"].encode(), struct.pack(">Q", self.next_seq),
                                     bytes(int(cmd["bytes"]))])
        elif op == "drop_next":
            self.drop_next = True
        elif op == "delay_next":
            self.delay_next = True
        elif op == "send_delayed":
            delayed, self.delayed = self.delayed, []
            for frames in delayed:
                self.pub.send_multipart(frames)
            return {"ok": True, "sent": len(delayed)}
        elif op == "replay_options":
            unknown = set(cmd) - {"op", "hold", "whole_buffer"}
            if unknown:
                raise ValueError("bad replay_options: %s" % json.dumps(cmd))
            self.hold_replays = bool(cmd.get("hold", False))
            self.whole_buffer = bool(cmd.get("whole_buffer", False))
        elif op == "release_replays":
            unknown = set(cmd) - {"op", "fresh"}
            if unknown:
                raise ValueError("bad release_replays: %s" % json.dumps(cmd))
            held, self.held = self.held, []
            for ident, start, answer in held:
                if cmd.get("fresh"):
                    answer = self.replay_answer(ident, start)
                for frames in answer:
                    self.router.send_multipart(frames)
            return {"ok": True, "released": len(held)}
        elif op == "restart":
            # Held replay answers stay held: they are the old engine's, still on their way.
            self.next_seq, self.event_id, self.drop_next, self.delay_next = 0, 0, False, False
            self.delayed = []
            self.buffer.clear()
            if cmd.get("rebind"):
                self.close()
                self.bind()
            return {"ok": True, "endpoint": self.endpoint, "replay_endpoint": self.replay_endpoint}
        elif op == "wait_peer":
            return self.wait_peer(cmd)
        elif op == "set":
            unknown = set(cmd) - set(self.cfg) - {"op"}
            if unknown or cmd.get("encoding", ENCODINGS[0]) not in ENCODINGS or \
                    cmd.get("replay_style", "new") not in ("new", "old"):
                raise ValueError("bad set: %s" % json.dumps(cmd))
            self.cfg.update((k, v) for k, v in cmd.items() if k != "op")
        elif op == "status":
            return dict(next_seq=self.next_seq, buffered=len(self.buffer), replays=self.replays,
                        peers=self.peers, held_replays=len(self.held))
        elif op != "quit":
            raise ValueError("unknown op %r" % op)
        return {"ok": True}

    def run(self):
        reply({"ready": True, "endpoint": self.endpoint,
               "replay_endpoint": self.replay_endpoint})
        pending = b""
        while True:
            poller = zmq.Poller()
            poller.register(sys.stdin.fileno(), zmq.POLLIN)
            poller.register(self.monitor, zmq.POLLIN)
            if self.router is not None:
                poller.register(self.router, zmq.POLLIN)
            ready = dict(poller.poll())
            if self.router is not None and self.router in ready:
                self.serve_replay()
            if self.monitor in ready:
                self.drain_monitor()
            if sys.stdin.fileno() not in ready:
                continue
            chunk = os.read(sys.stdin.fileno(), 65536)
            if not chunk:
                return  # stdin closed: the test process is gone
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in filter(bytes.strip, lines):
                try:
                    cmd = json.loads(line)
                    reply(self.handle(cmd))
                    if cmd.get("op") == "quit":
                        return
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    reply({"error": "%s: %s" % (type(e).__name__, e)})


def bind_retrying(sock, endpoint):
    """Binds, retrying for a second: a just-closed socket may still hold the port."""
    for attempt in range(50):
        try:
            return sock.bind(endpoint)
        except zmq.ZMQError as e:
            if e.errno != zmq.EADDRINUSE or attempt == 49:
                raise
            time.sleep(0.02)


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--endpoint", default="tcp://127.0.0.1:0")
    p.add_argument("--replay-endpoint", default="", help="ROUTER endpoint, e.g. tcp://127.0.0.1:0")
    p.add_argument("--topic", default="")
    p.add_argument("--buffer-steps", type=int, default=10000)
    p.add_argument("--hwm", type=int, default=100000)
    p.add_argument("--encoding", choices=ENCODINGS, default="vllm-array")
    p.add_argument("--replay-style", choices=("new", "old"), default="new")
    p.add_argument("--dp-rank", type=int, default=0)
    p.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED of the fake engine")
    publisher = Publisher(p.parse_args())
    try:
        publisher.run()
    finally:
        publisher.close()
        publisher.ctx.term()


if __name__ == "__main__":
    main()
