#!/usr/bin/python3
"""The container images' recipes, and a cluster from the image scripts/image builds
(docs/operations.md §Containers, §Container image built here).

usage: container_test.py KVATLAS_SERVER_BINARY KVATLAS_CLI_BINARY

Always: the Containerfile is Debian 12, installs what scripts/setup installs by running it
(no package of its list is repeated in the Containerfile), runs as a non-root user, makes
the data dir a volume, and starts the entrypoint; Containerfile.local (scripts/image's)
runs nothing, has the same user, volume and entrypoint; compose.yaml has three servers
whose service names are their host names (NAME-ORDINAL, for the entrypoint), each with its
own volume on the data dir and the cluster secret where the image's config reads it.

Where podman runs containers (as root) and mmdebstrap is installed: scripts/image builds
the image from the binaries under test (its base root file system cached under
~/.cache/kvatlas-image, so only a cold cache reaches the Debian mirror), and three
containers from it form a cluster on loopback (--network=host, free ports; host names
kvatlas-0..2 for the entrypoint; the cluster secret and a token file mounted where the
image's config reads them, as compose.yaml does; each data dir bind-mounted). Checked: a
leader is elected, the image's CLI answers `cluster ready`, a write through a follower is
read back linearizably on the third server; the leader's container is killed (podman
kill) and the two others elect a new leader, which takes a write; the two are stopped,
every container is removed, and three new ones on the same data dirs elect a leader and
each serves both writes. Prints the image's
size, its build time and the cluster's start time. Containers, data dirs and the test's
image tag are removed at the end. Elsewhere that part is skipped (exit 77) with the reason.
"""

import hashlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTAINER = os.path.join(ROOT, "deploy", "container")
TOKEN = "kvt_" + os.urandom(24).hex()
SERVERS = 3


def setup_packages():
    with open(os.path.join(ROOT, "scripts", "setup")) as f:
        text = f.read()
    body = re.search(r"^packages=\((.*?)^\)", text, re.S | re.M).group(1)
    return [word for line in body.splitlines() for word in line.split("#", 1)[0].split()]


