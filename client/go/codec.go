package kvatlas

import (
	"fmt"
	"math"
)

// Payload codecs of docs/protocol.md §Messages, in wire order. Encoders write what the
// C++ codec (common/src/protocol_*.cc) writes, trailers only when needed, so that a
// request without them is the bytes older servers know.

// Message types (docs/protocol.md §Message types).
const (
	typeError      uint8 = 0
	typeIngest     uint8 = 1
	typeLookup     uint8 = 2
	typeLocate     uint8 = 3
	typeStats      uint8 = 4
	typePing       uint8 = 5
	typeRoute      uint8 = 6
	typeWatch      uint8 = 7
	typeSnapshot   uint8 = 8
	typeHeartbeat  uint8 = 9
	typeAuth       uint8 = 10
	typeLoadReport uint8 = 11
	typeLoadView   uint8 = 12
	typePredict    uint8 = 13
	typeDirectory  uint8 = 14
)

const (
	consistencyLinearizable uint8 = 0x01
	consistencyMinRevision  uint8 = 0x02
	maxWriterIDBytes              = 128
	maxTokenBytes                 = 1024
)

func putContext(e *encoder, c Context) {
	e.str(c.Tenant)
	e.str(c.Model)
	e.str(c.LoRA)
	e.varint(uint64(c.BlockSize))
	e.str(c.Salt)
}

func readContext(d *decoder) Context {
	return Context{Tenant: d.str("context.tenant_id"), Model: d.str("context.model_name"),
		LoRA: d.str("context.lora_name"), BlockSize: d.varint32("context.block_size"),
		Salt: d.str("context.additional_salt")}
}

func putHolder(e *encoder, h Holder) {
	e.str(h.BackendID)
	e.varint(uint64(h.DPRank))
}

func readHolder(d *decoder) Holder {
	return Holder{BackendID: d.str("holder.backend_id"), DPRank: d.varint32("holder.dp_rank")}
}

func readTier(d *decoder, field string) Tier {
	t := d.u8(field)
	if t > uint8(TierShared) {
		d.fail(field, fmt.Sprintf("%d is not a tier (0-3)", t))
	}
	return Tier(t)
}

func putStrings(e *encoder, list []string) {
	e.varint(uint64(len(list)))
	for _, s := range list {
		e.str(s)
	}
}

func readStrings(d *decoder, field string) []string {
	n := d.count(field, 1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str(field)
	}
	return out
}

