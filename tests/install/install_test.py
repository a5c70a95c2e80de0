#!/usr/bin/python3
"""The installed client library as other projects consume it (docs/abi.md).

usage: install_test.py BUILD_DIR SOURCE_DIR WORK_DIR KVATLAS_SERVER_BINARY CC CXX GENERATOR [SANITIZER]

Installs the build's `client` and `dev` components into WORK_DIR/prefix, checks what was
installed (the SONAME, the exported symbols, headers free of Boost), starts a real
kvatlas-server on free loopback ports, and against it runs, built outside the tree with the
compilers' default settings (no -std flag):
  1. a C++ project using find_package(kvatlas) with kvatlas::client (static) and
     kvatlas::client_shared (libkvatlas.so), and client/examples/ as documented;
  2. a C program built with `pkg-config kvatlas` (shared) and `pkg-config --static` (the
     archive, with system libraries shared, and fully static), and client/examples/ built
     with `pkg-config kvatlas` as C++20;
  3. a Python ctypes program that opens libkvatlas.so.0 and ingests and looks up.
Under a sanitizer build the installed libraries are instrumented, so the consumers are
compiled with the same -fsanitize flags and the ctypes program runs with the ASan runtime
preloaded (Python itself is not instrumented). Every step is bounded in time; a failure
prints the failed command's output and the server's log tail.
"""

import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from zmq_ingest_test import Server  # noqa: E402 - the real-server harness

STEP_TIMEOUT_S = 120


