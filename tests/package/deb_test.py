#!/usr/bin/python3
"""The Debian packages (docs/operations.md §Installing), built, installed and removed for real.

usage: deb_test.py BUILD_DIR

Runs cpack -G DEB on the build tree (cmake/Packaging.cmake), checks the three packages'
names, dependencies, contents, conffile and the systemd unit's paths, installs them with
dpkg -i, starts the installed /usr/bin/kvatlas-server as the packaged system user with the
packaged /etc/kvatlas/kvatlas.json on a temporary data directory (free loopback ports),
ingests and looks up through the installed /usr/bin/kvatlas, stops it (SIGTERM, exit 0),
then purges the packages and checks that nothing of them is left.

Skips (77) when not root, without dpkg, or when a kvatlas package is installed already
(it never touches an installation it did not make). Concurrent runs (two build presets)
take turns on a lock file.
"""

import fcntl
import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PACKAGES = ("kvatlas-server", "kvatlas-client", "kvatlas-dev")
LOCK = "/tmp/kvatlas-deb-test.lock"


def run(*argv, check=True, timeout=300, **kw):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and result.returncode != 0:
        raise AssertionError(f"{argv} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def installed(package):
    status = run("dpkg-query", "-W", "-f=${Status}", package, check=False)
    return status.returncode == 0 and "installed" in status.stdout and \
        "not-installed" not in status.stdout


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def build_packages(build_dir, out):
    run("cpack", "-G", "DEB", "--config", os.path.join(build_dir, "CPackConfig.cmake"), "-B", out,
        timeout=600)
    debs = {}
    for path in glob.glob(os.path.join(out, "*.deb")):
        name = run("dpkg-deb", "-f", path, "Package").stdout.strip()
        debs[name] = path
    assert sorted(debs) == sorted(PACKAGES), debs
    return debs


def check_packages(debs):
    server = debs["kvatlas-server"]
    fields = {f: run("dpkg-deb", "-f", server, f).stdout.strip()
              for f in ("Version", "Depends", "Architecture")}
    depends = fields["Depends"]
    # dpkg-shlibdeps found the libraries the server links, and the scripts need adduser.
    for needed in ("adduser", "librocksdb", "libzmq5", "libssl3", "libraft"):
        assert needed in depends, (needed, depends)
    contents = run("dpkg-deb", "-c", server).stdout
    for path in ("./usr/bin/kvatlas-server", "./usr/lib/systemd/system/kvatlas-server.service",
                 "./etc/kvatlas/kvatlas.json", "./usr/share/doc/kvatlas-server/operations.md"):
        assert path in contents, (path, contents)
    assert "./usr/bin/kvatlas\n" not in contents + "\n"
    with tempfile.TemporaryDirectory() as control:
        run("dpkg-deb", "-e", server, control)
        with open(os.path.join(control, "conffiles")) as f:
            assert f.read().split() == ["/etc/kvatlas/kvatlas.json"]
        for script in ("postinst", "prerm", "postrm"):
            assert os.access(os.path.join(control, script), os.X_OK), script
    client = run("dpkg-deb", "-c", debs["kvatlas-client"]).stdout
    assert "./usr/bin/kvatlas\n" in client, client
    assert "/libkvatlas.so.0" in client, client
    dev = run("dpkg-deb", "-c", debs["kvatlas-dev"]).stdout
    for path in ("/usr/include/kvatlas/client/client.h", "/kvatlasConfig.cmake", "/kvatlas.pc",
                 "/libkvatlas.a", "/libkvatlas.so "):
        assert path in dev, (path, dev)
    print(f"packages: {', '.join(sorted(debs))} {fields['Version']} ({fields['Architecture']}); "
          f"server depends: {depends}")


def check_installed():
    with open("/usr/lib/systemd/system/kvatlas-server.service") as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/kvatlas-server --config /etc/kvatlas/kvatlas.json" in unit, unit
    user = pwd.getpwnam("kvatlas")
    assert user.pw_dir == "/var/lib/kvatlas" and user.pw_uid < 1000, user
    state = os.stat("/var/lib/kvatlas")
    assert state.st_uid == user.pw_uid, state
    assert run("pkg-config", "--modversion", "kvatlas").stdout.strip()
    return user


def serve_and_query(user, tmp):
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    os.chown(data, user.pw_uid, user.pw_gid)
    os.chmod(tmp, 0o755)
    log = open(os.path.join(tmp, "server.log"), "w")
    server = subprocess.Popen(
        ["/usr/bin/kvatlas-server", "--config", "/etc/kvatlas/kvatlas.json", "--data-dir", data,
         "--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0"],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], stdout=log,
        stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        rpc = os.path.join(data, "rpc.addr")
        while not (os.path.exists(rpc) and os.path.getsize(rpc) > 0):
            assert server.poll() is None, open(log.name).read()
            assert time.time() < deadline, "the installed server did not start"
            time.sleep(0.1)
        with open(rpc) as f:
            at = f.read().strip()
        event = {"event_type": "stored", "model_name": "m", "block_size": 4,
                 "backend_id": "engine-a", "token_ids": list(range(1, 9))}
        run("/usr/bin/kvatlas", "--server", at, "ingest", "-", input=json.dumps(event) + "\n")
        got = run("/usr/bin/kvatlas", "--server", at, "lookup", "--model", "m", "--block-size",
                  "4", "--tokens", ",".join(str(t) for t in range(1, 9)), "--json").stdout
        answer = json.loads(got)
        assert "engine-a" in json.dumps(answer), answer
        print(f"installed server at {at}: ingested and looked up: {got.strip()}")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, open(log.name).read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def purge(user_existed):
    run("dpkg", "--purge", *PACKAGES)
    for path in ("/usr/bin/kvatlas-server", "/usr/bin/kvatlas", "/etc/kvatlas/kvatlas.json",
                 "/usr/lib/systemd/system/kvatlas-server.service", "/var/lib/kvatlas",
                 "/usr/include/kvatlas"):
        assert not os.path.exists(path), f"{path} is left after dpkg --purge"
    # Debian keeps a package's system user; this test made it, so it removes it.
    if not user_existed:
        run("userdel", "kvatlas", check=False)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build_dir = sys.argv[1]
    if os.geteuid() != 0:
        skip("dpkg -i needs root")
    for tool in ("dpkg", "cpack", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (scripts/setup installs dpkg-dev)")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        present = [p for p in PACKAGES if installed(p)]
        if present:
            skip(f"{', '.join(present)} installed already; not touching it")
        user_existed = True
        try:
            pwd.getpwnam("kvatlas")
        except KeyError:
            user_existed = False
        with tempfile.TemporaryDirectory(prefix="kvatlas-deb-") as tmp:
            debs = build_packages(build_dir, os.path.join(tmp, "out"))
            check_packages(debs)
            run("dpkg", "-i", *debs.values())
            try:
                user = check_installed()
                serve_and_query(user, tmp)
            finally:
                purge(user_existed)
    print("PASS deb_test")


if __name__ == "__main__":
    main()
