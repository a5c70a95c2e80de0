"""kvatlas.AsyncClient: the Client for asyncio gateways.

Each call runs the blocking Client call on a thread of the AsyncClient's own executor; the
C++ call drops the GIL while it waits, so the event loop keeps running and concurrent calls
are pipelined on the client's connections. Results and errors (kvatlas.Error) are those of
Client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence

import kvatlas


class AsyncClient:
    """AsyncClient(endpoints, *, max_workers=16, **client_options)

    `await AsyncClient.connect(...)` connects without blocking the loop; the constructor
    connects at once. Methods mirror Client's: lookup, route, ingest, heartbeat, stats,
    fetch_loads, fill_loads, cluster_status, snapshot, locate, ping, write (through a
    Writer), and watch (an async iterator). max_workers bounds the calls waiting at once
    (each holds a thread).
    """

    def __init__(self, endpoints: Sequence[str], *, max_workers: int = 16,
                 _client: Optional["kvatlas.Client"] = None, **options: Any) -> None:
        self._client = _client if _client is not None else kvatlas.Client(list(endpoints),
                                                                          **options)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="kvatlas-async")

    @classmethod
    async def connect(cls, endpoints: Sequence[str], *, max_workers: int = 16,
                      **options: Any) -> "AsyncClient":
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(
            None, functools.partial(kvatlas.Client, list(endpoints), **options))
        return cls(endpoints, max_workers=max_workers, _client=client)

    @property
    def client(self) -> "kvatlas.Client":
        """The underlying blocking Client (for LocalIndex-free synchronous use)."""
        return self._client

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(fn, *args, **kwargs))

    async def lookup(self, context: "kvatlas.Context", **kwargs: Any) -> "kvatlas.LookupAnswer":
        return await self._run(self._client.lookup, context, **kwargs)

    async def route(self, context: "kvatlas.Context", candidates: List["kvatlas.Candidate"],
                    **kwargs: Any) -> "kvatlas.RoutingAnswer":
        return await self._run(self._client.route, context, candidates, **kwargs)

    async def ingest(self, events: List["kvatlas.BlockEvent"],
                     **kwargs: Any) -> "kvatlas.IngestAnswer":
        return await self._run(self._client.ingest, events, **kwargs)

    async def write(self, writer: "kvatlas.Writer",
                    events: List["kvatlas.BlockEvent"]) -> "kvatlas.IngestAnswer":
        """writer.write(events) off the loop (a Writer serializes its batches)."""
        return await self._run(writer.write, events)

    async def heartbeat(self, holders: List[Any], **kwargs: Any) -> "kvatlas.HeartbeatAnswer":
        return await self._run(self._client.heartbeat, holders, **kwargs)

    async def record_prediction(self, context: "kvatlas.Context", holder: Any, hashes: Any,
                                **kwargs: Any) -> int:
        return await self._run(self._client.record_prediction, context, holder, hashes, **kwargs)

    async def stats(self, **kwargs: Any) -> Dict[str, Any]:
        return await self._run(self._client.stats, **kwargs)

    async def fetch_loads(self, **kwargs: Any) -> Dict[str, Any]:
        return await self._run(self._client.fetch_loads, **kwargs)

    async def fill_loads(self, candidates: List["kvatlas.Candidate"], block_size: int,
                         **kwargs: Any) -> List["kvatlas.Candidate"]:
        return await self._run(self._client.fill_loads, candidates, block_size, **kwargs)

    async def cluster_status(self, **kwargs: Any) -> Dict[str, Any]:
        return await self._run(self._client.cluster_status, **kwargs)

    async def snapshot(self, context: "kvatlas.Context",
                       **kwargs: Any) -> "kvatlas.ContextSnapshot":
        return await self._run(self._client.snapshot, context, **kwargs)

    async def locate(self, key: int, context: Optional["kvatlas.Context"] = None,
                     **kwargs: Any) -> "kvatlas.LocateAnswer":
        return await self._run(self._client.locate, key, context, **kwargs)

    async def ping(self, **kwargs: Any) -> None:
        await self._run(self._client.ping, **kwargs)

    async def watch(self, **kwargs: Any) -> AsyncIterator["kvatlas.FeedRecord"]:
        """Client.watch as an async iterator; each record is awaited on the executor."""
        it = self._client.watch(**kwargs)
        done = object()
        try:
            while True:
                record = await self._run(next, it, done)
                if record is done:
                    return
                yield record
        finally:
            try:
                await self._run(it.close)
            except ValueError:
                pass  # a next() still running on the executor: it ends with the stream

    async def close(self) -> None:
        await self._run(self._client.close)
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
