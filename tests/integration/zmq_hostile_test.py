#!/usr/bin/python3
"""Hostile publishers and registrations against the real kvatlas-server binary.

usage: zmq_hostile_test.py KVATLAS_SERVER_BINARY [CASE...]

Reuses the harness of zmq_ingest_test.py (Server, Fake: 127.0.0.1 only, temporary data
directories). Cases: a message over the SUB socket's 64 MiB limit must not end a stream;
endpoints of transports not allowed (ipc://, inproc:// by default) and of hosts not in
zmq_allowed_hosts are refused; registrations past max_registrations are refused with a clear
error; a process out of file descriptors reports the streams it cannot follow; SIGTERM exits
cleanly. Every wait is
bounded.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zmq_ingest_test import (BS, PROMPT, Fake, Server, free_port, match,  # noqa: E402
                             run_cases, wait_for)


def case_oversized_message(binary):
    """libzmq closes the connection of a peer that sends a message over ZMQ_MAXMSGSIZE and,
    for that protocol error, never reconnects: the server must recreate the socket."""
    server, fake = Server(binary), Fake()
    key = "e1|default|0"
    try:
        server.register(fake, "e1")
        fake.store(PROMPT[:BS])
        wait_for("block 0", lambda: match(server, PROMPT, "e1").get("GPU") == BS, server)
        fake.cmd(op="oversized", bytes=70 << 20)
        # Batches sent while the server is away are dropped by the PUB; once it is back,
        # the next live batch shows the gap and the replay endpoint fills it.
        deadline = time.time() + 8.0
        blocks = 1
        while match(server, PROMPT, "e1").get("GPU") != 6 * BS:
            assert time.time() < deadline, \
                f"valid batches after the oversized message were never indexed: " \
                f"{server.stream(key)}\n{server.log_tail()}"
            if blocks < 6:
                fake.store(PROMPT[:(blocks + 1) * BS], from_block=blocks)
                blocks += 1
            time.sleep(0.3)
        s = server.stream(key)
        assert s["reconnects"] >= 1, s
        assert s["last_error"] and "closed" in s["last_error"], s
        assert s["error"] is None, s  # followed again
        metrics = urllib.request.urlopen(server.base + "/metrics", timeout=5).read().decode()
        assert f'kvatlas_zmq_reconnects_total{{stream="{key}"}} ' in metrics, metrics[-2000:]
        server.request("GET", "/readyz")
    finally:
        fake.close()
        server.cleanup()


def register_body(instance, endpoint):
    return {"endpoint": endpoint, "type": "vLLM", "modelname": "m", "instance_id": instance,
            "block_size": BS}


def assert_endpoints_refused(server, endpoints, key):
    """POST /register of each endpoint answers 400 naming the config key that refuses it."""
    for endpoint in endpoints:
        answer = server.request("POST", "/register", register_body("e1", endpoint), expect=400)
        assert key in answer["message"], answer


def case_transports_not_allowed(binary):
    server = Server(binary)
    ipc_path = os.path.join(server.data_dir, "pub.sock")
    try:
        assert_endpoints_refused(server, ("ipc://" + ipc_path, "inproc://engine", "ipc:///tmp/x"),
                                 "zmq_allowed_transports")
        replay = dict(register_body("e1", f"tcp://127.0.0.1:{free_port()}"),
                      replay_endpoint="inproc://replay")
        answer = server.request("POST", "/register", replay, expect=400)
        assert "replay_endpoint" in answer["message"], answer
        assert server.request("GET", "/v1/registrations")["registrations"] == []
    finally:
        server.cleanup()
    # Configured explicitly, ipc is accepted (and inproc still is not).
    server = Server(binary, extra=("--zmq-allowed-transports", "tcp,ipc"))
    try:
        server.request("POST", "/register",
                       register_body("e1", "ipc://" + os.path.join(server.data_dir, "p.sock")))
        server.request("POST", "/register", register_body("e2", "inproc://x"), expect=400)
    finally:
        server.cleanup()
    # A config file cannot name one either.
    assert_config_refused(binary, {"publishers": [register_body("c1", "ipc:///tmp/x.sock")]},
                          ["--zmq-allowed-transports", "tcp,udp"], "zmq_allowed_transports")


def assert_config_refused(binary, config_doc, flags, key):
    """Neither the config file `config_doc` nor the command line `flags` starts a server, and
    both errors name `key`."""
    config = write_config(config_doc)
    try:
        for args in (["--config", config], flags):
            run = subprocess.run([binary, *args, "--print-config"], capture_output=True,
                                 text=True, timeout=10)
            assert run.returncode != 0 and key in run.stderr, run
    finally:
        os.unlink(config)


def write_config(doc):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(doc, f)
    f.close()
    return f.name


def case_registration_cap(binary):
    run = subprocess.run([binary, "--print-config"], capture_output=True, text=True, timeout=10)
    assert json.loads(run.stdout)["max_registrations"] == 256, run.stdout[-500:]
    # Two publishers from the config file count against the cap of 3.
    ports = [free_port() for _ in range(4)]
    config = write_config({"max_registrations": 3, "publishers": [
        register_body("c0", f"tcp://127.0.0.1:{ports[0]}"),
        register_body("c1", f"tcp://127.0.0.1:{ports[1]}")]})
    server = Server(binary, extra=("--config", config))
    try:
        wait_for("config publishers", lambda: len(
            server.request("GET", "/v1/registrations")["registrations"]) == 2, server)
        server.request("POST", "/register", register_body("e0", f"tcp://127.0.0.1:{ports[2]}"))
        answer = server.request("POST", "/register",
                                register_body("e1", f"tcp://127.0.0.1:{ports[3]}"), expect=429)
        assert "max_registrations" in answer["message"] and "3" in answer["message"], answer
        # Replacing an existing registration is not a new one.
        server.request("POST", "/register",
                       dict(register_body("e0", f"tcp://127.0.0.1:{ports[3]}"), modelname="m2"))
        server.request("POST", "/unregister", {"instance_id": "e0"})
        server.request("POST", "/register", register_body("e1", f"tcp://127.0.0.1:{ports[3]}"))
        assert len(server.request("GET", "/v1/registrations")["registrations"]) == 3
    finally:
        server.cleanup()
        os.unlink(config)
    # More config publishers than the cap: refused at startup.
    config = write_config({"max_registrations": 1, "publishers": [
        register_body("c0", f"tcp://127.0.0.1:{ports[0]}"),
        register_body("c1", f"tcp://127.0.0.1:{ports[1]}")]})
    try:
        run = subprocess.run([binary, "--config", config, "--print-config"],
                             capture_output=True, text=True, timeout=10)
        assert run.returncode != 0 and "max_registrations" in run.stderr, run
    finally:
        os.unlink(config)


def case_hosts_not_allowed(binary):
    """zmq_allowed_hosts: only the listed networks and names may be followed, from POST
    /register and from the config file."""
    server = Server(binary, extra=("--zmq-allowed-hosts", "127.0.0.0/8,*.engines.test"))
    try:
        assert_endpoints_refused(server, ("tcp://10.1.2.3:5557", "tcp://localhost:5557",
                                          "tcp://[::1]:5557", "tcp://engines.test:5557"),
                                 "zmq_allowed_hosts")
        replay = dict(register_body("e1", f"tcp://127.0.0.1:{free_port()}"),
                      replay_endpoint="tcp://192.168.0.1:5558")
        answer = server.request("POST", "/register", replay, expect=400)
        assert answer["message"].startswith("replay_endpoint: host 192.168.0.1"), answer
        assert server.request("GET", "/v1/registrations")["registrations"] == []
        server.request("POST", "/register", register_body("e1", f"tcp://127.0.0.1:{free_port()}"))
        server.request("POST", "/register", register_body("e2", "tcp://a.engines.test:5557"))
        assert len(server.request("GET", "/v1/registrations")["registrations"]) == 2
    finally:
        server.cleanup()
    assert_config_refused(binary, {"zmq_allowed_hosts": "10.0.0.0/8",
                                   "publishers": [register_body("c1", "tcp://127.0.0.1:5557")]},
                          ["--zmq-allowed-hosts", "10.0.0.0/33"], "zmq_allowed_hosts")


def case_descriptor_exhaustion(binary):
    """A process that runs out of file descriptors (a hard limit of 160, which the server
    cannot raise) says so at startup, shows the streams it cannot connect in /v1/streams and
    /readyz, still answers (an accept that fails for want of a descriptor is retried, so a
    client's connection may wait or be reset meanwhile: this one retries), and a SIGTERM still
    exits cleanly."""
    def limit():  # runs in the child, before exec
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
    server = Server(binary, extra=("--max-registrations", "300"), preexec_fn=limit)

    def call(method, path, body=None, expect=200):
        deadline = time.time() + 30
        while True:
            try:
                return server.request(method, path, body, expect=expect)
            except (ConnectionError, urllib.error.URLError, TimeoutError):
                assert time.time() < deadline, f"{method} {path}: no answer for 30 s"
                time.sleep(0.1)
    try:
        assert "open file limit 160 is below" in server.log_tail(), server.log_tail()
        for i in range(150):
            call("POST", "/register", register_body(f"e{i}", f"tcp://127.0.0.1:{1 + i % 3}"))

        def failing():
            streams = call("GET", "/v1/streams")["streams"]
            return [s for s in streams if s["error"] and "Too many open files" in s["error"]]
        short = len(wait_for("streams that cannot connect", failing, server))
        # /readyz names them once their error has lasted 10 s (docs/limits.md).
        deadline = time.time() + 30
        while "Too many open files" not in str(call("GET", "/readyz", expect=None)):
            assert time.time() < deadline, "/readyz did not report the streams"
            time.sleep(0.5)
        server.proc.send_signal(15)
        code = server.proc.wait(timeout=20)
        assert code == 0, f"exit code {code}\n{server.log_tail()}"
        print(f"  {short} of 150 streams short of descriptors; /readyz 503 naming them; "
              f"SIGTERM exited 0", flush=True)
    finally:
        server.cleanup()


def case_sigterm_with_many_streams(binary):
    """Many registrations of endpoints where nothing listens: the server stays light and a
    SIGTERM exits cleanly (exit code 0)."""
    server = Server(binary, extra=("--max-registrations", "300"))
    try:
        for i in range(300):
            server.request("POST", "/register",
                           register_body(f"e{i}", f"tcp://127.0.0.1:{1 + i % 3}"))
        wait_for("300 streams",
                 lambda: len(server.request("GET", "/v1/streams")["streams"]) == 300, server)
        s = server.request("GET", "/v1/streams")["streams"][0]
        assert s["error"] is None, s
        server.proc.send_signal(15)
        code = server.proc.wait(timeout=20)
        assert code == 0, f"exit code {code}\n{server.log_tail()}"
    finally:
        server.cleanup()


CASES = {
    "oversized_message": case_oversized_message,
    "transports_not_allowed": case_transports_not_allowed,
    "hosts_not_allowed": case_hosts_not_allowed,
    "descriptor_exhaustion": case_descriptor_exhaustion,
    "registration_cap": case_registration_cap,
    "sigterm_with_many_streams": case_sigterm_with_many_streams,
}


def main():
    run_cases(CASES)


if __name__ == "__main__":
    main()