func validWriterID(id string) bool {
	if len(id) == 0 || len(id) > maxWriterIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// checkEvents catches what the wire cannot carry, naming the event; the server checks the
// rest (ValidateBlockEvent) and names the field the same way.
func checkEvents(events []Event, writer *WriterPosition) error {
	for i, ev := range events {
		if ev.Type > EventCleared {
			return newError(CodeInvalidArgument, fmt.Sprintf("events[%d].type: %d is not an event type (0-2)", i, ev.Type))
		}
		if ev.Tier > TierShared {
			return newError(CodeInvalidArgument, fmt.Sprintf("events[%d].tier: %d is not a tier (0-3)", i, ev.Tier))
		}
		if ev.Origin > OriginReused {
			return newError(CodeInvalidArgument, fmt.Sprintf("events[%d].origin: %d is not an origin (0-2)", i, ev.Origin))
		}
		if ev.Timestamp != nil && (math.IsNaN(*ev.Timestamp) || math.IsInf(*ev.Timestamp, 0)) {
			return newError(CodeInvalidArgument, fmt.Sprintf("events[%d].timestamp: must be a finite number", i))
		}
	}
	if writer != nil {
		if !validWriterID(writer.ID) {
			return newError(CodeInvalidArgument, fmt.Sprintf("writer_id: %q must be 1-%d bytes of [A-Za-z0-9._:-]", writer.ID, maxWriterIDBytes))
		}
		if writer.Sequence == 0 {
			return newError(CodeInvalidArgument, "writer_sequence: must be at least 1")
		}
	}
	return nil
}

func eventFlags(ev *Event) uint8 {
	var f uint8
	if ev.Type == EventStored {
		f |= uint8(ev.Origin)
	}
	if ev.Type == EventCleared && ev.ClearHolder {
		f |= 0x04
	}
	return f
}

func encodeIngest(events []Event, writer *WriterPosition) []byte {
	// Sized once (an estimate from above for most batches): growing by appends copies the
	// batch several times.
	size := 160
	for i := range events {
		ev := &events[i]
		c := &ev.Context
		size += 96 + len(c.Tenant) + len(c.Model) + len(c.LoRA) + len(c.Salt) + len(ev.Holder.BackendID) +
			8*len(ev.SeqHashes) + 5*len(ev.TokenIDs) + 5*len(ev.Locations)
		for _, l := range ev.Locations {
			size += len(l)
		}
	}
	e := &encoder{b: make([]byte, 0, size)}
	e.varint(uint64(len(events)))
	flagged := false
	for i := range events {
		ev := &events[i]
		e.u8(uint8(ev.Type))
		e.flag(ev.EventID != nil)
		if ev.EventID != nil {
			e.u64(*ev.EventID)
		}
		e.flag(ev.Timestamp != nil)
		if ev.Timestamp != nil {
			e.f64(*ev.Timestamp)
		}
		putContext(e, ev.Context)
		putHolder(e, ev.Holder)
		e.flag(ev.Medium != nil)
		if ev.Medium != nil {
			e.str(*ev.Medium)
		}
		e.u8(uint8(ev.Tier))
		e.varint(uint64(len(ev.SeqHashes)))
		for _, h := range ev.SeqHashes {
			e.u64(h)
		}
		e.flag(ev.ParentHash != nil)
		if ev.ParentHash != nil {
			e.u64(*ev.ParentHash)
		}
		e.flag(ev.BaseBlockIdx != nil)
		if ev.BaseBlockIdx != nil {
			e.varint(uint64(*ev.BaseBlockIdx))
		}
		e.flag(ev.TokenIDs != nil)
		if ev.TokenIDs != nil {
			e.varint(uint64(len(ev.TokenIDs)))
			for _, t := range ev.TokenIDs {
				e.varint(uint64(t))
			}
		}
		putStrings(e, ev.Locations)
		flagged = flagged || eventFlags(ev) != 0
	}
	if writer != nil || flagged {
		e.flag(writer != nil)
		if writer != nil {
			e.str(writer.ID)
			e.varint(writer.Sequence)
		}
	}
	if flagged {
		e.varint(uint64(len(events)))
		for i := range events {
			e.u8(eventFlags(&events[i]))
		}
	}
	return e.b
}

func decodeIngestAnswer(p []byte) (IngestAnswer, error) {
	d := &decoder{b: p}
	a := IngestAnswer{Revision: d.u64("revision"), Events: d.varint("events"), Blocks: d.varint("blocks")}
	return a, d.finish()
}

func encodeLookup(r *LookupRequest) []byte {
	// Sized once: a lookup is on a router's hot path, and growing by appends copies.
	c := &r.Context
	e := &encoder{b: make([]byte, 0, 64+len(c.Tenant)+len(c.Model)+len(c.LoRA)+len(c.Salt)+
		8*len(r.Hashes)+5*len(r.Tokens)+len(r.Instance))}
	putContext(e, r.Context)
	byHash := r.Tokens == nil
	e.flag(byHash)
	if byHash {
		e.varint(uint64(len(r.Hashes)))
		for _, h := range r.Hashes {
			e.u64(h)
		}
	} else {
		e.varint(uint64(len(r.Tokens)))
		for _, t := range r.Tokens {
			e.varint(uint64(t))
		}
	}
	e.str(r.Instance)
	e.flag(r.IncludeLocations)
	var consistency uint8
	if r.Linearizable {
		consistency |= consistencyLinearizable
	}
	if r.MinRevision > 0 {
		consistency |= consistencyMinRevision
	}
	if consistency != 0 {
		e.u8(consistency)
		if r.MinRevision > 0 {
			e.varint(r.MinRevision)
		}
	}
	return e.b
}

func readTierBlocks(d *decoder) TierBlocks {
	return TierBlocks{GPU: d.varint32("gpu"), CPU: d.varint32("cpu"), Disk: d.varint32("disk"),
		CPUOnly: d.varint32("cpu_only"), DiskOnly: d.varint32("disk_only")}
}

func decodeLookupAnswer(p []byte) (LookupAnswer, error) {
	d := &decoder{b: p}
	a := LookupAnswer{Revision: d.u64("revision"), Context: readContext(d),
		BlocksQueried: d.varint32("blocks_queried"), BlocksFound: d.varint32("blocks_found")}
	if n := d.count("instances", 7); n > 0 {
		a.Instances = make([]InstanceMatch, n)
		for i := range a.Instances {
			in := &a.Instances[i]
			in.InstanceID = d.str("instances.instance_id")
			in.Blocks = readTierBlocks(d)
			if r := d.count("instances.dp_ranks", 6); r > 0 {
				in.DPRanks = make([]RankMatch, r)
				for j := range in.DPRanks {
					in.DPRanks[j] = RankMatch{DPRank: d.varint32("dp_ranks.dp_rank"), Blocks: readTierBlocks(d)}
				}
			}
		}
	}
	if n := d.count("shared", 4); n > 0 {
		a.Shared = make([]SharedMatch, n)
		for i := range a.Shared {
			a.Shared[i] = SharedMatch{BackendID: d.str("shared.backend_id"),
				DPRank: d.varint32("shared.dp_rank"), Blocks: d.varint32("shared.blocks"),
				Locations: readStrings(d, "shared.locations")}
		}
	}
	return a, d.finish()
}

func putCandidate(e *encoder, c *Candidate) {
	e.str(c.InstanceID)
	e.flag(c.DPRank != nil)
	if c.DPRank != nil {
		e.varint(uint64(*c.DPRank))
	}
	e.varint(c.QueuedPrefillTokens)
	e.varint(c.ActiveDecodeBlocks)
}

func readCandidate(d *decoder) Candidate {
	c := Candidate{InstanceID: d.str("candidate.instance_id")}
	if d.flag("candidate.dp_rank") {
		r := d.varint32("candidate.dp_rank")
		c.DPRank = &r
	}
	c.QueuedPrefillTokens = d.varint("candidate.queued_prefill_tokens")
	c.ActiveDecodeBlocks = d.varint("candidate.active_decode_blocks")
	return c
}

// The defaults of the kRoute trailers' fields (docs/protocol.md §kRoute), which
// DefaultRouteOptions gives: a request whose values are these leaves the trailer out.
const (
	defaultQueueScale         = 0.4
	defaultReplicaCredit      = 1.0
	defaultExcessQueueScale   = 0.7
	defaultExcessQueueEpsilon = 0.5
)

// usesCostTerms says whether a route carries the cost terms trailer: only when one of
// replica_credit, excess_queue_scale and excess_queue_epsilon is not the default.
func usesCostTerms(o *RouteOptions) bool {
	return o.ReplicaCredit != defaultReplicaCredit || o.ExcessQueueScale != defaultExcessQueueScale ||
		o.ExcessQueueEpsilon != defaultExcessQueueEpsilon
}

// usesApproximate says whether a route carries the approximate trailer (docs/protocol.md
// §kRoute): only when a candidate is flagged Predict or the PREDICTED weight is not the
// default, so that other requests keep the bytes older servers accept.
func usesApproximate(r *RouteRequest) bool {
	if r.Options != nil && r.Options.PredictedWeight != nil && *r.Options.PredictedWeight != 1.0 {
		return true
	}
	for i := range r.Candidates {
		if r.Candidates[i].Predict {
			return true
		}
	}
	return false
}

func encodeRoute(r *RouteRequest) []byte {
	e := &encoder{}
	e.bytes(encodeLookup(&r.Lookup))
	e.varint(uint64(len(r.Candidates)))
	for i := range r.Candidates {
		putCandidate(e, &r.Candidates[i])
	}
	o := DefaultRouteOptions()
	if r.Options != nil {
		o = *r.Options
	}
	for _, v := range []float64{o.Weights.GPU, o.Weights.CPU, o.Weights.Disk, o.Weights.Shared,
		o.PrefillScale, o.DecodeScale, o.Temperature} {
		e.f64(v)
	}
	e.flag(o.Seed != nil)
	if o.Seed != nil {
		e.u64(*o.Seed)
	}
	// Optional trailers, as the C++ client writes them, each written when it or a later one
	// is: queue_scale's; then approximate mode's (the PREDICTED weight and the indexes of
	// the candidates flagged Predict), or its flag 0x00 when only the cost terms follow;
	// then the cost terms' (replica_credit, excess_queue_scale, excess_queue_epsilon).
	approximate := usesApproximate(r)
	terms := usesCostTerms(&o)
	if o.QueueScale != defaultQueueScale || approximate || terms {
		e.flag(true)
		e.f64(o.QueueScale)
	}
	if !approximate && terms {
		e.flag(false)
	}
	if approximate {
		e.flag(true)
		predicted := 1.0
		if o.PredictedWeight != nil {
			predicted = *o.PredictedWeight
		}
		e.f64(predicted)
		var flagged []uint64
		for i := range r.Candidates {
			if r.Candidates[i].Predict {
				flagged = append(flagged, uint64(i))
			}
		}
		e.varint(uint64(len(flagged)))
		for _, i := range flagged {
			e.varint(i)
		}
	}
	if terms {
		e.flag(true)
		e.f64(o.ReplicaCredit)
		e.f64(o.ExcessQueueScale)
		e.f64(o.ExcessQueueEpsilon)
	}
	return e.b
}

func decodeRouteAnswer(p []byte) (RouteAnswer, error) {
	d := &decoder{b: p}
	a := RouteAnswer{Revision: d.u64("revision"), PromptBlocks: d.varint32("prompt_blocks"),
		BlocksFound: d.varint32("blocks_found")}
	if n := d.count("ranked", 70); n > 0 {
		a.Ranked = make([]ScoredCandidate, n)
		for i := range a.Ranked {
			s := &a.Ranked[i]
			s.Index = d.varint("ranked.index")
			s.Candidate = readCandidate(d)
			s.Matched = PrefixMatch{GPU: d.varint32("matched.gpu"), CPU: d.varint32("matched.cpu"),
				Disk: d.varint32("matched.disk"), Shared: d.varint32("matched.shared")}
			s.GPUBlocks = d.varint32("gpu_blocks")
			s.CPUBlocks = d.varint32("cpu_blocks")
			s.DiskBlocks = d.varint32("disk_blocks")
			s.SharedBlocks = d.varint32("shared_blocks")
			s.Credit = d.f64("credit")
			s.NewPrefillBlocks = d.f64("new_prefill_blocks")
			s.QueuedPrefillBlocks = d.f64("queued_prefill_blocks")
			s.PrefillCost = d.f64("prefill_cost")
			s.DecodeCost = d.f64("decode_cost")
			s.Cost = d.f64("cost")
			s.Probability = d.f64("probability")
		}
	}
	// The predicted trailer, answering a request that carried the approximate one: flag
	// 0x01, then per ranked candidate its predicted prefix and predicted blocks.
	if d.err == nil && d.off < len(d.b) {
		if d.flag("predicted") {
			for i := range a.Ranked {
				a.Ranked[i].Matched.Predicted = d.varint32("matched.predicted")
				a.Ranked[i].PredictedBlocks = d.varint32("predicted_blocks")
			}
		} else if d.err == nil {
			d.fail("predicted", "must be 0x01 when present")
		}
	}
	return a, d.finish()
}

func encodeLocate(key uint64, ctx *Context) []byte {
	e := &encoder{}
	e.u64(key)
	e.flag(ctx != nil)
	if ctx != nil {
		putContext(e, *ctx)
	}
	return e.b
}

func decodeLocateAnswer(p []byte) (LocateAnswer, error) {
	d := &decoder{b: p}
	a := LocateAnswer{Revision: d.u64("revision")}
	if n := d.count("copies", 20); n > 0 {
		a.Copies = make([]BlockCopy, n)
		for i := range a.Copies {
			a.Copies[i] = BlockCopy{Context: readContext(d), Holder: readHolder(d),
				Tier: readTier(d, "copies.tier"), Depth: d.varint32("copies.depth"),
				Refcount: d.varint32("copies.refcount"), EngineHash: d.u64("copies.engine_hash"),
				Location: d.str("copies.location")}
		}
	}
	return a, d.finish()
}

func decodeStatsAnswer(p []byte) (string, error) {
	d := &decoder{b: p}
	s := d.str("json")
	return s, d.finish()
}

func encodeAuth(token string) []byte {
	e := &encoder{}
	e.str(token)
	return e.b
}

// AuthInfo is what the server says about the token a connection presented.
type AuthInfo struct {
	Role Role
	Name string // the token's configured name; "anonymous" with access control off
}

func decodeAuthAnswer(p []byte) (AuthInfo, error) {
	d := &decoder{b: p}
	a := AuthInfo{Role: Role(d.u8("role")), Name: d.str("name")}
	if d.err == nil && (a.Role < RoleRead || a.Role > RoleAdmin) {
		d.fail("role", fmt.Sprintf("%d is not a role (1-3)", a.Role))
	}
	return a, d.finish()
}

func encodeHeartbeat(holders []Holder) []byte {
	e := &encoder{}
	e.varint(uint64(len(holders)))
	for _, h := range holders {
		putHolder(e, h)
	}
	return e.b
}

// HeartbeatAnswer says how many holders a heartbeat named and the server's lease TTL
// (0 = leases are off).
type HeartbeatAnswer struct {
	Holders    uint32
	TTLSeconds uint32
}

func decodeHeartbeatAnswer(p []byte) (HeartbeatAnswer, error) {
	d := &decoder{b: p}
	a := HeartbeatAnswer{Holders: d.varint32("holders"), TTLSeconds: d.varint32("ttl_seconds")}
	return a, d.finish()
}
