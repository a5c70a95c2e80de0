"""The workload's clients: each a thread calling one operation at a time, over REST
(http.client, a fresh connection per call so that "the connection could not be opened"
means "nothing was sent") or over the binary protocol (the `kvatlas` Python package).

Operations (model.py): store / remove one copy of one key, a linearizable read of one key
(REST `/v1/lookup` or `/query_by_hash` with "consistency": "linearizable", binary
`lookup(linearizable=True)`), a session read (`min_revision` = the newest revision this
client has seen, any server).

Exactly-once writers (every other client) name themselves and number their batches
(docs/api.md §Idempotent writes) and resend a batch whose outcome is unknown, to the same
or another server, until an answer settles it or `resend_for` seconds pass: a 200 makes it
ok (applied once, acknowledged at the last send); only definite refusals make it failed.
Other clients send once and keep the outcome they get.
"""

import http.client
import itertools
import json
import random
import threading
import time

from . import model, outcomes
from .model import FAILED, INF, OK, UNKNOWN, Op

MIX = (("store", 30), ("remove", 30), ("read", 28), ("sread", 12))
REST_TIMEOUT_S = 10.0   # > a follower's hold (apply_timeout) plus its forward (apply_timeout)


class Workload:
    """What every client shares: the context, the keys, the clock and the history."""

    def __init__(self, model_name, keys, block_size, clock, resend_for=10.0, think=0.01):
        self.model_name, self.keys, self.block_size = model_name, keys, block_size
        self.clock, self.resend_for, self.think = clock, resend_for, think
        self.ops = []
        self.ids = itertools.count()
        self.stopping = threading.Event()
        self.anomalies = {"lin_read_421_self": 0, "slow_ok_ops": 0, "slowest_ok_op": 0.0}
        self.lock = threading.Lock()

    def note_latency(self, op):
        if op.outcome == OK and op.ret - op.call > 3.0:
            with self.lock:
                self.anomalies["slow_ok_ops"] += 1
                if op.ret - op.call > self.anomalies["slowest_ok_op"]:
                    self.anomalies["slowest_ok_op"] = op.ret - op.call
                    self.anomalies["slowest_ok_op_desc"] = op.describe()


class Client(threading.Thread):
    transport = "?"

    def __init__(self, index, work, seed, exactly_once, reads=True):
        super().__init__(daemon=True)
        self.index, self.work, self.exactly_once = index, work, exactly_once
        self.reads = reads  # False: writes only
        self.rng = random.Random(seed)
        self.sequence = 0
        self.seen = 0   # newest revision this client was answered with
        self.error = None

    def run(self):
        kinds = [k for k, w in MIX for _ in range(w) if self.reads or k in model.WRITES]
        try:
            while not self.work.stopping.is_set():
                self.one(self.rng.choice(kinds), self.rng.randrange(len(self.work.keys)))
                if self.work.think:
                    time.sleep(self.rng.uniform(0, self.work.think))
        except Exception as e:  # noqa: BLE001 - reported by the run
            self.error = e
            raise

    def one(self, kind, key):
        w = self.work
        copy = self.rng.randrange(len(model.COPIES)) if kind in model.WRITES else None
        op = Op(next(w.ids), self.index, self.transport, kind, key, copy, None, w.clock())
        if kind == "store":
            op.location = f"chk:{op.id}"
        if kind in model.WRITES:
            self.write(op)
        else:
            self.read(op)
        if op.outcome == OK and op.revision is not None:
            self.seen = max(self.seen, op.revision)
        w.note_latency(op)
        w.ops.append(op)
        return op

    def write(self, op):
        """Sends the write (resending as above) and settles op's outcome."""
        writer = None
        if self.exactly_once:
            self.sequence += 1
            writer = (f"chk-c{self.index}", self.sequence)
            op.exactly_once = True
        deadline = time.monotonic() + self.work.resend_for
        unknown = False
        while True:
            outcome, revision, detail = self.send_write(op, writer)
            op.detail = detail.replace("\n", " | ")
            if outcome == OK:
                op.outcome, op.revision, op.ret = OK, revision, self.work.clock()
                return
            unknown |= outcome == UNKNOWN
            if not unknown or writer is None or time.monotonic() > deadline:
                break
            op.attempts += 1
            time.sleep(self.rng.uniform(0.05, 0.2))
        op.outcome = UNKNOWN if unknown else FAILED
        op.ret = INF if unknown else self.work.clock()


