"""client/python/examples/router.py against three fake engines.

Each fake engine is a small OpenAI-compatible HTTP server (in this process) whose KV cache
is a fake vLLM publisher (tests/integration/fake_engine_publisher.py: ZMQ PUB + replay,
vLLM's event encoding): serving a prompt publishes BlockStored for its blocks, as vLLM
does. The engines are registered with a real kvatlas-server (POST /register), the router
runs as its own process, and a repeated prefix must go to the engine that cached it.
"""

import http.client
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

import kvatlas

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from zmq_ingest_test import Fake  # noqa: E402  (the publisher's driver)

ROUTER = os.path.join(HERE, "..", "..", "client", "python", "examples", "router.py")
BS = 16
CTX = kvatlas.Context("m", BS)


def engine_tokens(body):
    """What the fake engine caches: the token ids, or the prompt's UTF-8 bytes."""
    if "prompt_token_ids" in body:
        return body["prompt_token_ids"]
    if isinstance(body.get("prompt"), list):
        return body["prompt"]
    if "messages" in body:
        return list("\n".join(m["content"] for m in body["messages"]).encode())
    return list(str(body.get("prompt", "")).encode())


class FakeEngine:
    """An OpenAI-compatible engine: answers with its name, caches what it served."""

    def __init__(self, name):
        self.name = name
        self.publisher = Fake()
        self.served = []
        self.lock = threading.Lock()
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                tokens = engine_tokens(body)
                with engine.lock:
                    engine.served.append((self.path, tokens))
                    engine.publisher.cmd(op="store", tokens=tokens, block_size=BS)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in (engine.name, " done"):
                        event = b"data: " + json.dumps(
                            {"choices": [{"text": piece}]}).encode() + b"\n\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                        time.sleep(0.05)
                    done = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                    return
                data = json.dumps({"object": "text_completion",
                                   "choices": [{"text": engine.name}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()
        self.publisher.close()


def rest(server, method, path, body=None):
    req = urllib.request.Request(f"http://{server.http}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def post(addr, path, body):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheader("X-Kvatlas-Engine"), data


@pytest.fixture
def engines(server):
    made = [FakeEngine(f"engine-{i}") for i in range(3)]
    try:
        for e in made:
            answer = rest(server, "POST", "/register", {
                "endpoint": e.publisher.endpoint, "replay_endpoint": e.publisher.replay_endpoint,
                "type": "vLLM", "modelname": "m", "instance_id": e.name, "block_size": BS,
                "dp_rank": 0})
            assert answer["status"] == "registered successfully", answer
            assert e.publisher.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"]
        yield made
    finally:
        for e in made:
            e.close()


@pytest.fixture
def router(server, engines):
    addr_file = tempfile.mktemp(prefix="kvatlas-router-")
    args = ["/usr/bin/python3", ROUTER, "--kvatlas", server.rpc, "--model", "m",
            "--block-size", str(BS), "--listen", "127.0.0.1:0", "--addr-file", addr_file]
    args += [f"--engine={e.name}={e.url}" for e in engines]
    proc = subprocess.Popen(args, env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 15
    while not os.path.exists(addr_file):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
        time.sleep(0.05)
    with open(addr_file) as f:
        addr = f.read().strip()
    os.remove(addr_file)
    yield addr
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_cached(client, router_addr, tokens, engine):
    """Until the server, then the router's replica, have `engine` holding `tokens`."""
    deadline = time.time() + 10
    while True:
        answer = client.lookup(CTX, tokens=tokens)
        match = answer.instance(engine)
        if match is not None and match.blocks.gpu == len(tokens) // BS:
            break
        assert time.time() < deadline, f"{engine} never held the prefix: {answer.instances}"
        time.sleep(0.05)
    while True:
        with urllib.request.urlopen(f"http://{router_addr}/router/status", timeout=5) as r:
            status = json.loads(r.read())
        if status["synced"] and status["revision"] >= answer.revision:
            return
        assert time.time() < deadline, status
        time.sleep(0.05)


def test_repeated_prefix_goes_to_the_engine_that_cached_it(server, engines, router):
    prefix = list(range(1000, 1000 + 8 * BS))  # 8 blocks
    with kvatlas.Client([server.rpc]) as client:
        # engine-2 serves (and caches) the prefix directly, not through the router.
        status, _, _ = post(engines[2].url.split("//")[1], "/v1/completions",
                            {"model": "m", "prompt_token_ids": prefix + [1, 2, 3]})
        assert status == 200
        wait_cached(client, router, prefix, "engine-2")

        status, picked, data = post(router, "/v1/completions",
                                    {"model": "m", "prompt_token_ids": prefix + [7, 8, 9]})
        assert status == 200 and picked == "engine-2"
        assert json.loads(data)["choices"][0]["text"] == "engine-2"
        assert engines[2].served[-1][1] == prefix + [7, 8, 9]

        # A new prefix goes somewhere; repeated, it follows its cache there, streaming.
        other = list(range(5000, 5000 + 6 * BS))
        status, first, _ = post(router, "/v1/completions", {"model": "m", "prompt": other})
        assert status == 200
        wait_cached(client, router, other, first)
        status, again, data = post(router, "/v1/completions",
                                   {"model": "m", "prompt": other + [4], "stream": True})
        assert status == 200 and again == first
        events = [line for line in data.decode().split("\n\n") if line]
        assert events[0].startswith("data: ") and first in events[0]
        assert events[-1] == "data: [DONE]"

        # Chat: the router and the engine tokenize the messages the same trivial way.
        chat = {"model": "m", "messages": [{"role": "user", "content": "x" * (4 * BS)}]}
        status, chat_engine, _ = post(router, "/v1/chat/completions", chat)
        assert status == 200
        wait_cached(client, router, list(("x" * (4 * BS)).encode()), chat_engine)
        chat["messages"].append({"role": "user", "content": "more"})
        status, chat_again, _ = post(router, "/v1/chat/completions", chat)
        assert status == 200 and chat_again == chat_engine

        status, _, data = post(router, "/v1/completions", ["not", "an", "object"])
        assert status == 400 and b"JSON object" in data
