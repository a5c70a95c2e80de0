#!/usr/bin/python3
"""The container image recipe and the compose cluster (docs/operations.md §Containers).

usage: container_test.py [KVATLAS_SERVER_BINARY (not used: the image builds its own)]

Always: the Containerfile is Debian 12, installs what scripts/setup installs by running it
(no package of its list is repeated in the Containerfile), runs as a non-root user, makes
the data dir a volume, and starts the entrypoint; compose.yaml has three servers whose
service names are their host names (NAME-ORDINAL, for the entrypoint), each with its own
volume on the data dir and the cluster secret where the image's config reads it.

Where a container engine (podman or docker) answers and the debian:12 base image is
present locally: builds the image, starts the compose cluster, waits for a leader on the
first server's published REST port, writes through a follower and reads it back, and takes
the cluster down. Elsewhere that part is skipped (exit 77) with the reason.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONTAINER = os.path.join(ROOT, "deploy", "container")


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
    repeated = [p for p in setup_packages() if p in words and p not in ("cmake", "git")]
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
    print("recipe and compose file: checked")


def engine():
    """(the engine's path, None) where one can build and run here, else (None, why not)."""
    reason = "no container engine (podman, docker) installed"
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if path is None:
            continue
        info = subprocess.run([path, "info"], capture_output=True, text=True, timeout=30)
        if info.returncode != 0:
            reason = f"{name} cannot reach its engine ({info.stderr.strip().splitlines()[-1:]})"
            continue
        image = subprocess.run([path, "image", "inspect", "docker.io/library/debian:12"],
                               capture_output=True, timeout=30)
        if image.returncode != 0:
            reason = f"{name} works but the debian:12 base image is not present"
            continue
        return path, None
    return None, reason


TOKEN = "kvt_" + os.urandom(24).hex()


def http(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def build_and_run(path):
    subprocess.run([path, "build", "-f", os.path.join(CONTAINER, "Containerfile"), "-t",
                    "kvatlas-server:latest", ROOT], check=True, timeout=3600)
    secret = os.path.join(CONTAINER, "cluster.secret")
    with open(secret, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(secret, 0o444)
    tokens = os.path.join(CONTAINER, "tokens")
    with open(tokens, "w") as f:
        f.write(f"test:admin:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    os.chmod(tokens, 0o444)
    compose = [path, "compose", "-f", os.path.join(CONTAINER, "compose.yaml"), "-p",
               "kvatlas-test"]
    try:
        subprocess.run([*compose, "up", "-d"], check=True, timeout=300)
        deadline = time.time() + 60
        while True:
            try:
                cluster = http("GET", "http://127.0.0.1:7070/v1/cluster")
                if cluster["leader_id"] and len(cluster["members"]) == 3:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "the compose cluster elected no leader"
            time.sleep(1)
        event = {"event_type": "stored", "model_name": "m", "block_size": 4, "backend_id": "w",
                 "token_ids": list(range(8))}
        http("POST", "http://127.0.0.1:7170/v1/events", {"events": [event]})
        got = http("POST", "http://127.0.0.1:7270/query",
                   {"model": "m", "token_ids": list(range(8)), "block_size": 4,
                    "consistency": "linearizable"})
        assert got["default"]["w"]["GPU"] == 8, got
        print("compose cluster: leader elected, a write through kvatlas-1 read on kvatlas-2")
    finally:
        subprocess.run([*compose, "down", "-v"], timeout=300)
        os.remove(secret)
        os.remove(tokens)


def main():
    check_recipe()
    path, reason = engine()
    if path is None:
        print(f"SKIP building and running the image: {reason}")
        sys.exit(77)
    build_and_run(path)
    print("PASS container_test")


if __name__ == "__main__":
    main()
