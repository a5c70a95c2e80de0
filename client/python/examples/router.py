#!/usr/bin/env python3
"""A small KV-aware OpenAI-compatible gateway built on the kvatlas package.

    router.py --kvatlas 127.0.0.1:7071 --model llama --block-size 16 \\
              --engine vllm-0=http://10.0.0.1:8000 --engine vllm-1=http://10.0.0.2:8000 \\
              [--listen 127.0.0.1:8080] [--token T]

POST /v1/completions and POST /v1/chat/completions: the router takes the prompt's token ids
(`prompt_token_ids`, or `prompt` given as a list of ids; otherwise it tokenizes trivially:
the UTF-8 bytes of the prompt, or of the chat messages' contents joined by newlines), asks its
kvatlas.LocalIndex which engines cache which prefix of it, ranks the engines with
kvatlas.Scorer given each one's load (the prompt tokens of the requests this router has in
flight there, as queued prefill), and proxies the request to the pick unchanged. Streaming
answers (`"stream": true`, server-sent events) are passed through chunk by chunk. The
answer carries `X-Kvatlas-Engine: <name>`. GET /router/status reports the replica's revision
and sync state and each engine's in-flight load.

Engine names must be the instance ids the engines publish KV events under (their kvatlas
registration's instance_id), so that lookups name them. A sketch, not a product: no
retries, no health checks, no authentication of clients.
"""

import argparse
import http.client
import http.server
import json
import os
import sys
import threading
import urllib.parse

import kvatlas

MAX_BODY_BYTES = 16 << 20  # larger requests get 413


def tokens_of(body, path):
    """The request's token ids: given, or the prompt's UTF-8 bytes (a stand-in tokenizer)."""
    ids = body.get("prompt_token_ids")
    if ids is None and isinstance(body.get("prompt"), list) and all(
            isinstance(t, int) for t in body["prompt"]):
        ids = body["prompt"]
    if ids is not None:
        return [int(t) for t in ids]
    if path.endswith("/chat/completions"):
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    else:
        text = str(body.get("prompt", ""))
    return list(text.encode())


class Router:
    """The routing decision and the per-engine load it uses; thread-safe."""

    def __init__(self, index, context, engines):
        self.index = index
        self.context = context
        self.engines = engines  # name -> base URL
        self.scorer = kvatlas.Scorer()
        self.lock = threading.Lock()
        self.in_flight_tokens = {name: 0 for name in engines}

    def pick(self, tokens):
        with self.lock:
            candidates = [kvatlas.Candidate(name, queued_prefill_tokens=self.in_flight_tokens[name])
                          for name in self.engines]
        try:
            lookup = self.index.lookup(self.context, tokens=tokens)
        except kvatlas.Error:
            lookup = None  # not synced yet: route on load alone
        if lookup is None:
            matches = [kvatlas.PrefixMatch() for _ in candidates]
            ranked = self.scorer.score(max(1, -(-len(tokens) // self.context.block_size)),
                                       self.context.block_size, candidates, matches)
            return ranked[0].instance_id
        return self.scorer.rank(lookup, candidates, prompt_tokens=max(1, len(tokens))).pick

    def begin(self, name, tokens):
        with self.lock:
            self.in_flight_tokens[name] += len(tokens)

    def end(self, name, tokens):
        with self.lock:
            self.in_flight_tokens[name] -= len(tokens)

    def status(self):
        stats = self.index.stats()
        with self.lock:
            load = dict(self.in_flight_tokens)
        return {"revision": stats.revision, "synced": stats.synced, "in_flight_tokens": load}


def make_handler(router):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet; errors still reach stderr
            pass

        def reply_json(self, status, obj, headers=()):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def error(self, status, message):
            self.reply_json(status, {"error": {"message": message, "code": status}})

        def do_GET(self):
            if self.path == "/router/status":
                return self.reply_json(200, router.status())
            return self.error(404, f"no route GET {self.path}")

        def do_POST(self):
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self.error(404, f"no route POST {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True  # the unread body must not be parsed as a request
                return self.error(413, f"the body is over {MAX_BODY_BYTES} bytes")
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                tokens = tokens_of(body, self.path)
            except (ValueError, TypeError) as e:
                return self.error(400, f"bad request body: {e}")
            name = router.pick(tokens)
            router.begin(name, tokens)
            try:
                self.proxy(name, raw)
            finally:
                router.end(name, tokens)

        def proxy(self, name, raw):
            url = urllib.parse.urlsplit(router.engines[name])
            conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=600)
            try:
                conn.request("POST", url.path.rstrip("/") + self.path, body=raw,
                             headers={"Content-Type": "application/json"})
                upstream = conn.getresponse()
            except OSError as e:
                return self.error(502, f"engine {name} unreachable: {e}")
            self.send_response(upstream.status)
            self.send_header("Content-Type", upstream.getheader("Content-Type",
                                                                "application/json"))
            self.send_header("X-Kvatlas-Engine", name)
            length = upstream.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", length)
                self.end_headers()
                self.wfile.write(upstream.read())
            else:  # streamed (chunked or close-delimited): relay chunk by chunk
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    chunk = upstream.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            conn.close()

    return Handler


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kvatlas", action="append", required=True,
                   help="a kvatlas server's rpc address HOST:PORT (repeatable)")
    p.add_argument("--engine", action="append", required=True, metavar="NAME=URL")
    p.add_argument("--model", required=True)
    p.add_argument("--block-size", type=int, required=True)
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT; port 0 = any")
    p.add_argument("--token", default="", help="kvatlas access token (read role)")
    p.add_argument("--addr-file", help="write the bound HOST:PORT here once listening")
    args = p.parse_args(argv)

    engines = dict(e.split("=", 1) for e in args.engine)
    context = kvatlas.Context(args.model, args.block_size)
    index = kvatlas.LocalIndex(args.kvatlas, [context], token=args.token)
    router = Router(index, context, engines)
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer((host, int(port)), make_handler(router))
    server.daemon_threads = True
    bound = f"{server.server_address[0]}:{server.server_address[1]}"
    if args.addr_file:
        with open(args.addr_file + ".tmp", "w") as f:
            f.write(bound + "\n")
        os.replace(args.addr_file + ".tmp", args.addr_file)
    print(f"router listening on {bound}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        index.close()


if __name__ == "__main__":
    main()
