package kvatlas

// Tier is where a copy of a block lives.
type Tier uint8

const (
	TierGPU    Tier = 0
	TierCPU    Tier = 1
	TierDisk   Tier = 2
	TierShared Tier = 3
)

func (t Tier) String() string {
	switch t {
	case TierGPU:
		return "GPU"
	case TierCPU:
		return "CPU"
	case TierDisk:
		return "DISK"
	case TierShared:
		return "SHARED"
	}
	return "tier(?)"
}

// Context is a hash namespace (docs/api.md §Conventions). An empty Tenant is "default".
type Context struct {
	Tenant    string
	Model     string
	LoRA      string // empty = the base model
	BlockSize uint32
	Salt      string // additional_salt
}

// Holder is an instance (backend) and its data-parallel rank.
type Holder struct {
	BackendID string
	DPRank    uint32
}

// EventType is the kind of an RFC #1527 KV event.
type EventType uint8

const (
	EventStored  EventType = 0
	EventRemoved EventType = 1
	EventCleared EventType = 2
)

// Origin of a stored event's blocks (docs/engine-events.md §Report modes).
type Origin uint8

const (
	OriginNone   Origin = 0
	OriginNew    Origin = 1
	OriginReused Origin = 2
)

// Event is one KV event of an ingest batch, as POST /v1/events takes it. Pointer fields
// are optional (nil = absent).
type Event struct {
	Type      EventType
	EventID   *uint64  // per-stream sequence number (informational)
	Timestamp *float64 // publisher clock (informational); must be finite
	Context   Context
	Holder    Holder
	Medium    *string // the publisher's medium string; Tier must match what it maps to
	Tier      Tier
	// Stored: the blocks' rolling hashes; removed: the hashes to remove.
	SeqHashes    []uint64
	ParentHash   *uint64  // stored: the hash of the block before SeqHashes[0]
	BaseBlockIdx *uint32  // depth of the first block
	TokenIDs     []uint32 // stored: the tokens of all blocks (the server hashes them)
	Locations    []string // stored: empty, or one per block
	Origin       Origin   // stored events only
	// Cleared events only: clear every context of the holder ("scope": "holder").
	ClearHolder bool
}

// WriterPosition identifies a batch for exactly-once application (docs/api.md §Idempotent
// writes): a resent batch with the same ID and Sequence, once applied, changes nothing.
type WriterPosition struct {
	ID       string // 1..128 bytes of [A-Za-z0-9._:-]
	Sequence uint64 // >= 1, increasing per ID
}

// IngestAnswer is the answer to an ingest, sent once the batch is applied and written.
type IngestAnswer struct {
	Revision uint64 // the revision the batch was applied at
	Events   uint64
	Blocks   uint64
}

// LookupRequest asks for the longest cached prefix per instance and tier. With Tokens
// non-nil the server hashes the tokens (only complete blocks count); otherwise Hashes are
// the block keys.
type LookupRequest struct {
	Context Context
	Hashes  []uint64
	Tokens  []uint32
	// Report only this instance (all its ranks); empty = all.
	Instance string
	// Report per-block locations of shared-backend matches.
	IncludeLocations bool
	// Read consistency (docs/api.md): Linearizable reads go through the leader (the client
	// follows not_leader as for writes); MinRevision > 0 waits until the server has
	// applied that revision.
	Linearizable bool
	MinRevision  uint64
}

// TierBlocks are block counts per tier: GPU <= CPU <= Disk are cumulative prefixes
// (GPU, GPU∪CPU, GPU∪CPU∪DISK); CPUOnly and DiskOnly per medium alone.
type TierBlocks struct {
	GPU, CPU, Disk, CPUOnly, DiskOnly uint32
}

// RankMatch is one data-parallel rank's match.
type RankMatch struct {
	DPRank uint32
	Blocks TierBlocks
}

// InstanceMatch is one instance's match, with its ranks (ascending).
type InstanceMatch struct {
	InstanceID string
	Blocks     TierBlocks
	DPRanks    []RankMatch
}

// SharedMatch is a shared backend's match.
type SharedMatch struct {
	BackendID string
	DPRank    uint32
	Blocks    uint32
	Locations []string
}

// PredictedPrefix is a prefix predicted on an instance's rank (approximate mode,
// docs/routing.md §Approximate mode): the leading blocks of the query that a route or a
// router's RecordPrediction sent there, not known from its events.
type PredictedPrefix struct {
	InstanceID string
	DPRank     uint32
	Blocks     uint32
}

// LookupAnswer is the answer of a lookup (the REST /v1/lookup answer).
type LookupAnswer struct {
	Revision      uint64
	Context       Context
	BlocksQueried uint32
	BlocksFound   uint32
	Instances     []InstanceMatch // longest match first, then by id
	Shared        []SharedMatch
	// The query's predicted prefixes (blocks > 0), by instance then rank: filled by a
	// LocalIndex with Predictions on; a server's lookup answers none (its routes read
	// predictions themselves). MatchesFromLookup credits them.
	Predicted []PredictedPrefix
}

// TierWeights weigh cached blocks per tier in the routing cost (each 0..1).
type TierWeights struct {
	GPU, CPU, Disk, Shared float64
}

// DefaultTierWeights are the server's defaults (docs/routing.md).
var DefaultTierWeights = TierWeights{GPU: 1.0, CPU: 0.75, Disk: 0.25, Shared: 0.5}

