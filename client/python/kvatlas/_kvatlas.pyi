"""Type stubs of kvatlas._kvatlas, the C++ extension (client/python/src/)."""

import enum
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from kvatlas._errors import Error as Error

# Token ids / block keys: a sequence of ints, or a 1-D buffer of unsigned ints of the width.
Ints = Union[Sequence[int], memoryview, Any]
ExtraKey = Union[str, int, bytes, Tuple[str, int]]

DEFAULT_HASH_SEED: int
# "0.1.0": the version of the build (cmake/version.h.in).
__version__: str

class Tier(enum.Enum):
    GPU: int
    CPU: int
    DISK: int
    SHARED: int

def tier_from_medium(medium: str) -> Tier: ...

class Context:
    model: str
    block_size: int
    tenant: str
    lora_name: str
    salt: str
    def __init__(self, model: str, block_size: int, *, tenant: str = "default",
                 lora_name: str = "", salt: str = "") -> None: ...
    def __hash__(self) -> int: ...

class Holder:
    id: str
    dp_rank: int
    def __init__(self, id: str, dp_rank: int = 0) -> None: ...

HolderLike = Union[Holder, str]

class TierBlocks:
    gpu: int
    cpu: int
    disk: int
    cpu_only: int
    disk_only: int

class RankMatch:
    dp_rank: int
    blocks: TierBlocks

class InstanceMatch:
    instance_id: str
    blocks: TierBlocks
    dp_ranks: List[RankMatch]

class SharedMatch:
    backend_id: str
    dp_rank: int
    blocks: int
    locations: List[str]

class PredictedPrefix:
    instance_id: str
    dp_rank: int
    blocks: int

class LookupAnswer:
    revision: int
    context: Context
    blocks_queried: int
    blocks_found: int
    instances: List[InstanceMatch]
    shared: List[SharedMatch]
    predicted: List[PredictedPrefix]  # a LocalIndex with predictions=True fills it
    def instance(self, instance_id: str) -> Optional[InstanceMatch]: ...

class Candidate:
    instance_id: str
    dp_rank: Optional[int]
    queued_prefill_tokens: int
    active_decode_blocks: int
    predict: bool
    def __init__(self, instance_id: str, *, dp_rank: Optional[int] = None,
                 queued_prefill_tokens: int = 0, active_decode_blocks: int = 0,
                 predict: bool = False) -> None: ...

class PrefixMatch:
    gpu: int
    cpu: int
    disk: int
    shared: int
    predicted: int
    def __init__(self, *, gpu: int = 0, cpu: int = 0, disk: int = 0, shared: int = 0) -> None: ...

class RoutingOptions:
    gpu: float
    cpu: float
    disk: float
    shared: float
    predicted: float
    prefill_scale: float
    queue_scale: float
    decode_scale: float
    replica_credit: float
    excess_queue_scale: float
    excess_queue_epsilon: float
    temperature: float
    seed: Optional[int]
    def __init__(self, *, gpu: float = 1.0, cpu: float = 0.75, disk: float = 0.25,
                 shared: float = 0.5, predicted: float = 1.0, prefill_scale: float = 1.0,
                 queue_scale: float = 0.4, decode_scale: float = 0.01,
                 replica_credit: float = 1.0, excess_queue_scale: float = 0.7,
                 excess_queue_epsilon: float = 0.5, temperature: float = 0.0,
                 seed: Optional[int] = None) -> None: ...

class ScoredCandidate:
    index: int
    candidate: Candidate
    instance_id: str
    matched: PrefixMatch
    gpu_blocks: int
    cpu_blocks: int
    disk_blocks: int
    shared_blocks: int
    predicted_blocks: int
    credit: float
    new_prefill_blocks: float
    queued_prefill_blocks: float
    prefill_cost: float
    decode_cost: float
    cost: float
    probability: float

class RoutingAnswer:
    revision: int
    prompt_blocks: int
    blocks_found: int
    ranked: List[ScoredCandidate]
    pick: str

class EventType(enum.Enum):
    STORED: int
    REMOVED: int
    CLEARED: int

class BlockEvent:
    type: EventType
    context: Context
    holder: Holder
    seq_hashes: List[int]
    parent_hash: Optional[int]
    token_ids: Optional[List[int]]
    medium: Optional[str]
    tier: Tier
    locations: List[str]
    # Stored: "new" (a new copy, the default) or "reused" (a re-report: no new reference).
    origin: Optional[str]
    # Cleared: "context" (the default) or "holder" (every context of the holder).
    scope: str
    def __init__(self, type: EventType, context: Context, holder: HolderLike, *,
                 seq_hashes: Optional[Ints] = None, parent_hash: Optional[int] = None,
                 token_ids: Optional[Ints] = None, medium: Optional[str] = None,
                 tier: Optional[Tier] = None, locations: List[str] = ...,
                 base_block_idx: Optional[int] = None, event_id: Optional[int] = None,
                 timestamp: Optional[float] = None, origin: Optional[str] = None,
                 scope: str = "context") -> None: ...

