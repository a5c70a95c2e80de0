"""kvatlas: the Python client of the kvatlas KV-cache block map (docs/python.md).

A binding of the C++ client library (kvatlas::Client over the binary protocol, LocalIndex,
Scorer, BlockHasher, VllmBlockHasher): the same code the C++ clients and the server run, so a
Python router computes the same keys and the same route costs.

    import kvatlas
    ctx = kvatlas.Context("llama", 16)
    with kvatlas.Client(["127.0.0.1:7071"]) as client:
        keys = kvatlas.BlockHasher().sequence_hashes(tokens, 16)
        answer = client.lookup(ctx, hashes=keys)

Every failure raises kvatlas.Error, whose .code is the server's error code.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, Optional

from kvatlas._errors import Error
from kvatlas._kvatlas import (  # noqa: F401  (re-exported)
    DEFAULT_HASH_SEED,
    __version__,
    BlockCopy,
    BlockEvent,
    BlockHasher,
    Candidate,
    Context,
    ContextSnapshot,
    EventType,
    FeedFilter,
    FeedOp,
    FeedRecord,
    HeartbeatAnswer,
    Holder,
    IngestAnswer,
    InstanceMatch,
    LoadReporter,
    LocalIndex,
    LocalIndexContextStatus,
    LocalIndexStats,
    LocateAnswer,
    LookupAnswer,
    PredictedPrefix,
    PrefixMatch,
    RankMatch,
    RoutingAnswer,
    RoutingOptions,
    ScoredCandidate,
    Scorer,
    SharedMatch,
    SnapshotCopy,
    Tier,
    TierBlocks,
    TlsOptions,
    VllmBlockHasher,
    WatchStream,
    Writer,
    matches_from_lookup,
    tier_from_medium,
)
from kvatlas._kvatlas import Client as _Client

__all__ = [
    "AsyncClient", "BlockCopy", "BlockEvent", "BlockHasher", "Candidate", "Client", "Context",
    "ContextSnapshot", "DEFAULT_HASH_SEED", "Error", "EventType", "FeedFilter", "FeedOp",
    "FeedRecord", "HeartbeatAnswer", "Holder", "IngestAnswer", "InstanceMatch", "LoadReporter", "LocalIndex",
    "LocalIndexContextStatus", "LocalIndexStats", "LocateAnswer", "LookupAnswer",
    "PredictedPrefix", "PrefixMatch", "RankMatch",
    "RoutingAnswer", "RoutingOptions", "ScoredCandidate", "Scorer", "SharedMatch",
    "SnapshotCopy", "Tier", "TierBlocks", "TlsOptions", "VllmBlockHasher", "WatchStream",
    "Writer", "matches_from_lookup", "stored", "removed", "cleared", "tier_from_medium",
]

# Terminal watch errors after which watching again from resume_from continues the stream.
_RESUMABLE = frozenset({"unavailable", "watch_cut", "deadline_exceeded"})


class Client(_Client):
    """A connection to kvatlas servers over the binary protocol (docs/protocol.md).

    Client(endpoints, *, token="", tls=None, connect_timeout=1.0, deadline=5.0,
           connections=1, max_in_flight=1024, max_request_bytes=None)

    endpoints are "host:port" (the servers' rpc_listen), tried in order. token is the access
    token (docs/security.md); tls a TlsOptions. Timeouts are in seconds. Connecting raises
    Error (unavailable, unauthenticated, invalid_argument). Thread-safe: every call drops
    the GIL while it waits, so threads share one client.
    """

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stats(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The server's statistics, the document of GET /v1/stats, as a dict."""
        return json.loads(self.stats_json(timeout=timeout))

    def cluster_status(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The server's view of its raft cluster (GET /v1/cluster's document: id, state,
        leader_id, term, members, ...), from the "cluster" section of its statistics.
        Raises Error("unavailable") for a server that runs without replication."""
        stats = self.stats(timeout=timeout)
        cluster = stats.get("cluster")
        if cluster is None:
            raise Error("unavailable", 6, "this server runs without replication")
        return cluster

    def writer(self, writer_id: str, next_sequence: int = 1, **options: float) -> Writer:
        """An exactly-once Writer over this client (kvatlas.Writer)."""
        return Writer(self, writer_id, next_sequence, **options)

    def watch(self, *, from_revision: Optional[int] = None,
              filter: Optional[FeedFilter] = None,  # noqa: A002 (the protocol's name)
              reconnect: bool = True, retry_for: float = 30.0,
              max_queued_keys: int = 1_000_000) -> Iterator[FeedRecord]:
        """Iterates over the change feed's records after from_revision (or from now).

        With reconnect (the default) a stream that ends because the connection was lost,
        the server restarted or the stream fell behind (unavailable, watch_cut) is watched
        again from its last complete revision, so no record is missed or repeated; it gives
        up (raising the last Error) after retry_for seconds without a new stream. Any other
        end (compacted: snapshot, then watch from the snapshot's revision) raises Error.
        Closing the generator cancels the server's watch.
        """
        # The first stream starts now (not at the first next()), so that every change
        # applied after watch() returns is delivered.
        first = self._start_watch(from_revision, filter, max_queued_keys, reconnect, retry_for)
        return self._follow(first, filter, max_queued_keys, reconnect, retry_for)

    def _follow(self, stream: WatchStream, filter: Optional[FeedFilter],  # noqa: A002
                max_queued_keys: int, reconnect: bool,
                retry_for: float) -> Iterator[FeedRecord]:
        while True:
            try:
                for record in stream:
                    yield record
                return  # cancelled
            except Error as e:
                if not reconnect or e.code not in _RESUMABLE:
                    raise
            finally:
                stream.cancel()
            stream = self._start_watch(stream.resume_from, filter, max_queued_keys,
                                       reconnect, retry_for)

    def _start_watch(self, resume: Optional[int], filter: Optional[FeedFilter],  # noqa: A002
                     max_queued_keys: int, reconnect: bool, retry_for: float) -> WatchStream:
        deadline = time.monotonic() + retry_for
        pause = 0.02
        while True:
            try:
                return self.watch_stream(from_revision=resume, filter=filter,
                                         max_queued_keys=max_queued_keys)
            except Error as e:
                if not reconnect or e.code not in _RESUMABLE or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def stored(context: Context, holder: Any, seq_hashes: Any = None, **fields: Any) -> BlockEvent:
    """A stored event: `holder` (a Holder or an id) now has these blocks (seq_hashes, or
    token_ids=... hashed by the server; parent_hash=, medium=/tier=, locations=)."""
    return BlockEvent(EventType.STORED, context, holder, seq_hashes=seq_hashes, **fields)


def removed(context: Context, holder: Any, seq_hashes: Any, **fields: Any) -> BlockEvent:
    """A removed event: `holder` dropped these blocks."""
    return BlockEvent(EventType.REMOVED, context, holder, seq_hashes=seq_hashes, **fields)


def cleared(context: Context, holder: Any, **fields: Any) -> BlockEvent:
    """A cleared event: `holder` dropped every block (AllBlocksCleared)."""
    return BlockEvent(EventType.CLEARED, context, holder, **fields)


from kvatlas._aio import AsyncClient  # noqa: E402  (needs Client)