def run(*args, env=None, what=None):
    cmd = [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=STEP_TIMEOUT_S)
    if p.returncode != 0:
        raise AssertionError(f"{what or 'command'} failed ({p.returncode}): {' '.join(cmd)}\n"
                             f"{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p.stdout


def needed(binary):
    """The DT_NEEDED entries of an ELF file."""
    return re.findall(r"\(NEEDED\).*\[(.*)\]", run("readelf", "-d", binary))


def check_installed(prefix):
    lib = os.path.join(prefix, "lib")
    for f in ["include/kvatlas/client/client.h", "include/kvatlas/client/c_api.h",
              "include/kvatlas/common/export.h", "include/kvatlas/common/protocol.h",
              "lib/libkvatlas.a", "lib/libkvatlas.so", "lib/cmake/kvatlas/kvatlasConfig.cmake",
              "lib/pkgconfig/kvatlas.pc"]:
        assert os.path.exists(os.path.join(prefix, f)), f"not installed: {f}"
    # The linker name points at the SONAME, which points at the versioned file.
    assert os.readlink(os.path.join(lib, "libkvatlas.so")) == "libkvatlas.so.0"
    so = os.path.join(lib, "libkvatlas.so.0")
    assert re.match(r"libkvatlas\.so\.0\.\d+\.\d+$", os.readlink(so)), os.readlink(so)
    dynamic = run("readelf", "-d", so)
    assert "Library soname: [libkvatlas.so.0]" in dynamic, dynamic

    # Asio stays an implementation detail: no installed header may include Boost.
    for root, _, files in os.walk(os.path.join(prefix, "include")):
        for name in files:
            with open(os.path.join(root, name)) as f:
                assert "#include <boost/" not in f.read(), f"{name} includes Boost"

    # Exported: every function of the C ABI and the public C++ classes; nothing else.
    symbols = run("nm", "-D", "--defined-only", "-C", so).splitlines()
    names = {line.split(" ", 2)[2] for line in symbols if len(line.split(" ", 2)) == 3}
    with open(os.path.join(prefix, "include/kvatlas/client/c_api.h")) as f:
        c_functions = set(re.findall(r"\b(kvatlas_[a-z_]+)\(", f.read()))
    missing = sorted(c_functions - names)
    assert not missing, f"C ABI functions not exported: {missing}"
    for wanted in ["kvatlas::Client::Connect(", "kvatlas::LocalIndex::Start(",
                   "kvatlas::Scorer::Create(", "kvatlas::Writer::Write(",
                   "kvatlas::BlockHasher::SequenceHashes(", "kvatlas::Status::ToString[",
                   "kvatlas::protocol::FrameDecoder::Next("]:
        assert any(n.startswith(wanted) for n in names), f"not exported: {wanted}"
    # Nothing but the C ABI and kvatlas's own C++ API: no Boost.Asio, nlohmann_json or
    # standard-library instantiation, no implementation class.
    leaked = sorted(n for n in names if not re.match(r"kvatlas_|kvatlas::", n) or re.search(
        r"^kvatlas::[A-Za-z:]*(::Impl::|::State::)|^kvatlas::(internal|detail)::", n))
    assert not leaked, f"internal symbols exported: {leaked[:20]}"
    print(f"installed: libkvatlas.so.0 exports {len(names)} symbols "
          f"({len(c_functions)} C ABI functions)", flush=True)


def build_cxx(source, build, prefix, generator, cxx, san_flags, targets):
    run("cmake", "-S", source, "-B", build, "-G", generator, f"-DCMAKE_PREFIX_PATH={prefix}",
        f"-DCMAKE_CXX_COMPILER={cxx}", f"-DCMAKE_CXX_FLAGS={' '.join(san_flags)}",
        what=f"configuring {source}")
    run("cmake", "--build", build, "--target", *targets, what=f"building {source}")


def main():
    build_dir, source_dir, work, server_binary, cc, cxx, generator = sys.argv[1:8]
    sanitizer = sys.argv[8] if len(sys.argv) > 8 else ""
    san_flags = [f"-fsanitize={sanitizer}"] if sanitizer else []
    shutil.rmtree(work, ignore_errors=True)
    prefix = os.path.join(work, "prefix")
    for component in ["client", "dev"]:
        run("cmake", "--install", build_dir, "--prefix", prefix, "--component", component,
            what=f"installing component {component}")
    check_installed(prefix)
    lib = os.path.join(prefix, "lib")

    os.makedirs(os.path.join(work, "server"))
    server = Server(server_binary, data_dir=os.path.join(work, "server"))
    try:
        with open(os.path.join(server.data_dir, "rpc.addr")) as f:
            endpoint = f.read().strip()

        # 1. CMake: find_package(kvatlas), static and shared.
        cxx_build = os.path.join(work, "cxx")
        build_cxx(os.path.join(HERE, "cxx_consumer"), cxx_build, prefix, generator, cxx,
                  san_flags, ["consumer_static", "consumer_shared"])
        static_exe = os.path.join(cxx_build, "consumer_static")
        shared_exe = os.path.join(cxx_build, "consumer_shared")
        assert not any("kvatlas" in n for n in needed(static_exe)), needed(static_exe)
        assert "libkvatlas.so.0" in needed(shared_exe), needed(shared_exe)
        print(run(static_exe, endpoint, "cxx-static", what="consumer_static"), end="")
        print(run(shared_exe, endpoint, "cxx-shared", what="consumer_shared"), end="")
        example_build = os.path.join(work, "example")
        build_cxx(os.path.join(source_dir, "client", "examples"), example_build, prefix,
                  generator, cxx, san_flags, ["route_example"])
        print(run(os.path.join(example_build, "route_example"), endpoint, what="route_example"),
              end="")

        # 2. pkg-config, from C: shared, and --static (the archive and its dependencies).
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))
        cflags = run("pkg-config", "--cflags", "kvatlas", env=env).split()
        shared_libs = run("pkg-config", "--libs", "kvatlas", env=env).split()
        static_libs = run("pkg-config", "--static", "--libs", "kvatlas", env=env).split()
        source = os.path.join(HERE, "c_consumer.c")
        c_shared = os.path.join(work, "c_consumer_shared")
        run(cc, *san_flags, source, *cflags, *shared_libs, f"-Wl,-rpath,{lib}", "-o", c_shared,
            what="C build with pkg-config --libs")
        assert "libkvatlas.so.0" in needed(c_shared), needed(c_shared)
        print(run(c_shared, endpoint, "c-shared", what="c_consumer_shared"), end="")
        # C++ with the same flags (and the standard, which pkg-config cannot carry).
        route_pc = os.path.join(work, "route_example_pc")
        run(cxx, "-std=c++20", *san_flags, os.path.join(source_dir, "client", "examples",
                                                         "route_example.cc"),
            *cflags, *shared_libs, f"-Wl,-rpath,{lib}", "-o", route_pc,
            what="C++ build with pkg-config --libs")
        assert "libkvatlas.so.0" in needed(route_pc), needed(route_pc)
        print(run(route_pc, endpoint, what="route_example (pkg-config)"), end="")
        # The archive with the system libraries shared (-l:libkvatlas.a names the archive
        # where -lkvatlas would find the .so first), and a fully static program (-static),
        # which cannot carry a sanitizer runtime.
        archive_libs = ["-l:libkvatlas.a" if f == "-lkvatlas" else f for f in static_libs]
        static_builds = [("c-archive", archive_libs, [])]
        if sanitizer:
            print(f"SKIP the fully static C build: -static cannot link the {sanitizer} "
                  "sanitizer runtime", flush=True)
        else:
            static_builds.append(("c-static", static_libs, ["-static"]))
        for holder, libs, extra in static_builds:
            exe = os.path.join(work, f"c_consumer_{holder}")
            run(cc, *san_flags, *extra, source, *cflags, *libs, "-o", exe,
                what=f"C build ({holder}) with pkg-config --static --libs")
            assert not any("kvatlas" in n for n in needed(exe)), needed(exe)
            print(run(exe, endpoint, holder, what=exe), end="")

        # 3. ctypes: the shared library from an uninstrumented Python. An ASan-instrumented
        # library needs the ASan runtime loaded first; Python's own allocations at exit are
        # not ours to report.
        py_env = dict(os.environ)
        if "address" in sanitizer:
            asan = run(cc, "-print-file-name=libasan.so").strip()
            py_env["LD_PRELOAD"] = asan
            py_env["ASAN_OPTIONS"] = "detect_leaks=0"
        print(run("/usr/bin/python3", os.path.join(HERE, "ctypes_consumer.py"),
                  os.path.join(lib, "libkvatlas.so.0"), endpoint, "ctypes", env=py_env,
                  what="ctypes_consumer"), end="")
    except Exception:
        print("server log tail:\n" + server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()
    shutil.rmtree(work, ignore_errors=True)
    print("install test: ok")


if __name__ == "__main__":
    main()