class RestClient(Client):
    transport = "rest"

    def __init__(self, index, work, seed, exactly_once, servers, reads=True):
        super().__init__(index, work, seed, exactly_once, reads)
        self.servers = servers

    def post(self, server, path, body):
        """(status, answer): status -1 when no connection could be opened (nothing sent),
        0 when no answer came after sending."""
        host, port = server.base.split("//")[1].rsplit(":", 1) if server.base else ("", 0)
        conn = http.client.HTTPConnection(host, int(port), timeout=REST_TIMEOUT_S)
        try:
            try:
                conn.connect()
            except OSError as e:
                return -1, {"message": f"{outcomes.REFUSED}: {e}"}
            try:
                conn.request("POST", path, json.dumps(body),
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                return 0, {"message": f"no answer: {e!r}"}
            try:
                return resp.status, json.loads(raw or b"null")
            except ValueError:
                return resp.status, {"message": raw[:200].decode(errors="replace")}
        finally:
            conn.close()

    def send_write(self, op, writer):
        holder, tier = model.COPIES[op.copy]
        event = {"event_type": "stored" if op.kind == "store" else "removed",
                 "model_name": self.work.model_name, "block_size": self.work.block_size,
                 "backend_id": holder, "medium": tier, "seq_hashes": [self.work.keys[op.key]]}
        if op.location:
            event["location"] = op.location
        body = {"events": [event]}
        if writer:
            body["writer_id"], body["writer_sequence"] = writer
        server = self.rng.choice(self.servers)
        op.server = server.id
        status, answer = self.post(server, "/v1/events", body)
        message = str((answer or {}).get("message", "")) if status != 200 else ""
        detail = f"server {server.id}: {status} {message}".strip()
        return outcomes.rest(status, message), (answer or {}).get("revision"), detail

    def read(self, op):
        w = self.work
        key = w.keys[op.key]
        server = self.rng.choice(self.servers)
        op.server = server.id
        by_hash = op.kind == "read" and self.rng.random() < 0.3
        if by_hash:   # the Conductor dialect: counts in tokens per medium alone
            path = "/query_by_hash"
            body = {"model": w.model_name, "block_size": w.block_size, "seq_hashes": [key]}
        else:
            path = "/v1/lookup"
            body = {"model_name": w.model_name, "block_size": w.block_size,
                    "seq_hashes": [key], "include_locations": False}
        if op.kind == "read":
            body["consistency"] = "linearizable"
        else:
            op.min_revision = body["min_revision"] = self.seen
        status, answer = self.post(server, path, body)
        op.ret = w.clock()
        op.detail = f"server {server.id} {path}: {status}"
        if status != 200:
            op.outcome = FAILED   # a read changes nothing: left out of the history
            op.detail += " " + str(answer.get("message", "")).replace("\n", " | ")
            if status == 421 and op.kind == "read" and answer.get("leader_id") == server.id:
                with w.lock:
                    w.anomalies["lin_read_421_self"] += 1
            return
        op.outcome = OK
        if by_hash:
            op.revision = None   # the Conductor answer carries no revision
            held = answer.get("default", {})
            op.observed = mask_of((h, t) for h, tiers in held.items()
                                  for t in model.TIERS if tiers.get(t, 0) > 0)
        else:
            op.revision = answer["revision"]
            op.observed = mask_of((i["instance_id"], t) for i in answer["instances"]
                                  for t in model.TIERS if i["media"].get(t, 0) > 0)


class BinaryClient(Client):
    transport = "bin"

    def __init__(self, index, work, seed, exactly_once, endpoints, kvatlas, reads=True):
        super().__init__(index, work, seed, exactly_once, reads)
        self.kv = kvatlas
        self.endpoints = endpoints
        self.client = kvatlas.Client(endpoints, deadline=REST_TIMEOUT_S, connect_timeout=1.0)
        self.ctx = kvatlas.Context(work.model_name, work.block_size)

    def send_write(self, op, writer):
        kv = self.kv
        holder, tier = model.COPIES[op.copy]
        key = [self.work.keys[op.key]]
        if op.kind == "store":
            event = kv.stored(self.ctx, holder, key, medium=tier, locations=[op.location])
        else:
            event = kv.removed(self.ctx, holder, key, medium=tier)
        op.server = self.endpoints[0]
        try:
            if writer:
                answer = self.client.ingest([event], writer_id=writer[0], sequence=writer[1])
            else:
                answer = self.client.ingest([event])
        except kv.Error as e:
            return outcomes.binary(e.code, e.message), None, f"{e.code}: {e.message}"
        return OK, answer.revision, "ok"

    def read(self, op):
        kv = self.kv
        op.server = self.endpoints[0]
        try:
            if op.kind == "read":
                answer = self.client.lookup(self.ctx, hashes=[self.work.keys[op.key]],
                                            include_locations=False, linearizable=True)
            else:
                op.min_revision = self.seen
                answer = self.client.lookup(self.ctx, hashes=[self.work.keys[op.key]],
                                            include_locations=False, min_revision=self.seen)
        except kv.Error as e:
            op.ret, op.outcome = self.work.clock(), FAILED
            op.detail = f"{e.code}: {e.message}".replace("\n", " | ")
            return
        op.ret, op.outcome, op.revision = self.work.clock(), OK, answer.revision
        held = []
        for i in answer.instances:
            if i.blocks.gpu > 0:
                held.append((i.instance_id, "GPU"))
            if i.blocks.cpu_only > 0:
                held.append((i.instance_id, "CPU"))
        op.observed = mask_of(held)
        op.detail = f"{self.endpoints[0]}: ok"

    def close(self):
        self.client.close()


def mask_of(copies):
    mask = 0
    for c in copies:
        if c in model.COPIES:
            mask |= 1 << model.COPIES.index(c)
    return mask