// RouteOptions are the cost model's knobs (docs/routing.md). DefaultRouteOptions gives
// the server's defaults; start from it; a literal leaves out what it does not name (0).
type RouteOptions struct {
	Weights      TierWeights
	PrefillScale float64 // weight of the request's new prefill blocks (0 … 1e6)
	QueueScale   float64 // weight of the candidate's queued prefill blocks (0 … 1e6)
	DecodeScale  float64 // weight of the candidate's active decode blocks (0 … 1e6)
	// ReplicaCredit (0 … 1; default 1) credits a candidate for the blocks past its own
	// prefix that busy candidates hold: each block that m of the N candidates hold while
	// their queued prefill work is above the candidates' mean is credited
	// ReplicaCredit·m/N (a copy made now of a prefix whose holders are busy serves later
	// requests). 0 = off, as in a RouteOptions literal that leaves it out.
	ReplicaCredit float64
	// ExcessQueueScale (0 … 1e6; default 0.7) weighs, on top of QueueScale, the
	// candidate's queued prefill blocks above (1 + ExcessQueueEpsilon) × the candidates'
	// mean. 0 = off, as in a RouteOptions literal that leaves it out.
	ExcessQueueScale float64
	// ExcessQueueEpsilon (0 … 1e6; default 0.5): how far above the mean a queue may be
	// before ExcessQueueScale weighs it. A literal that leaves it out has 0.
	ExcessQueueEpsilon float64
	Temperature        float64 // 0 = lowest cost first
	Seed               *uint64 // the sampler's seed; nil = random
	// PredictedWeight is the credit of a predicted block (the PREDICTED weight, 0 … 1;
	// docs/routing.md §Approximate mode); nil = the default, 1. A pointer so that
	// RouteOptions literals written before it keep the default.
	PredictedWeight *float64
}

// DefaultRouteOptions returns the defaults of POST /v1/route.
func DefaultRouteOptions() RouteOptions {
	return RouteOptions{Weights: DefaultTierWeights, PrefillScale: 1.0, QueueScale: defaultQueueScale,
		DecodeScale: 0.01, ReplicaCredit: defaultReplicaCredit,
		ExcessQueueScale: defaultExcessQueueScale, ExcessQueueEpsilon: defaultExcessQueueEpsilon}
}

// Candidate is an instance the router may pick.
type Candidate struct {
	InstanceID          string
	DPRank              *uint32
	QueuedPrefillTokens uint64
	ActiveDecodeBlocks  uint64
	// Predict marks an instance that publishes no KV events (approximate mode,
	// docs/routing.md §Approximate mode): when Client.Route picks it, the server records the
	// request's blocks as predicted on it for a while, and later routes credit them
	// (ScoredCandidate.PredictedBlocks). It travels in the request only; the candidates of
	// an answer leave it false. LocalIndex.Route records nothing: a router deciding in its
	// own process records its pick with Client.RecordPrediction.
	Predict bool
}

// RouteRequest is a routing decision's input: the lookup (its Instance and
// IncludeLocations are ignored), the candidates (1..65,536) and the options. A nil
// Options means DefaultRouteOptions().
type RouteRequest struct {
	Lookup     LookupRequest
	Candidates []Candidate
	Options    *RouteOptions
}

// PrefixMatch is a candidate's cached prefix in blocks: GPU <= CPU <= Disk cumulative,
// Shared from shared backends. Predicted is the candidate's predicted prefix (approximate
// mode), set in Client.Route answers to requests with the approximate trailer (a Predict
// candidate or a PredictedWeight of its own) and by MatchesFromLookup from a LocalIndex
// with Predictions on; ScoreCandidates credits it past Disk (weighed by
// RouteOptions.PredictedWeight), as the server does.
type PrefixMatch struct {
	GPU, CPU, Disk, Shared uint32
	Predicted              uint32
}

// ScoredCandidate is one candidate with its cost breakdown (docs/api.md §Routing).
type ScoredCandidate struct {
	Index     uint64 // position in the request's candidate list
	Candidate Candidate
	Matched   PrefixMatch
	// Blocks served from each tier (non-overlapping).
	GPUBlocks, CPUBlocks, DiskBlocks, SharedBlocks uint32
	// Blocks credited as predicted (approximate mode: past Disk, before Shared), in
	// Client.Route answers to requests with a Predict candidate and in ScoreCandidates'
	// answers to matches with Predicted set; 0 otherwise.
	PredictedBlocks                               uint32
	Credit, NewPrefillBlocks, QueuedPrefillBlocks float64
	PrefillCost, DecodeCost, Cost, Probability    float64
}

// RouteAnswer ranks the candidates, the pick first.
type RouteAnswer struct {
	Revision     uint64
	PromptBlocks uint32
	BlocksFound  uint32
	Ranked       []ScoredCandidate
}

// BlockCopy is one copy of a block (kLocate).
type BlockCopy struct {
	Context    Context
	Holder     Holder
	Tier       Tier
	Depth      uint32
	Refcount   uint32
	EngineHash uint64
	Location   string
}

// LocateAnswer lists every copy of one block key.
type LocateAnswer struct {
	Revision uint64
	Copies   []BlockCopy
}

// Role is what a token may do (docs/security.md §Tokens and roles).
type Role uint8

const (
	RoleRead  Role = 1
	RoleWrite Role = 2
	RoleAdmin Role = 3
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return "role(?)"
}
