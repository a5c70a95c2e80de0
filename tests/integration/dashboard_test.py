#!/usr/bin/python3
"""The dashboard (docs/operations.md §Dashboard) in headless Chromium against a live
3-server cluster.

usage: dashboard_test.py KVATLAS_SERVER_BINARY OUTPUT_DIR

Chromium is driven over the DevTools protocol (a websocket; Debian's python3-websocket):
the leader's page must load with no console error, exception or CSP violation, show the
leader and the 3 members with their lag, an engine stream with its gap (and one
registered where nothing answers, connecting), and its numbers
(index entries, ingest, lookup and prefix-hit rates) must move while the test ingests and
looks up; a follower's page must
show the same leader and link to the leader's dashboard. Then, on a server with access
control on, the page (which needs no token) must say that a token is needed, and show the
server once one is typed into its token field. A screenshot of the leader's page
is written to OUTPUT_DIR/dashboard_test.png (the path is printed). Bounded: about 30 s,
90 s at most. Exits 77 (skipped) only when Chromium is not installed (scripts/setup
installs the Debian package chromium).
"""

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))
sys.path.insert(0, HERE)
import cluster_fault_test as h  # noqa: E402 - the cluster harness
import zmq_ingest_test as z  # noqa: E402 - the fake engine driver

SKIP = 77
TOTAL_S = 90  # the whole test, whatever hangs
WAIT_S = 20  # one condition on the page


