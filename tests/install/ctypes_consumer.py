#!/usr/bin/python3
"""The ctypes consumer of install_test.py: what a Python scheduler does with the C ABI
(kvatlas/client/c_api.h) and nothing but the installed shared library.

usage: ctypes_consumer.py LIBKVATLAS_SO HOST:PORT HOLDER

Opens the library, checks a refused connection's error, ingests a 3-block chain for HOLDER
and looks it up. Exit 0 when every check passed.
"""

import ctypes
import json
import sys

OK, INVALID_ARGUMENT, UNAVAILABLE = 0, 1, 6


class TlsOptions(ctypes.Structure):
    _fields_ = [("ca_file", ctypes.c_char_p), ("cert_file", ctypes.c_char_p),
                ("key_file", ctypes.c_char_p), ("server_name", ctypes.c_char_p)]


class OpenOptions(ctypes.Structure):
    _fields_ = [("endpoints", ctypes.c_char_p), ("timeout_ms", ctypes.c_int64),
                ("token", ctypes.c_char_p), ("tls", ctypes.POINTER(TlsOptions))]


class Context(ctypes.Structure):
    _fields_ = [("tenant", ctypes.c_char_p), ("model", ctypes.c_char_p),
                ("lora_name", ctypes.c_char_p), ("block_size", ctypes.c_uint32),
                ("salt", ctypes.c_char_p)]


class InstanceMatch(ctypes.Structure):
    _fields_ = [("instance_id", ctypes.c_char_p)] + [
        (name, ctypes.c_uint32) for name in ("longest", "gpu", "cpu", "disk", "cpu_only",
                                             "disk_only")]


class SharedMatch(ctypes.Structure):
    _fields_ = [("backend_id", ctypes.c_char_p), ("dp_rank", ctypes.c_uint32),
                ("blocks", ctypes.c_uint32), ("num_locations", ctypes.c_size_t),
                ("locations", ctypes.POINTER(ctypes.c_char_p))]


class LookupResult(ctypes.Structure):
    _fields_ = [("revision", ctypes.c_uint64), ("blocks_queried", ctypes.c_uint32),
                ("blocks_found", ctypes.c_uint32), ("num_instances", ctypes.c_size_t),
                ("instances", ctypes.POINTER(InstanceMatch)), ("num_shared", ctypes.c_size_t),
                ("shared", ctypes.POINTER(SharedMatch))]


class IngestResult(ctypes.Structure):
    _fields_ = [("revision", ctypes.c_uint64), ("events", ctypes.c_uint64),
                ("blocks", ctypes.c_uint64)]


def load(path):
    lib = ctypes.CDLL(path)
    p = ctypes.POINTER
    handle, error = ctypes.c_void_p, ctypes.c_void_p
    signatures = {
        "kvatlas_open_with": (ctypes.c_int, [p(OpenOptions), p(handle), p(error)]),
        "kvatlas_close": (None, [handle]),
        "kvatlas_error_code": (ctypes.c_int, [error]),
        "kvatlas_error_message": (ctypes.c_char_p, [error]),
        "kvatlas_error_free": (None, [error]),
        "kvatlas_code_name": (ctypes.c_char_p, [ctypes.c_int]),
        "kvatlas_ingest_json": (ctypes.c_int, [handle, ctypes.c_char_p, ctypes.c_size_t,
                                               p(IngestResult), p(error)]),
        "kvatlas_lookup_hashes": (ctypes.c_int, [handle, p(Context), p(ctypes.c_uint64),
                                                 ctypes.c_size_t, p(p(LookupResult)),
                                                 p(error)]),
        "kvatlas_free_lookup_result": (None, [p(LookupResult)]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def check(lib, code, err, what):
    if code != OK:
        message = lib.kvatlas_error_message(err).decode()
        lib.kvatlas_error_free(err)
        raise SystemExit(f"ctypes_consumer: {what}: {lib.kvatlas_code_name(code).decode()}: "
                         f"{message}")


def main():
    path, endpoint, holder = sys.argv[1], sys.argv[2], sys.argv[3]
    lib = load(path)
    err = ctypes.c_void_p()
    client = ctypes.c_void_p()

    # A refused connection is an error value with a message, not a crash.
    dead = OpenOptions(b"127.0.0.1:1", 1000, None, None)
    code = lib.kvatlas_open_with(ctypes.byref(dead), ctypes.byref(client), ctypes.byref(err))
    assert code == UNAVAILABLE and lib.kvatlas_error_code(err) == UNAVAILABLE, code
    assert b"127.0.0.1:1" in lib.kvatlas_error_message(err), lib.kvatlas_error_message(err)
    lib.kvatlas_error_free(err)

    options = OpenOptions(endpoint.encode(), 5000, None, None)
    check(lib, lib.kvatlas_open_with(ctypes.byref(options), ctypes.byref(client),
                                     ctypes.byref(err)), err, "open")
    try:
        keys = [0x1001, 0x1002, 0x1003]
        events = json.dumps([{"event_type": "stored", "model_name": "install-test",
                              "block_size": 4, "backend_id": holder, "medium": "GPU",
                              "seq_hashes": keys}]).encode()
        ack = IngestResult()
        check(lib, lib.kvatlas_ingest_json(client, events, len(events), ctypes.byref(ack),
                                           ctypes.byref(err)), err, "ingest")
        assert ack.events == 1 and ack.blocks == 3, (ack.events, ack.blocks)

        context = Context(None, b"install-test", None, 4, None)
        hashes = (ctypes.c_uint64 * len(keys))(*keys)
        result = ctypes.POINTER(LookupResult)()
        check(lib, lib.kvatlas_lookup_hashes(client, ctypes.byref(context), hashes, len(keys),
                                             ctypes.byref(result), ctypes.byref(err)),
              err, "lookup")
        r = result.contents
        mine = [r.instances[i] for i in range(r.num_instances)
                if r.instances[i].instance_id == holder.encode()]
        ok = r.blocks_found == 3 and len(mine) == 1 and mine[0].gpu == 3
        print(f"ctypes_consumer {holder}: revision {r.revision}, {r.blocks_found} blocks found")
        lib.kvatlas_free_lookup_result(result)
        assert ok, "lookup: the holder does not hold the 3 GPU blocks"
    finally:
        lib.kvatlas_close(client)


if __name__ == "__main__":
    main()