class IngestAnswer:
    revision: int
    events: int
    blocks: int

class HeartbeatAnswer:
    holders: int
    ttl_seconds: int

class BlockCopy:
    context: Context
    holder: Holder
    tier: Tier
    depth: int
    refcount: int
    engine_hash: int
    location: str

class LocateAnswer:
    revision: int
    copies: List[BlockCopy]

class SnapshotCopy:
    key: int
    copy: BlockCopy

class ContextSnapshot:
    revision: int
    context: Context
    copies: List[SnapshotCopy]

class FeedOp(enum.Enum):
    STORED: int
    REMOVED: int
    CLEARED: int
    EVICTED: int
    EXPIRED: int
    PREDICTED: int

class FeedRecord:
    revision: int
    op: FeedOp
    context: Context
    holder: Holder
    tier: Tier
    keys: List[int]
    locations: List[str]
    expires_at_ms: int  # PREDICTED records only (0 otherwise)

class FeedFilter:
    tenant: Optional[str]
    model: Optional[str]
    lora_name: Optional[str]
    block_size: Optional[int]
    salt: Optional[str]
    holder_id: Optional[str]
    dp_rank: Optional[int]
    tier: Optional[Tier]
    predicted: bool
    def __init__(self, *, tenant: Optional[str] = None, model: Optional[str] = None,
                 lora_name: Optional[str] = None, block_size: Optional[int] = None,
                 salt: Optional[str] = None, holder_id: Optional[str] = None,
                 dp_rank: Optional[int] = None, tier: Optional[Tier] = None,
                 predicted: bool = False) -> None: ...
    @staticmethod
    def for_context(context: Context) -> FeedFilter: ...

class LocalIndexStats:
    revision: int
    synced: bool
    staleness: float
    blocks: int
    copies: int
    memory_bytes: int
    records_applied: int
    snapshots_loaded: int
    watch_resumes: int
    predicted_entries: int
    predicted_dropped: int
    state: str  # connecting | loading_snapshot | synced | retrying
    last_error_code: str  # "" when no attempt failed since the last sync
    last_error: str

class LocalIndexContextStatus:
    context: Context
    state: str  # connecting | loading_snapshot | synced | retrying
    snapshot_revision: int
    snapshot_copies: int
    buffered_records: int
    buffered_bytes: int
    buffered_through: int
    failures: int
    last_error_code: str  # "" when no attempt failed since the context's last sync
    last_error: str

class BlockHasher:
    seed: int
    def __init__(self, seed: int = ...) -> None: ...
    def local_hash(self, tokens: Ints) -> int: ...
    def chain(self, parent: int, local: int) -> int: ...
    def sequence_hashes(self, tokens: Ints, block_size: int,
                        parent: Optional[int] = None) -> List[int]: ...
    def local_hashes(self, tokens: Ints, block_size: int) -> List[int]: ...
    def chain_locals(self, locals: Ints, parent: Optional[int] = None) -> List[int]: ...

class VllmBlockHasher:
    none_hash: bytes
    def __init__(self, python_hash_seed: str) -> None: ...
    def hash_block(self, parent: bytes, tokens: Ints,
                   extra: Optional[Sequence[ExtraKey]] = None) -> bytes: ...
    def block_digests(self, tokens: Ints, block_size: int, *, lora_name: str = "",
                      cache_salt: str = "",
                      mm_keys: Optional[Sequence[Sequence[ExtraKey]]] = None,
                      trailing_keys: Optional[Sequence[Sequence[ExtraKey]]] = None
                      ) -> List[bytes]: ...
    def block_hashes(self, tokens: Ints, block_size: int, *, lora_name: str = "",
                     cache_salt: str = "",
                     mm_keys: Optional[Sequence[Sequence[ExtraKey]]] = None,
                     trailing_keys: Optional[Sequence[Sequence[ExtraKey]]] = None
                     ) -> List[int]: ...
    @staticmethod
    def project(digest: bytes) -> int: ...

class Scorer:
    options: RoutingOptions
    def __init__(self, options: Optional[RoutingOptions] = None) -> None: ...
    def score(self, prompt_blocks: int, block_size: int, candidates: List[Candidate],
              matches: List[PrefixMatch]) -> List[ScoredCandidate]: ...
    def rank(self, lookup: LookupAnswer, candidates: List[Candidate], *,
             prompt_tokens: Optional[int] = None,
             prompt_blocks: Optional[int] = None) -> RoutingAnswer: ...

def matches_from_lookup(lookup: LookupAnswer,
                        candidates: List[Candidate]) -> List[PrefixMatch]: ...

class TlsOptions:
    enabled: bool
    ca_file: str
    cert_file: str
    key_file: str
    server_name: str
    def __init__(self, *, ca_file: str = "", cert_file: str = "", key_file: str = "",
                 server_name: str = "") -> None: ...

