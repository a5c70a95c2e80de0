#!/usr/bin/python3
"""Engine streams say whether anything answers at their endpoint (docs/engine-events.md
§Streams): the real kvatlas-server and fake engines (fake_engine_publisher.py).

usage: stream_health_test.py KVATLAS_SERVER_BINARY

A publisher registered over POST /register and one from the config file's `publishers`, both
at endpoints where nothing listens, are `connecting` in GET /v1/streams (with
connecting_for_ms, no error, no reconnect), kvatlas_zmq_stream_connecting is 1, and /readyz
stays 200 but names both in its warnings once they have been connecting for 10 s. An engine
that then starts at the first endpoint makes its stream `live` before it sends anything (the
ZMTP handshake); when it goes away the stream is `connecting` again with one reconnect.
Loopback only, bounded waits, every process and directory cleaned up.
"""

import json
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zmq_ingest_test as z  # noqa: E402 - the server and fake engine drivers

CONNECTING_REPORTED_MS = 10_000  # registration_service.h kStreamConnectingGrace


def metric(server, name, labels):
    text = urllib.request.urlopen(server.base + "/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    return None


def streams(server):
    return {s["key"]: s for s in server.request("GET", "/v1/streams")["streams"]}


def ready(server):
    """GET /readyz, which must answer 200: its warnings."""
    answer = server.request("GET", "/readyz")
    assert answer["status"] == "ready", answer
    return answer["warnings"]


def case_connecting(binary):
    port, config_port = z.free_port(), z.free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"publishers": [{"endpoint": f"tcp://127.0.0.1:{config_port}", "type": "vLLM",
                               "modelname": "m", "instance_id": "cfg", "block_size": z.BS}]},
              config)
    config.close()
    server = z.Server(binary, extra=("--config", config.name))
    fake = None
    try:
        answer = server.request("POST", "/register", {
            "endpoint": endpoint, "type": "vLLM", "modelname": "m", "instance_id": "e1",
            "block_size": z.BS})
        assert answer["status"] == "registered successfully", answer
        keys = ("e1|default|0", "cfg|default|0")
        seen = z.wait_for("both streams", lambda: all(k in streams(server) for k in keys) and
                          streams(server), server)
        for key in keys:
            s = seen[key]
            assert s["state"] == "connecting", s
            assert isinstance(s["connecting_for_ms"], int) and s["connecting_for_ms"] >= 0, s
            assert s["reconnects"] == 0 and s["error"] is None and s["batches"] == 0, s
            assert metric(server, "kvatlas_zmq_stream_connecting", f'stream="{key}"') == 1.0
        # Reported by /readyz once connecting for 10 s, without failing it.
        deadline = time.time() + CONNECTING_REPORTED_MS / 1000 + z.DEADLINE_S
        while True:
            warnings = ready(server)
            if len(warnings) == 2:
                break
            assert time.time() < deadline, (warnings, streams(server))
            time.sleep(0.2)
        for key, at in zip(keys, (endpoint, f"tcp://127.0.0.1:{config_port}")):
            assert any(key in w and at in w and "connecting" in w for w in warnings), warnings
        assert all(s["state"] == "connecting" and s["connecting_for_ms"] >= 10_000
                   for s in streams(server).values()), streams(server)
        print(f"  /readyz warnings: {warnings}", flush=True)

        # The engine starts at the endpoint: live at the handshake, before any message.
        fake = z.Fake("--endpoint", endpoint)
        live = z.wait_for("e1 live", lambda: (lambda s: s["state"] == "live" and s)(
            streams(server)["e1|default|0"]), server)
        assert live["connecting_for_ms"] is None and live["batches"] == 0, live
        assert live["reconnects"] == 0, live
        assert metric(server, "kvatlas_zmq_stream_connecting", 'stream="e1|default|0"') == 0.0
        warnings = ready(server)
        assert len(warnings) == 1 and "cfg|default|0" in warnings[0], warnings
        fake.store(z.PROMPT[:z.BS])
        z.wait_for("the block", lambda: z.match(server, z.PROMPT, "e1").get("GPU") == z.BS,
                   server)

        # It goes away: connecting again, one reconnect.
        fake.close()
        fake = None
        lost = z.wait_for("e1 connecting again", lambda: (
            lambda s: s["state"] == "connecting" and s)(streams(server)["e1|default|0"]), server)
        assert lost["reconnects"] == 1 and lost["connecting_for_ms"] >= 0, lost
        assert lost["last_seq"] == 0 and lost["batches"] == 1, lost
    finally:
        if fake:
            fake.close()
        server.cleanup()
        os.unlink(config.name)


CASES = {"connecting": case_connecting}

if __name__ == "__main__":
    z.run_cases(CASES)
