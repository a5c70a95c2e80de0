#!/usr/bin/python3
"""Linearizability and change-feed checker of a 3-server cluster under faults.

usage: consistency_test.py KVATLAS_SERVER_BINARY [--duration S] [--nemesis kill,pause,...]
                           [--clients N] [--seed X] [...]   (--help lists every option)
       consistency_test.py --self-test          the checker on known histories, no server
       consistency_test.py --check-only FILE    check a history written by --history

Concurrent clients over REST and the binary protocol store and remove copies of a few block
keys and read them linearizably while a nemesis kills, pauses, partitions and fills the disk
of servers; the history is checked for linearizability (Wing–Gong–Lowe search per key) and
against every server's change feed. Skips the partition and disk faults, saying why, where
it is not root. What it checks and its limits: docs/consistency.md. Code:
tests/fault/consistency/. Every process, namespace, mount and directory it creates is
removed at the end.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from consistency import run  # noqa: E402 - after the path above

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanups
    sys.exit(run.main(sys.argv[1:]))