class Browser:
    """Headless Chromium on a private profile, one page driven over the DevTools protocol.
    Every console message, exception and log entry it reports is kept in `events`."""

    def __init__(self, chromium, root):
        try:
            import websocket  # noqa: PLC0415 - only once Chromium is known to be there
        except ImportError as e:
            raise AssertionError("python3-websocket is not installed (scripts/setup installs "
                                 "it with chromium)") from e
        self.profile = os.path.join(root, "chromium-profile")
        self.log_path = os.path.join(root, "chromium.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--disable-gpu", "--no-sandbox",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--window-size=1280,1000", "about:blank"],
            stdout=self.log, stderr=self.log, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + WAIT_S
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            assert self.proc.poll() is None and time.time() < deadline, (
                "chromium did not start:\n" + self.log_tail())
            time.sleep(0.05)
        time.sleep(0.1)  # the file is written, then flushed: let it be whole
        with open(port_file) as f:
            port = int(f.readline().strip())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
            pages = [t for t in json.load(resp) if t["type"] == "page"]
        assert pages, "chromium has no page target"
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=10,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  width=1280, height=1000, deviceScaleFactor=1, mobile=False)

    def log_tail(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                assert "error" not in message, (method, message["error"])
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, (expression, result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, what, expression, check=bool):
        """The value of `expression` once `check` accepts it (bounded)."""
        deadline = time.time() + WAIT_S
        value = None
        while time.time() < deadline:
            value = self.evaluate(expression)
            if check(value):
                return value
            time.sleep(0.1)
        raise AssertionError(f"the page never showed {what}: last {value!r}\n"
                             f"{json.dumps(self.errors(), indent=1)}")

    def navigate(self, url):
        self.call("Page.navigate", url=url)
        self.wait_for("a loaded document", "document.readyState", lambda v: v == "complete")

    def errors(self):
        """Console errors, uncaught exceptions and error log entries (failed loads, CSP
        violations) the page reported so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"])
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append({"console": p["type"], "args": p["args"]})
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(p["entry"])
        return out

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - best effort
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


class Load:
    """Writes (each a new 2-block prompt) and lookups of them on `node`, ~20 a second each,
    in a thread until stopped."""

    def __init__(self, node):
        self.node, self.stop_flag, self.writes = node, threading.Event(), 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop_flag.is_set():
            if h.write(self.node, 5000 + self.writes) is not None:
                h.holds(self.node, 5000 + self.writes)
                self.writes += 1
            time.sleep(0.05)

    def stop(self):
        self.stop_flag.set()
        self.thread.join(timeout=10)


def text(selector):
    return f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent"


def number(value):
    """The number a formatted cell shows ("1,234", "12.5", "100.0 %"), or None ("—")."""
    try:
        return float(str(value).replace(",", "").replace("%", "").split()[0])
    except (ValueError, IndexError):
        return None


def check_cluster_view(browser, leader, nodes):
    browser.wait_for("a first update", "Number(document.body.dataset.updates || 0)",
                     lambda v: v >= 1)
    browser.wait_for(f"leader server {leader.id}", text("#leader"),
                     lambda v: v == f"server {leader.id}")
    browser.wait_for("3 members", text("#member-count"), lambda v: v == "3 members")
    rows = browser.evaluate("[...document.querySelectorAll('#members tbody tr')].map("
                            "r => [...r.cells].map(c => c.textContent))")
    assert len(rows) == 3, rows
    assert sorted(int(r[0].split()[0]) for r in rows) == sorted(n.id for n in nodes), rows
    states = {int(r[0].split()[0]): r[2] for r in rows}
    assert states[leader.id] == "leader", rows
    assert list(states.values()).count("follower") == 2, rows
    # The raft groups: the one group, led by the same leader, with the three members.
    browser.wait_for("the group's row", "document.querySelectorAll('#groups tbody tr').length",
                     lambda v: v == 1)
    group = browser.evaluate("[...document.querySelector('#groups tbody tr').cells]"
                             ".map(c => c.textContent)")
    assert group[0] == "1" and group[1] == f"server {leader.id}", group
    assert sorted(int(m) for m in group[2].split(", ")) == sorted(n.id for n in nodes), group
    assert group[7] == "taken", group
    assert browser.evaluate(text("#group-epoch")) == "directory epoch 0"
    return rows


def add_engine_stream(leader):
    """A fake vLLM engine registered on the leader, with one sequence gap (replayed)."""
    fake = z.Fake()
    try:
        fake.register_on(leader, model="engine-model")
        fake.store(z.PROMPT[:z.BS])
        fake.cmd(op="drop_next")
        fake.store(z.PROMPT[:2 * z.BS], from_block=1)
        fake.store(z.PROMPT[:3 * z.BS], from_block=2)
        return fake
    except BaseException:
        fake.close()
        raise


def start_server_with_token(binary, root):
    """A single server with access control on: (process, base URL, a read token)."""
    data = os.path.join(root, "auth-server")
    os.makedirs(data)
    token = "kvt_" + os.urandom(32).hex()
    with open(os.path.join(data, "tokens"), "w") as f:
        f.write(f"dash:read:{hashlib.sha256(token.encode()).hexdigest()}\n")
    log = open(os.path.join(data, "server.log"), "wb")
    proc = subprocess.Popen([binary, "--data-dir", data, "--http-listen", "127.0.0.1:0",
                             "--rpc-listen", "127.0.0.1:0", "--token-file",
                             os.path.join(data, "tokens")], stdout=log, stderr=log)
    log.close()
    addr = os.path.join(data, "http.addr")
    deadline = time.time() + WAIT_S
    while not (os.path.exists(addr) and os.path.getsize(addr) > 0):
        assert proc.poll() is None and time.time() < deadline, "the server did not start"
        time.sleep(0.02)
    with open(addr) as f:
        return proc, "http://" + f.read().strip(), token


def check_token_entry(browser, base, token):
    """Without a token the page says one is needed; typed in, it is used."""
    browser.navigate(base + "/?interval=300")
    browser.wait_for("that a token is needed", text("#status"),
                     lambda v: "needs a token" in (v or ""))
    browser.evaluate("document.getElementById('token').focus()")
    browser.call("Input.insertText", text=token)
    browser.evaluate("document.getElementById('token-form').requestSubmit()")
    browser.wait_for("the server, with the token", text("#leader"), lambda v: v == "server 1")
    assert browser.evaluate("sessionStorage.getItem('kvatlas-token')") == token
    assert browser.evaluate("document.getElementById('token').value") == ""


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIP dashboard_test: chromium is not installed (Debian package chromium; "
              "scripts/setup installs it)", flush=True)
        sys.exit(SKIP)
    # A hang anywhere ends the test, through the cleanup below.
    def timed_out(*_):
        raise TimeoutError(f"dashboard_test took longer than {TOTAL_S} s")
    signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(TOTAL_S)
    started = time.time()
    root = tempfile.mkdtemp(prefix="kvatlas-dashboard-")
    cluster = browser = load = fake = auth_server = None
    try:
        cluster = h.Cluster(binary)
        leader = cluster.leader()
        h.wait_addresses_known(cluster)
        follower = next(n for n in cluster.nodes if n is not leader)
        browser = Browser(chromium, root)

        # The leader's page: the cluster, each member's lag.
        t0 = time.time()
        browser.navigate(leader.base + "/?interval=300")
        check_cluster_view(browser, leader, cluster.nodes)
        load_s = time.time() - t0
        rows = browser.evaluate("[...document.querySelectorAll('#members tbody tr')].map("
                                "r => r.cells[7].textContent)")
        assert all(number(v) is not None for v in rows), f"lag not shown on the leader: {rows}"
        # When the leader last heard from each follower (itself: nothing).
        contacts = browser.evaluate("[...document.querySelectorAll('#members tbody tr')].map("
                                    "r => r.cells[8].textContent)")
        assert sorted(v.endswith(" ms ago") for v in contacts) == [False, True, True], contacts
        assert browser.evaluate("document.getElementById('lag-note').hidden") is True

        # Its numbers move with the load.
        before = number(browser.evaluate(text("#stat-entries")))
        assert before == 0, before
        fake = add_engine_stream(leader)
        stream = browser.wait_for("the engine stream", "[...(document.querySelector("
                                  "'#streams tbody tr') || {cells: []}).cells].map("
                                  "c => c.textContent)", lambda v: len(v) == 14 and v[7] == "1")
        assert stream[1] == "vLLM (incremental)" and stream[2] == "engine-model", stream
        assert stream[11] == "0" and stream[12] == "0", stream  # re-stored, unheld removes
        load = Load(leader)
        browser.wait_for("index entries growing", text("#stat-entries"),
                         lambda v: (number(v) or 0) > before)
        browser.wait_for("an ingest rate", text("#chart-ingest .value"),
                         lambda v: (number(v) or 0) > 0)
        browser.wait_for("a lookup rate", text("#chart-lookups .value"),
                         lambda v: (number(v) or 0) > 0)
        browser.wait_for("a prefix-hit rate of 100 %", text("#chart-hits .value"),
                         lambda v: v == "100.0 %")
        browser.wait_for("one context", text("#contexts tbody tr td:nth-child(2)"),
                         lambda v: v == "m")
        # A publisher registered where nothing answers: its row says connecting, for how long.
        status, body = leader.request("POST", "/register", {
            "endpoint": f"tcp://127.0.0.1:{h.free_ports(1)[0]}", "type": "vLLM",
            "modelname": "engine-model", "instance_id": "zz-down", "block_size": z.BS})
        assert status == 200, body
        down = browser.wait_for("the connecting stream", "[...document.querySelectorAll("
                                "'#streams tbody tr')].map(r => r.cells[3].textContent)",
                                lambda v: len(v) == 2 and v[1].startswith("connecting "))
        assert down[0] == "live", down
        # A few seconds of history in the charts, for the picture.
        updates = browser.evaluate("Number(document.body.dataset.updates)")
        browser.wait_for("10 more updates", "Number(document.body.dataset.updates)",
                         lambda v: v >= updates + 10)
        shot = os.path.join(out_dir, "dashboard_test.png")
        browser.screenshot(shot)
        load.stop()

        # Page weight and time to the first data, as the browser measured them.
        weight = browser.evaluate(
            "[performance.getEntriesByType('navigation')[0], "
            "...performance.getEntriesByType('resource')].filter("
            "e => !e.name.includes('/v1/') && !e.name.endsWith('/metrics'))"
            ".map(e => [e.name.replace(location.origin, ''), e.decodedBodySize])")
        dom_ms = browser.evaluate(
            "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")

        # A follower's page: the same leader, and the way to the leader's dashboard.
        browser.navigate(follower.base + "/?interval=300")
        check_cluster_view(browser, leader, cluster.nodes)
        browser.wait_for("the note pointing at the leader",
                         "document.getElementById('lag-note').hidden", lambda v: v is False)
        link = browser.evaluate("document.querySelector('#lag-note a').href")
        assert link == leader.base + "/", (link, leader.base)

        errors = browser.errors()
        assert not errors, "the page reported errors:\n" + json.dumps(errors, indent=1)

        # Access control on: 401s until the token is typed in (those are logged as failed
        # loads, and are the only errors allowed here).
        auth_server, auth_base, token = start_server_with_token(binary, root)
        check_token_entry(browser, auth_base, token)
        errors = [e for e in browser.errors()[len(errors):] if "401" not in e.get("text", "")]
        assert not errors, "the page reported errors:\n" + json.dumps(errors, indent=1)
        print(f"  screenshot: {shot}", flush=True)
        print(f"  page weight: {sum(n for _, n in weight):,} bytes "
              f"({', '.join(f'{p} {n:,}' for p, n in weight)}); DOMContentLoaded "
              f"{dom_ms:.0f} ms, cluster shown {load_s:.2f} s after navigating; "
              f"{load.writes} writes during the test; total {time.time() - started:.1f} s",
              flush=True)
    except (AssertionError, TimeoutError):
        if browser is not None:
            print("chromium log:\n" + browser.log_tail(), flush=True)
        raise
    finally:
        if load is not None:
            load.stop()
        if fake is not None:
            fake.close()
        if browser is not None:
            browser.close()
        if cluster is not None:
            cluster.cleanup()
        if auth_server is not None:
            auth_server.kill()
            auth_server.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
    print("PASS dashboard_test", flush=True)


if __name__ == "__main__":
    main()