def check_recipe():
    with open(os.path.join(CONTAINER, "Containerfile")) as f:
        recipe = f.read()
    froms = re.findall(r"^FROM (\S+)", recipe, re.M)
    assert froms and all(f == "docker.io/library/debian:12" for f in froms), froms
    assert "RUN /src/scripts/setup" in recipe  # the one package list
    words = set(re.findall(r"[A-Za-z0-9.+-]+", recipe))
    named = ("cmake", "git", "podman")  # words of its comments and commands
    repeated = [p for p in setup_packages() if p in words and p not in named]
    assert not repeated, f"scripts/setup's packages repeated in the Containerfile: {repeated}"
    user = re.findall(r"^USER (\S+)", recipe, re.M)
    assert user and not user[-1].startswith(("0", "root")), user
    assert re.search(r"^VOLUME /var/lib/kvatlas$", recipe, re.M)
    assert 'ENTRYPOINT ["/usr/local/bin/kvatlas-entrypoint"]' in recipe
    assert "COPY deploy/container/entrypoint.sh /usr/local/bin/kvatlas-entrypoint" in recipe
    with open(os.path.join(ROOT, "deploy", "k8s", "kvatlas.json")) as f:
        config = json.load(f)
    assert config["data_dir"].startswith("/var/lib/kvatlas/")

    with open(os.path.join(CONTAINER, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    services = compose["services"]
    assert sorted(services) == ["kvatlas-0", "kvatlas-1", "kvatlas-2"], list(services)
    for name, service in services.items():
        assert service["hostname"] == name
        volumes = service["volumes"]
        assert f"{name}:/var/lib/kvatlas" in volumes, volumes
        assert f"./cluster.secret:{config['cluster_secret_file']}:ro" in volumes, volumes
        assert f"./tokens:{config['token_file']}:ro" in volumes, volumes
        assert service["healthcheck"]["test"][1:4] == ["kvatlas", "cluster", "ready"]
        assert service["environment"]["KVATLAS_INITIAL_MEMBERS"] == "3"
    with open(os.path.join(CONTAINER, "Containerfile.local")) as f:
        local = f.read()
    assert re.findall(r"^FROM (\S+)", local, re.M) == ["${BASE}"], "Containerfile.local: FROM"
    assert not re.search(r"^RUN ", local, re.M), "Containerfile.local runs nothing"
    assert re.findall(r"^USER (\S+)", local, re.M) == ["10001:10001"]
    assert re.search(r"^VOLUME /var/lib/kvatlas$", local, re.M)
    assert 'ENTRYPOINT ["/usr/local/bin/kvatlas-entrypoint"]' in local
    print("recipes and compose file: checked")


def podman_command():
    """(podman's argv prefix, None) where podman can run this test here, else (None, why not).

    runc and cgroupfs: the flags that work on cgroup v1 machines, where podman's default
    crun and systemd cgroup manager fail (docs/operations.md §Container image built here).
    """
    podman = shutil.which("podman")
    if podman is None:
        return None, "podman is not installed (scripts/setup installs it)"
    if shutil.which("mmdebstrap") is None:
        return None, "mmdebstrap is not installed (scripts/setup installs it)"
    if os.geteuid() != 0:
        return None, "not root: the data dirs are handed to the image's user 10001 (rootful podman)"
    argv = [podman]
    if shutil.which("runc"):
        argv += ["--runtime", "runc"]
    argv += ["--cgroup-manager=cgroupfs"]
    info = subprocess.run([*argv, "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return None, f"podman info fails: {info.stderr.strip().splitlines()[-1:]}"
    return argv, None


def limit(name, which, at_most):
    """--ulimit NAME=N:N, N = this process's hard limit, at most `at_most`: podman's
    defaults exceed a hard open-files limit below them, and runc may not raise a limit
    above the one it runs with; either way the container fails to start."""
    hard = resource.getrlimit(which)[1]
    value = at_most if hard == resource.RLIM_INFINITY else min(hard, at_most)
    return f"{name}={value}:{value}"


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http(port, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def cluster_or_none(port):
    try:
        return http(port, "GET", "/v1/cluster")
    except (OSError, ValueError):
        return None


def wait(what, check, seconds=120):
    """Polls check() until it returns something true; fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def event(backend, first):
    return {"event_type": "stored", "model_name": "m", "block_size": 4, "backend_id": backend,
            "token_ids": list(range(first, first + 8))}


def held(port, first, consistency):
    got = http(port, "POST", "/query", {"model": "m", "token_ids": list(range(first, first + 8)),
                                        "block_size": 4, "consistency": consistency})
    return got.get("default", {})


class ImageCluster:
    """Three servers, each in a container of the image, on loopback ports."""

    def __init__(self, podman, image, root):
        self.podman = podman
        self.image = image
        self.root = root
        ports = free_ports(3 * SERVERS)
        self.http = ports[0:SERVERS]
        self.rpc = ports[SERVERS:2 * SERVERS]
        self.raft = ports[2 * SERVERS:]
        self.names = [f"kvatlas-test-{os.getpid()}-{i}" for i in range(SERVERS)]
        self.peers = ",".join(f"{i + 1}@127.0.0.1:{self.raft[i]}" for i in range(SERVERS))
        self.secret = os.path.join(root, "cluster.secret")
        with open(self.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret, 0o444)  # the image's user (10001) reads it
        self.tokens = os.path.join(root, "tokens")
        with open(self.tokens, "w") as f:
            f.write(f"test:admin:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
        os.chmod(self.tokens, 0o444)
        self.data = []
        for i in range(SERVERS):
            data = os.path.join(root, f"data-{i}")
            os.mkdir(data, 0o700)
            os.chown(data, 10001, 10001)
            self.data.append(data)

    def run(self, i):
        """Starts server i (ordinal i, raft id i+1) in a new container."""
        run = subprocess.run(
            [*self.podman, "run", "-d", "--name", self.names[i], "--hostname", f"kvatlas-{i}",
             "--network=host", "--ulimit", limit("nofile", resource.RLIMIT_NOFILE, 65536),
             "--ulimit", limit("nproc", resource.RLIMIT_NPROC, 4096),
             "-e", f"KVATLAS_INITIAL_MEMBERS={SERVERS}",
             "-v", f"{self.data[i]}:/var/lib/kvatlas",
             "-v", f"{self.secret}:/etc/kvatlas/cluster/cluster.secret:ro",
             "-v", f"{self.tokens}:/etc/kvatlas/api/tokens:ro",
             self.image,
             # After the entrypoint's derived flags (the last one wins): loopback ports,
             # since the containers share the host's network.
             "--peers", self.peers, "--raft-bind", f"127.0.0.1:{self.raft[i]}",
             "--http-listen", f"127.0.0.1:{self.http[i]}",
             "--rpc-listen", f"127.0.0.1:{self.rpc[i]}"],
            capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"podman run {self.names[i]}: {run.stderr.strip()}"

    def logs(self, i):
        out = subprocess.run([*self.podman, "logs", "--tail", "30", self.names[i]],
                             capture_output=True, text=True, timeout=60)
        return out.stdout + out.stderr

    def leader(self, among, not_id=0):
        """The raft id (not `not_id`) all of `among` (ordinals) agree is the leader, with
        every member known; None while they do not."""
        views = [cluster_or_none(self.http[i]) for i in among]
        if any(v is None or len(v["members"]) != SERVERS for v in views):
            return None
        ids = {v["leader_id"] for v in views}
        return ids.pop() if len(ids) == 1 and not ids & {0, not_id} else None

    def remove(self):
        for name in self.names:
            subprocess.run([*self.podman, "rm", "-f", "-t", "0", name], capture_output=True,
                           timeout=120)


def run_cluster(podman, server, cli):
    tag = f"localhost/kvatlas-test-{os.getpid()}:latest"
    started = time.monotonic()
    build = subprocess.run([os.path.join(ROOT, "scripts", "image"), "--server", server,
                            "--cli", cli, "--tag", tag], capture_output=True, text=True,
                           timeout=1800)
    print(build.stdout + build.stderr, end="")
    assert build.returncode == 0, "scripts/image failed"
    print(f"image built in {time.monotonic() - started:.1f} s (scripts/image, as the test ran it)")
    root = tempfile.mkdtemp(prefix="kvatlas-image-test-")
    cluster = ImageCluster(podman, tag, root)
    try:
        started = time.monotonic()
        for i in range(SERVERS):
            cluster.run(i)
        try:
            leader = wait("a leader all three servers know", lambda: cluster.leader(range(3)))
        except AssertionError:
            for i in range(SERVERS):
                print(f"--- {cluster.names[i]}:\n{cluster.logs(i)}")
            raise
        print(f"cluster from the image: leader {leader} in {time.monotonic() - started:.1f} s "
              f"after the first podman run")

        # The image's CLI, as compose.yaml's health check runs it.
        ready = subprocess.run([*podman, "exec", cluster.names[0], "kvatlas", "cluster", "ready",
                                "--http", f"127.0.0.1:{cluster.http[0]}"],
                               capture_output=True, text=True, timeout=60)
        assert ready.returncode == 0, ready.stdout + ready.stderr

        follower = next(i for i in range(SERVERS) if i + 1 != leader)
        other = next(i for i in range(SERVERS) if i + 1 != leader and i != follower)
        http(cluster.http[follower], "POST", "/v1/events", {"events": [event("w1", 0)]})
        got = held(cluster.http[other], 0, "linearizable")
        assert got["w1"]["GPU"] == 8, got
        print(f"a write through kvatlas-{follower} read on kvatlas-{other}")

        # Kill the leader's container; the two others elect a new leader.
        killed = leader - 1
        subprocess.run([*podman, "kill", cluster.names[killed]], check=True,
                       capture_output=True, timeout=60)
        state = subprocess.run([*podman, "inspect", "--format", "{{.State.Running}}",
                                cluster.names[killed]], capture_output=True, text=True,
                               timeout=60).stdout.strip()
        assert state == "false", state
        alive = [i for i in range(SERVERS) if i != killed]
        started = time.monotonic()
        # Until their election timeout the two others still name the killed leader.
        new_leader = wait("a new leader after the kill", lambda: cluster.leader(alive,
                                                                               not_id=leader))
        print(f"killed kvatlas-{killed} (leader {leader}); leader {new_leader} after "
              f"{time.monotonic() - started:.1f} s")
        http(cluster.http[new_leader - 1], "POST", "/v1/events", {"events": [event("w2", 100)]})
        got = held(cluster.http[alive[0]], 100, "linearizable")
        assert got["w2"]["GPU"] == 8, got

        # Every container gone (the two others stopped in order), then three new ones on
        # the same data dirs: what they serve comes from their volumes, the killed
        # server's included. (A member alone serves nothing: it applies its log once a
        # leader tells it what is committed.)
        assert os.listdir(cluster.data[killed]), "the killed server left nothing on its volume"
        for i in range(SERVERS):
            subprocess.run([*podman, "stop", "-t", "30", cluster.names[i]], check=True,
                           capture_output=True, timeout=120)
            subprocess.run([*podman, "rm", cluster.names[i]], check=True, capture_output=True,
                           timeout=60)
        started = time.monotonic()
        for i in range(SERVERS):
            cluster.run(i)
        wait("a leader all three restarted servers know", lambda: cluster.leader(range(3)))
        print(f"all three restarted on their volumes: leader after "
              f"{time.monotonic() - started:.1f} s")
        for i in range(SERVERS):
            wait(f"kvatlas-{i} to hold both writes",
                 lambda i=i: held(cluster.http[i], 0, "any").get("w1", {}).get("GPU") == 8 and
                 held(cluster.http[i], 100, "any").get("w2", {}).get("GPU") == 8)
        print("every server serves the write from before the kill and the one after")
    finally:
        cluster.remove()
        subprocess.run([*podman, "rmi", tag], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


def main():
    check_recipe()
    podman, reason = podman_command()
    if podman is None:
        print(f"SKIP running a cluster from the image: {reason}")
        sys.exit(77)
    server, cli = (os.path.abspath(a) for a in sys.argv[1:3])
    run_cluster(podman, server, cli)
    print("PASS container_test")


if __name__ == "__main__":
    main()
