#!/usr/bin/python3
"""Self-test of fake_engine_publisher.py: drives it over stdin/stdout like the C++ tests do
and checks what a SUB socket and a DEALER replay client receive. Run with /usr/bin/python3
(Debian's python3-zmq and python3-msgpack); exits non-zero on the first failed check."""

import hashlib
import json
import os
import struct
import subprocess
import sys

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_engine_publisher as fep  # noqa: E402

END = b"\xff" * 8
TIMEOUT_MS = 5000


class Fake:
    """The publisher process plus a subscriber and a replay client connected to it."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "fake_engine_publisher.py"),
             "--replay-endpoint", "tcp://127.0.0.1:0"] + list(args),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.read()
        assert ready["ready"] and ready["endpoint"].startswith("tcp://127.0.0.1:"), ready
        self.endpoint, self.replay_endpoint = ready["endpoint"], ready["replay_endpoint"]
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
        self.sub.setsockopt(zmq.RECONNECT_IVL, 50)
        self.sub.connect(self.endpoint)
        self.dealer = self.ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
        self.dealer.connect(self.replay_endpoint)
        assert self.cmd(op="wait_peer")["ok"]

    def read(self):
        line = self.proc.stdout.readline()
        assert line, "publisher exited"
        return json.loads(line)

    def cmd(self, **command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def recv(self):
        """(topic, seq, batch) of the next published message."""
        frames = self.sub.recv_multipart()
        assert len(frames) == 3, frames
        return frames[0], struct.unpack(">Q", frames[1])[0], msgpack.unpackb(frames[2])

    def replay(self, start):
        """[(seq, batch)] replayed from start; checks the framing and the end marker."""
        self.dealer.send_multipart([b"", struct.pack(">Q", start)])
        return self.replay_answer()

    def replay_answer(self):
        """[(seq, batch)] of the next replay answer on the DEALER."""
        out = []
        while True:
            frames = self.dealer.recv_multipart()
            assert frames[0] == b"", frames
            body = frames[1:] if len(frames) == 3 else frames[2:]  # old style / new style
            if body[0] == END:
                assert body[1] == b"", frames
                return out
            out.append((struct.unpack(">Q", body[0])[0], msgpack.unpackb(body[1])))

    def close(self):
        assert self.cmd(op="quit") == {"ok": True}
        assert self.proc.wait(10) == 0
        self.sub.close(0)
        self.dealer.close(0)
        self.ctx.term()


def check_cbor_and_hashes():
    assert fep.cbor("0") == b"\x61\x30"
    assert fep.cbor([b"\x00" * 32, [1, 23, 24, 500, 70000], None]) == (
        b"\x83\x58\x20" + b"\x00" * 32 + b"\x85\x01\x17\x18\x18\x19\x01\xf4\x1a\x00\x01\x11\x70"
        + b"\xf6")
    none_hash = hashlib.sha256(b"\x61\x30").digest()
    block = list(range(16))
    want = hashlib.sha256(b"\x83\x58\x20" + none_hash + b"\x90" + bytes(block) + b"\xf6")
    assert fep.vllm_chain(block, 16, "0")[0][0] == want.digest()
    salted = fep.vllm_chain(block * 2, 16, "0", lora_name="ad", cache_salt="s")
    assert [e for _, e in salted] == [["ad", "s"], ["ad"]]
    page = hashlib.sha256(struct.pack("<4I", 1, 2, 3, 4)).digest()
    assert fep.sglang_chain([1, 2, 3, 4], 4) == [struct.unpack(">q", page[:8])[0]]


def check_vllm(fake):
    tokens = list(range(100, 164))  # 4 blocks of 16
    r = fake.cmd(op="store", tokens=tokens, block_size=16)
    assert r["seq"] == 0 and r["sent"] and len(r["hashes"]) == 4, r
    topic, seq, batch = fake.recv()
    assert topic == b"" and seq == 0 and len(batch) == 3 and batch[2] == 0, batch
    ev = batch[1][0]
    assert ev[:7] == ["BlockStored", r["hashes"], None, tokens, 16, None, "GPU"], ev
    assert ev[7:] == [None, [None] * 4, 0, "full_attention"], ev
    digests = fep.vllm_chain(tokens, 16, "0")
    assert r["hashes"] == [int.from_bytes(d[-8:], "big") for d, _ in digests]
    # Extending the prompt: only the new blocks, parented on the last known one.
    r2 = fake.cmd(op="store", tokens=tokens + list(range(32)), from_block=4, medium="GPU")
    _, seq, batch = fake.recv()
    assert seq == 1 and r2["all_hashes"][:4] == r["hashes"], r2
    assert batch[1][0][1:4] == [r2["hashes"], r["hashes"][3], list(range(32))], batch
    # Map events, one batch with several events, offload, remove, clear.
    assert fake.cmd(op="set", encoding="vllm-map", dp_rank=2) == {"ok": True}
    r3 = fake.cmd(op="batch", events=[
        {"op": "store", "tokens": tokens, "lora_name": "ad", "cache_salt": "s"},
        {"op": "offload", "hashes": r["hashes"][:2], "medium": "CPU"},
        {"op": "remove", "hashes": r["hashes"][2:]}, {"op": "clear"}])
    _, seq, batch = fake.recv()
    assert seq == 2 == r3["seq"] and batch[2] == 2 and len(batch[1]) == 4, batch
    stored, offload, removed, cleared = batch[1]
    assert stored["type"] == "BlockStored" and stored["lora_name"] == "ad", stored
    assert stored["lora_id"] == 1 and stored["extra_keys"][:2] == [["ad", "s"], ["ad"]], stored
    assert stored["block_hashes"] == r3["results"][0]["hashes"] != r["hashes"], stored
    assert offload == {"type": "BlockStored", "block_hashes": r["hashes"][:2],
                       "parent_block_hash": None, "token_ids": [], "block_size": 0,
                       "lora_id": None, "medium": "CPU", "lora_name": None}, offload
    assert removed == {"type": "BlockRemoved", "block_hashes": r["hashes"][2:],
                       "medium": "GPU", "group_idx": 0}, removed
    assert cleared == {"type": "AllBlocksCleared"}, cleared
    # Legacy: 2-element batch, events without lora_name and later fields.
    fake.cmd(op="set", encoding="vllm-legacy", topic="kv@pod@m")
    fake.cmd(op="store", tokens=tokens[:16])
    topic, seq, batch = fake.recv()
    assert topic == b"kv@pod@m" and seq == 3 and len(batch) == 2, batch
    assert batch[1][0] == ["BlockStored", [r["hashes"][0]], None, tokens[:16], 16, None,
                           "GPU"], batch


def check_other_encodings(fake):
    tokens = list(range(1, 25))  # 3 pages of 8
    fake.cmd(op="set", encoding="sglang", dp_rank=1, topic="")
    r = fake.cmd(op="store", tokens=tokens, block_size=8, from_block=1, cache_salt="salt")
    _, _, batch = fake.recv()
    assert len(batch) == 3 and batch[2] == 1 and len(batch[1]) == 2, batch
    want = fep.sglang_chain(tokens, 8)
    assert r["hashes"] == want[1:], r
    assert batch[1][0] == ["BlockStored", [want[1]], want[0], tokens[8:16], 8, None, "GPU",
                           {"cache_salt": "salt"}], batch
    assert batch[1][1][2] == want[1] and batch[1][1][3] == tokens[16:], batch
    fake.cmd(op="remove", hashes=want)
    _, _, batch = fake.recv()
    assert batch[1] == [["BlockRemoved", [h], "GPU"] for h in want], batch
    fake.cmd(op="set", encoding="mooncake", model_name="llama", backend_id="store-0")
    r = fake.cmd(op="store", tokens=tokens, block_size=8, medium="cpu")
    _, _, batch = fake.recv()
    ev = batch[1][0]
    assert ev["event_type"] == "stored" and ev["seq_hashes"] == r["hashes"], ev
    assert ev["base_block_idx"] == 0 and ev["parent_hash"] is None, ev
    assert ev["model_name"] == "llama" and ev["backend_id"] == "store-0", ev
    assert ev["token_ids"] == tokens and ev["medium"] == "cpu" and ev["dp_rank"] == 1, ev
    fake.cmd(op="clear")
    _, _, batch = fake.recv()
    assert batch[1][0]["event_type"] == "cleared" and batch[1][0]["event_id"] == 1, batch
    assert "error" in fake.cmd(op="set", encoding="nope")
    assert "error" in fake.cmd(op="store", tokens=[1, 2], block_size=16)
    assert "error" in fake.cmd(op="fly")


def check_gaps_replay_restart(fake):
    fake.cmd(op="set", encoding="vllm-array", topic="t")
    first = fake.cmd(op="store", tokens=list(range(16)))["seq"]
    assert fake.recv()[1] == first
    assert fake.cmd(op="drop_next") == {"ok": True}
    dropped = fake.cmd(op="clear")
    assert dropped == {"seq": first + 1, "sent": False}, dropped
    fake.cmd(op="clear")
    assert fake.recv()[1] == first + 2  # the subscriber sees a gap
    replayed = fake.replay(first + 1)
    assert [s for s, _ in replayed] == [first + 1, first + 2], replayed
    assert replayed[0][1][1] == [["AllBlocksCleared"]], replayed
    assert len(fake.replay(0)) == first + 3
    fake.dealer.send_multipart([b"", b"bad", b"frames"])  # ignored: not 3 frames at ROUTER
    fake.cmd(op="set", replay_style="old")
    assert [s for s, _ in fake.replay(first + 2)] == [first + 2]
    assert fake.cmd(op="status")["replays"] == 3
    # Restart: seq from 0 again and an empty replay buffer.
    r = fake.cmd(op="restart")
    assert r["ok"] and r["endpoint"] == fake.endpoint, r
    assert fake.cmd(op="clear")["seq"] == 0 and fake.recv()[1] == 0
    fake.cmd(op="set", replay_style="new")
    assert [s for s, _ in fake.replay(0)] == [0]
    r = fake.cmd(op="restart", rebind=True)
    assert r["endpoint"] == fake.endpoint and r["replay_endpoint"] == fake.replay_endpoint, r
    # The SUB reconnects by itself, but re-sends its subscription only from its own thread:
    # a subscriber must be polling (as a real one is) for that to happen.
    assert not fake.sub.poll(500)
    assert fake.cmd(op="wait_peer")["ok"]
    assert fake.cmd(op="clear")["seq"] == 0 and fake.recv()[1] == 0
    assert fake.replay(5) == []
    status = fake.cmd(op="status")
    assert status["next_seq"] == 1 and status["buffered"] == 1, status


def check_held_replays_and_delayed_batches():
    fake = Fake("--replay-style", "old")
    for i in range(3):
        assert fake.cmd(op="clear")["seq"] == i and fake.recv()[1] == i
    assert fake.cmd(op="delay_next") == {"ok": True}
    assert fake.cmd(op="clear") == {"seq": 3, "sent": False}
    assert not fake.sub.poll(200)  # delayed, not sent
    assert fake.cmd(op="replay_options", hold=True, whole_buffer=True) == {"ok": True}
    fake.dealer.send_multipart([b"", struct.pack(">Q", 2)])
    assert not fake.dealer.poll(300)  # held
    assert fake.cmd(op="status")["held_replays"] == 1
    # A held answer is the buffer as it was when the request came, from before the start.
    fake.cmd(op="restart")
    assert fake.cmd(op="release_replays") == {"ok": True, "released": 1}
    assert [s for s, _ in fake.replay_answer()] == [0, 1, 2, 3]
    # fresh: the answer is built at release, from the buffer as it is then.
    fake.cmd(op="replay_options", hold=True)
    fake.dealer.send_multipart([b"", struct.pack(">Q", 1)])
    assert not fake.dealer.poll(300)
    fake.cmd(op="clear")
    fake.cmd(op="clear")
    assert fake.recv()[1] == 0 and fake.recv()[1] == 1
    assert fake.cmd(op="release_replays", fresh=True) == {"ok": True, "released": 1}
    assert [s for s, _ in fake.replay_answer()] == [1]
    fake.cmd(op="replay_options")
    fake.cmd(op="restart")
    # The restart forgot the delayed batch; a new one is sent on send_delayed.
    fake.cmd(op="delay_next")
    fake.cmd(op="clear")
    assert fake.cmd(op="send_delayed") == {"ok": True, "sent": 1}
    assert fake.recv()[1] == 0
    assert "error" in fake.cmd(op="replay_options", hold=True, bogus=1)
    fake.close()


def check_buffer_steps():
    fake = Fake("--buffer-steps", "3", "--replay-style", "old")
    for i in range(5):
        assert fake.cmd(op="clear")["seq"] == i
    assert [s for s, _ in fake.replay(0)] == [2, 3, 4]
    fake.close()


def check_sglang_map():
    fake = Fake("--encoding", "sglang-map")
    tokens = list(range(1, 17))  # 2 pages of 8
    r = fake.cmd(op="store", tokens=tokens, block_size=8, cache_salt="t1")
    _, _, batch = fake.recv()
    salted = fep.sglang_chain(tokens, 8, "t1")
    assert r["hashes"] == salted and salted != fep.sglang_chain(tokens, 8), r
    ev = batch[1][1]
    assert ev["type"] == "BlockStored" and ev["block_hashes"] == [salted[1]], ev
    assert ev["parent_block_hash"] == salted[0] and ev["token_ids"] == tokens[8:], ev
    assert ev["cache_salt"] == "t1" and ev["session_id"] == "session-0", ev
    fake.cmd(op="store", tokens=tokens, block_size=8, cache_salt=42)  # sent as given
    assert fake.recv()[2][1][0]["cache_salt"] == 42
    fake.cmd(op="store", tokens=tokens, block_size=8)
    assert "cache_salt" not in fake.recv()[2][1][0]
    fake.cmd(op="remove", hashes=salted)
    assert fake.recv()[2][1][0] == {"type": "BlockRemoved", "block_hashes": [salted[0]],
                                    "medium": "GPU"}
    fake.close()


def main():
    check_cbor_and_hashes()
    fake = Fake()
    check_vllm(fake)
    check_other_encodings(fake)
    check_gaps_replay_restart(fake)
    fake.close()
    check_buffer_steps()
    check_held_replays_and_delayed_batches()
    check_sglang_map()
    print("fake_engine_publisher selftest: ok")


if __name__ == "__main__":
    main()
