#!/usr/bin/python3
"""The container entrypoint computes a server's id and peers from its host name.

usage: entrypoint_test.py KVATLAS_SERVER_BINARY

deploy/container/entrypoint.sh in its dry-run mode (KVATLAS_DRY_RUN=1) prints the argv it
would exec; each case checks it exactly. Then it is run for real with the server on PATH
and --print-config, so the server itself parses what the entrypoint passes.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRYPOINT = os.path.join(ROOT, "deploy", "container", "entrypoint.sh")
DOMAIN = "kvatlas-peers.prod.svc.cluster.local"
VOTERS = (f"1@kvatlas-0.{DOMAIN}:7072,2@kvatlas-1.{DOMAIN}:7072,"
          f"3@kvatlas-2.{DOMAIN}:7072")


def run(hostname, *args, path="/usr/bin:/bin", dry=True, **env):
    full = {"PATH": path, "HOSTNAME": hostname, **env}
    if dry:
        full["KVATLAS_DRY_RUN"] = "1"
    return subprocess.run(["/bin/sh", ENTRYPOINT, *args], env=full, capture_output=True,
                          text=True, timeout=30)


def argv(hostname, *args, **env):
    result = run(hostname, *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def main():
    server = os.path.abspath(sys.argv[1])
    base = ["kvatlas-server", "--config", "/etc/kvatlas/kvatlas.json"]

    # A StatefulSet pod: ordinal 2 is raft id 3, one of the three initial voters.
    got = argv("kvatlas-2", KVATLAS_PEER_DOMAIN=DOMAIN)
    assert got == base + ["--id", "3", "--peers", VOTERS, "--raft-bind", "0.0.0.0:7072"], got

    # Ordinal 0 with the compose layout (no domain), another port, the caller's arguments
    # last (the server takes the last value of a flag).
    got = argv("kvatlas-0", "--log-level", "debug", KVATLAS_RAFT_PORT="7100",
               KVATLAS_CONFIG="/c.json")
    assert got == ["kvatlas-server", "--config", "/c.json", "--id", "1", "--peers",
                   "1@kvatlas-0:7100,2@kvatlas-1:7100,3@kvatlas-2:7100", "--raft-bind",
                   "0.0.0.0:7100", "--log-level", "debug"], got

    # Scaled to 5: ordinal 4 is not an initial voter, so it joins at its own address.
    got = argv("kvatlas-4", KVATLAS_PEER_DOMAIN=DOMAIN)
    assert got == base + ["--id", "5", "--peers", VOTERS, "--raft-bind", "0.0.0.0:7072",
                          "--raft-listen", f"kvatlas-4.{DOMAIN}:7072"], got

    # Five initial voters; a name with dashes; a leading zero.
    got = argv("kv-atlas-07", KVATLAS_INITIAL_MEMBERS="5")
    assert got[3:6] == ["--id", "8", "--peers"], got
    assert argv("kvatlas-09")[3:5] == ["--id", "10"]
    assert argv("kvatlas-00")[3:5] == ["--id", "1"]
    assert got[6] == ",".join(f"{i + 1}@kv-atlas-{i}:7072" for i in range(5)), got
    assert got[-2:] == ["--raft-listen", "kv-atlas-7:7072"], got

    # Refused, exit 2, with the reason.
    for hostname, env, why in (
            ("kvatlas", {}, 'host name "kvatlas" is not NAME-ORDINAL'),
            ("kvatlas-x", {}, 'host name "kvatlas-x" is not NAME-ORDINAL'),
            ("-1", {}, 'host name "-1" is not NAME-ORDINAL'),
            ("kvatlas-1", {"KVATLAS_INITIAL_MEMBERS": "0"}, "must be a positive integer"),
            ("kvatlas-1", {"KVATLAS_RAFT_PORT": "x"}, "must be a port number")):
        result = run(hostname, **env)
        assert result.returncode == 2 and why in result.stderr, (hostname, result)

    # shellcheck (scripts/setup installs it) keeps the script POSIX and clean.
    if shutil.which("shellcheck"):
        check = subprocess.run(["shellcheck", ENTRYPOINT], capture_output=True, text=True,
                               timeout=30)
        assert check.returncode == 0, check.stdout

    # For real: the server is exec'd with these flags and accepts them.
    with tempfile.TemporaryDirectory(prefix="kvatlas-entrypoint-") as tmp:
        os.symlink(os.path.abspath(server), os.path.join(tmp, "kvatlas-server"))
        config = os.path.join(tmp, "kvatlas.json")
        with open(config, "w") as f:
            json.dump({"data_dir": os.path.join(tmp, "data"), "http_listen": "0.0.0.0:7070",
                       "cluster_id": "c", "cluster_secret_file": "/etc/kvatlas/c.secret",
                       "token_file": "/etc/kvatlas/api/tokens"}, f)
        for hostname, raft_listen in (("kvatlas-1", ""), ("kvatlas-3", f"kvatlas-3.{DOMAIN}:7072")):
            result = run(hostname, "--print-config", path=tmp + ":/usr/bin:/bin", dry=False,
                         KVATLAS_PEER_DOMAIN=DOMAIN, KVATLAS_CONFIG=config)
            assert result.returncode == 0, result.stderr
            effective = json.loads(result.stdout)
            assert effective["id"] == int(hostname[-1]) + 1
            assert effective["peers"] == VOTERS
            assert effective["raft_bind"] == "0.0.0.0:7072"
            assert effective["raft_listen"] == raft_listen
    print("PASS entrypoint_test")


if __name__ == "__main__":
    main()