class WatchStream:
    resume_from: int
    def next(self, timeout: float = 1.0) -> List[FeedRecord]: ...
    def cancel(self) -> None: ...
    def __iter__(self) -> Iterator[FeedRecord]: ...
    def __next__(self) -> FeedRecord: ...
    def __enter__(self) -> WatchStream: ...
    def __exit__(self, *args: Any) -> None: ...

class Client:
    open_connections: int
    def __init__(self, endpoints: List[str], *, token: str = "",
                 tls: Optional[TlsOptions] = None, connect_timeout: float = 1.0,
                 deadline: float = 5.0, connections: int = 1, max_in_flight: int = 1024,
                 max_request_bytes: Optional[int] = None,
                 route_by_directory: bool = True) -> None: ...
    def close(self) -> None: ...
    def lookup(self, context: Context, *, tokens: Optional[Ints] = None,
               hashes: Optional[Ints] = None, instance_id: str = "",
               include_locations: bool = True, min_revision: Optional[int] = None,
               linearizable: bool = False, timeout: Optional[float] = None) -> LookupAnswer: ...
    def route(self, context: Context, candidates: List[Candidate], *,
              tokens: Optional[Ints] = None, hashes: Optional[Ints] = None,
              options: Optional[RoutingOptions] = None,
              timeout: Optional[float] = None) -> RoutingAnswer: ...
    def ingest(self, events: List[BlockEvent], *, writer_id: Optional[str] = None,
               sequence: Optional[int] = None,
               timeout: Optional[float] = None) -> IngestAnswer: ...
    def heartbeat(self, holders: List[HolderLike], *,
                  timeout: Optional[float] = None) -> HeartbeatAnswer: ...
    def record_prediction(self, context: Context, holder: HolderLike, hashes: Ints, *,
                          timeout: Optional[float] = None) -> int: ...
    def stats_json(self, *, timeout: Optional[float] = None) -> str: ...
    def fetch_loads(self, *, timeout: Optional[float] = None) -> Dict[str, Any]: ...
    def fill_loads(self, candidates: List[Candidate], block_size: int, *,
                   timeout: Optional[float] = None) -> List[Candidate]: ...
    def snapshot(self, context: Context, *, timeout: Optional[float] = None) -> ContextSnapshot: ...
    def locate(self, key: int, context: Optional[Context] = None, *,
               timeout: Optional[float] = None) -> LocateAnswer: ...
    def ping(self, *, timeout: Optional[float] = None) -> None: ...
    def watch_stream(self, *, from_revision: Optional[int] = None,
                     filter: Optional[FeedFilter] = None, max_queued_keys: int = 1000000,
                     timeout: Optional[float] = None) -> WatchStream: ...

class Writer:
    writer_id: str
    next_sequence: int
    has_pending: bool
    def __init__(self, client: Client, writer_id: str, next_sequence: int = 1, *,
                 retry_for: float = 10.0, call_deadline: float = 2.0,
                 backoff_min: float = 0.01, backoff_max: float = 0.5) -> None: ...
    def write(self, events: List[BlockEvent]) -> IngestAnswer: ...
    def settle(self) -> None: ...

class LoadReporter:
    reports_sent: int
    def __init__(self, client: Client, router_id: str, *, interval_s: float = 0.01,
                 ttl_ms: int = 2000) -> None: ...
    def route_started(self, instance_id: str, dp_rank: int, prompt_blocks: int,
                      decode_blocks: int) -> int: ...
    def prefill_done(self, token: int) -> None: ...
    def route_finished(self, token: int) -> None: ...
    def flush(self) -> None: ...
    def summary(self) -> List[Dict[str, Any]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "LoadReporter": ...
    def __exit__(self, *args: Any) -> None: ...

class LocalIndex:
    revision: int
    def __init__(self, endpoints: List[str], contexts: List[Context], *, token: str = "",
                 tls: Optional[TlsOptions] = None, connect_timeout: float = 1.0,
                 deadline: float = 5.0, retry_backoff_min: float = 0.05,
                 retry_backoff_max: float = 2.0, max_lookup_blocks: int = 8192,
                 predictions: bool = False, max_predicted_entries: int = 1000000) -> None: ...
    def wait_synced(self, timeout: float = 10.0) -> None: ...
    def wait_for_revision(self, revision: int, timeout: float = 10.0) -> None: ...
    def lookup(self, context: Context, hashes: Optional[Ints] = None, *,
               tokens: Optional[Ints] = None, instance_id: str = "") -> LookupAnswer: ...
    def stats(self) -> LocalIndexStats: ...
    def context_status(self) -> List[LocalIndexContextStatus]: ...
    def close(self) -> None: ...
    def __enter__(self) -> LocalIndex: ...
    def __exit__(self, *args: Any) -> None: ...
