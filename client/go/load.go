package kvatlas

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"sync"
	"time"
)

// Shared in-flight load of a router fleet (docs/routing.md §Shared load; the C++
// common/include/kvatlas/common/fleet_load.h). Each router replica reports its own
// in-flight table as an absolute summary (ReportLoad, binary kLoadReport; LoadReporter
// keeps the table and sends it), which replaces its previous report and counts until its
// lease runs out. A server's route fills the load of candidates that give none from the
// live reports; a scheduler scoring in its own process (LocalIndex, ScoreCandidates) does
// the same with the reports it fetched (FetchLoads, FetchLoadsInto, FillLoads) and a
// FleetLoadTable.

// The bounds of a report, the server's (docs/api.md §Shared load): they are checked before
// anything is sent, so that a bad report fails here naming its field.
const (
	// MaxLoadEntries is the most entries one report holds (more: ErrPayloadTooLarge).
	MaxLoadEntries = 10_000
	// MaxLoadRouters is the most routers whose reports a server keeps (a report of a new
	// router past it is refused with ErrResourceExhausted); a FleetLoadTable keeps as many.
	MaxLoadRouters = 1_024
	// MinLoadTTLMs and MaxLoadTTLMs bound a report's lease.
	MinLoadTTLMs = 100
	MaxLoadTTLMs = 600_000
	// DefaultLoadTTLMs is the lease of a report whose TTLMs is 0 (as POST /v1/load's
	// default).
	DefaultLoadTTLMs = 2_000
	// MaxLoadBlocks bounds each load number (2^48 blocks: far past any real queue, small
	// enough that MaxLoadRouters reports summed cannot overflow).
	MaxLoadBlocks uint64 = 1 << 48

	maxLoadNameBytes = 256 // router and instance ids (the server's kMaxNameBytes)
)

// InstanceLoad is what one router has in flight on one instance's data-parallel rank.
type InstanceLoad struct {
	InstanceID    string // 1..256 bytes
	DPRank        uint32
	PrefillBlocks uint64 // prompt blocks routed there and not yet prefilled (≤ MaxLoadBlocks)
	DecodeBlocks  uint64 // KV blocks of requests routed there and still decoding (≤ MaxLoadBlocks)
}

// LoadReport is a router's absolute summary: it replaces the router's previous one. No
// loads = nothing in flight (a router that stops sends one to leave at once instead of
// after its lease).
type LoadReport struct {
	RouterID string // 1..256 bytes, unique per router replica
	// The lease: the report counts this long after the leader accepted it, 100..600,000;
	// 0 = DefaultLoadTTLMs (2,000).
	TTLMs uint32
	Loads []InstanceLoad // at most MaxLoadEntries, one per (instance, rank)
}

// LoadReportAnswer is the leader's answer to a report.
type LoadReportAnswer struct {
	Revision    uint64 // the report's revision
	ExpiresAtMs uint64 // its lease's end, Unix ms on the leader's clock
}

// LoadView is the live reports as the answering server sees them (GET /v1/load's
// routers).
type LoadView struct {
	Revision uint64 // the server's applied revision
	Routers  []LoadViewRouter
}

// LoadViewRouter is one router's live report in a LoadView.
type LoadViewRouter struct {
	RouterID    string
	ExpiresInMs uint64 // how long the report still counts, on the server's clock
	Loads       []InstanceLoad
}

func loadTTL(ttl uint32) uint32 {
	if ttl == 0 {
		return DefaultLoadTTLMs
	}
	return ttl
}

// ValidateLoadReport fails as the server would, naming the field: ErrInvalidArgument for
// an empty or too long router id (256 bytes), a TTLMs outside 100..600,000 (0 is the
// default), an empty or too long instance id, a number above MaxLoadBlocks, an (instance,
// rank) given twice; ErrPayloadTooLarge for more than MaxLoadEntries loads.
func ValidateLoadReport(r LoadReport) error {
	if r.RouterID == "" {
		return newError(CodeInvalidArgument, "router_id: is required (a non-empty string)")
	}
	if len(r.RouterID) > maxLoadNameBytes {
		return newError(CodeInvalidArgument, fmt.Sprintf("router_id: at most %d bytes, got %d", maxLoadNameBytes, len(r.RouterID)))
	}
	if ttl := loadTTL(r.TTLMs); ttl < MinLoadTTLMs || ttl > MaxLoadTTLMs {
		return newError(CodeInvalidArgument, fmt.Sprintf("ttl_ms: must be an integer from %d to %d, got %d", MinLoadTTLMs, MaxLoadTTLMs, ttl))
	}
	if len(r.Loads) > MaxLoadEntries {
		return newError(CodePayloadTooLarge, fmt.Sprintf("loads: %d entries; one report holds at most %d", len(r.Loads), MaxLoadEntries))
	}
	type key struct {
		instance string
		rank     uint32
	}
	seen := make(map[key]struct{}, len(r.Loads))
	for i, l := range r.Loads {
		if l.InstanceID == "" || len(l.InstanceID) > maxLoadNameBytes {
			return newError(CodeInvalidArgument, fmt.Sprintf("loads[%d].instance_id: must be a string of 1 to %d bytes", i, maxLoadNameBytes))
		}
		for _, v := range []struct {
			name  string
			value uint64
		}{{"prefill_blocks", l.PrefillBlocks}, {"decode_blocks", l.DecodeBlocks}} {
			if v.value > MaxLoadBlocks {
				return newError(CodeInvalidArgument, fmt.Sprintf("loads[%d].%s: at most %d, got %d", i, v.name, MaxLoadBlocks, v.value))
			}
		}
		k := key{l.InstanceID, l.DPRank}
		if _, dup := seen[k]; dup {
			return newError(CodeInvalidArgument, fmt.Sprintf("loads[%d]: instance %q rank %d is given twice (one entry per instance and rank)", i, l.InstanceID, l.DPRank))
		}
		seen[k] = struct{}{}
	}
	return nil
}

// putRouter writes a report's head and loads: the router id, one number (a report's
// ttl_ms, a viewed report's expires_in_ms) and list<Load>, as kLoadReport and kLoadView
// share it.
func putRouter(e *encoder, routerID string, number uint64, loads []InstanceLoad) {
	e.str(routerID)
	e.varint(number)
	e.varint(uint64(len(loads)))
	for _, l := range loads {
		e.str(l.InstanceID)
		e.varint(uint64(l.DPRank))
		e.varint(l.PrefillBlocks)
		e.varint(l.DecodeBlocks)
	}
}

// readLoads reads a list<Load>; more than MaxLoadEntries is not an answer a server sends.
func readLoads(d *decoder) []InstanceLoad {
	n := d.count("loads", 4) // the smallest entry: an empty id, a rank and two varints
	if d.err == nil && n > MaxLoadEntries {
		d.fail("loads", fmt.Sprintf("%d entries (at most %d)", n, MaxLoadEntries))
		return nil
	}
	if n == 0 {
		return nil
	}
	loads := make([]InstanceLoad, n)
	for i := range loads {
		loads[i] = InstanceLoad{InstanceID: d.str("loads.instance_id"), DPRank: d.varint32("loads.dp_rank"),
			PrefillBlocks: d.varint("loads.prefill_blocks"), DecodeBlocks: d.varint("loads.decode_blocks")}
	}
	return loads
}

// encodeLoadReport is the kLoadReport request; TTLMs 0 is sent as the default.
func encodeLoadReport(r *LoadReport) []byte {
	size := 16 + len(r.RouterID)
	for i := range r.Loads {
		size += 32 + len(r.Loads[i].InstanceID)
	}
	e := &encoder{b: make([]byte, 0, size)}
	putRouter(e, r.RouterID, uint64(loadTTL(r.TTLMs)), r.Loads)
	return e.b
}

func decodeLoadReportAnswer(p []byte) (LoadReportAnswer, error) {
	d := &decoder{b: p}
	a := LoadReportAnswer{Revision: d.varint("revision"), ExpiresAtMs: d.varint("expires_at_ms")}
	return a, d.finish()
}

func decodeLoadView(p []byte) (LoadView, error) {
	d := &decoder{b: p}
	v := LoadView{Revision: d.varint("revision")}
	// The smallest router: an empty id, a varint and an empty list.
	if n := d.count("routers", 3); n > 0 {
		v.Routers = make([]LoadViewRouter, n)
		for i := range v.Routers {
			v.Routers[i] = LoadViewRouter{RouterID: d.str("routers.router_id"),
				ExpiresInMs: d.varint("routers.expires_in_ms"), Loads: readLoads(d)}
		}
	}
	return v, d.finish()
}

// ReportLoad sends a router's absolute in-flight summary (binary kLoadReport, POST
// /v1/load): it replaces the router's previous report on every server and counts for
// r.TTLMs after the leader accepted it. A write: it goes to the leader, following
// not_leader answers. A report ValidateLoadReport refuses fails with its error, unsent;
// the server answers ErrResourceExhausted for a new router when MaxLoadRouters routers'
// reports are live. A lost answer is harmless: the next report replaces this one.
// LoadReporter keeps a router's table and calls this.
func (c *Client) ReportLoad(ctx context.Context, r LoadReport) (*LoadReportAnswer, error) {
	if err := ValidateLoadReport(r); err != nil {
		return nil, err
	}
	p, err := c.leaderCall(ctx, typeLoadReport, encodeLoadReport(&r))
	return decoded(p, err, decodeLoadReportAnswer)
}

// FetchLoads is the live load reports as the answering server sees them (binary
// kLoadView, GET /v1/load's routers). A read: any member answers from its own table, which
// a follower applies from the log like the leader.
func (c *Client) FetchLoads(ctx context.Context) (*LoadView, error) {
	p, err := c.read(ctx, typeLoadView, nil)
	return decoded(p, err, decodeLoadView)
}

// FetchLoadsInto replaces t's reports with the fetched ones (FetchLoads, then
// LoadView.FillTable), each expiring when its expires_in_ms, counted from when the request
// was sent, runs out: never later than on the server. On error t is unchanged.
func (c *Client) FetchLoadsInto(ctx context.Context, t *FleetLoadTable) error {
	sent := time.Now()
	v, err := c.FetchLoads(ctx)
	if err != nil {
		return err
	}
	v.FillTable(t, sent)
	return nil
}

// FillLoads fetches the fleet's live reports (FetchLoads) and fills, in place, the load of
// each candidate that gives none, as the server's route does (the rule of
// FleetLoadTable.FillCandidates): the scheduler's step before LocalIndex.Route or
// ScoreCandidates, so that it ranks as the server does for the same candidates. It
// returns how many it filled. blockSize is the context's (queued prefill tokens = summed prefill blocks ×
// blockSize). On error the candidates are unchanged. A scheduler that routes often keeps
// a FleetLoadTable and refreshes it (FetchLoadsInto) on its own schedule instead: how
// often it fetches bounds its staleness, on top of the routers' report interval.
func (c *Client) FillLoads(ctx context.Context, candidates []Candidate, blockSize uint32) (int, error) {
	var t FleetLoadTable
	if err := c.FetchLoadsInto(ctx, &t); err != nil {
		return 0, err
	}
	return t.FillCandidates(candidates, blockSize), nil
}

// FillTable replaces t's reports with v's, each expiring v.Routers[i].ExpiresInMs after
// fetchedAt (the time the view was asked for: a report then never counts longer than on
// the server).
func (v *LoadView) FillTable(t *FleetLoadTable, fetchedAt time.Time) {
	t.Clear()
	for _, r := range v.Routers {
		expiresIn := time.Duration(math.MaxInt64)
		if r.ExpiresInMs < uint64(math.MaxInt64/int64(time.Millisecond)) {
			expiresIn = time.Duration(r.ExpiresInMs) * time.Millisecond
		}
		t.Replace(LoadReport{RouterID: r.RouterID, Loads: r.Loads}, fetchedAt.Add(expiresIn))
	}
}

// LoadSum is the summed load of one instance (or one of its ranks) over every live
// report.
type LoadSum struct {
	PrefillBlocks uint64
	DecodeBlocks  uint64
	Routers       int // live reports that name it
}

// FleetLoadTable holds live load reports by router id and sums them, as a server's table
// does (the C++ kvatlas::FleetLoadTable, the same rule): a scheduler scoring in its own
// process fills it (Client.FetchLoadsInto) and fills its candidates from it. The zero
// value is an empty table; safe for concurrent use. Expiry uses the monotonic clock of
// the time.Time values given (time.Now), so a wall-clock step does not end or extend a
// report.
type FleetLoadTable struct {
	mu      sync.Mutex
	routers map[string]*fleetEntry
}

type fleetEntry struct {
	expiresAt time.Time
	loads     []InstanceLoad
	// instance id → indexes into loads
	byInstance map[string][]int
}

// expireLocked drops the routers whose lease ran out. mu held.
func (t *FleetLoadTable) expireLocked(now time.Time) {
	for id, e := range t.routers {
		if !now.Before(e.expiresAt) {
			delete(t.routers, id)
		}
	}
}

// Replace replaces r.RouterID's report; it counts while the clock is before expiresAt. A
// report with no loads erases the router. False (nothing changed) for a new router when
// MaxLoadRouters live routers are kept. r.TTLMs is not used (expiresAt says when it ends).
func (t *FleetLoadTable) Replace(r LoadReport, expiresAt time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(r.Loads) == 0 {
		delete(t.routers, r.RouterID)
		return true
	}
	if t.routers == nil {
		t.routers = map[string]*fleetEntry{}
	}
	e := t.routers[r.RouterID]
	if e == nil {
		if len(t.routers) >= MaxLoadRouters {
			t.expireLocked(time.Now())
		}
		if len(t.routers) >= MaxLoadRouters {
			return false
		}
		e = &fleetEntry{}
		t.routers[r.RouterID] = e
	}
	e.expiresAt = expiresAt
	e.loads = append([]InstanceLoad(nil), r.Loads...)
	e.byInstance = make(map[string][]int, len(e.loads))
	for i := range e.loads {
		e.byInstance[e.loads[i].InstanceID] = append(e.byInstance[e.loads[i].InstanceID], i)
	}
	return true
}

// Clear forgets every report.
func (t *FleetLoadTable) Clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.routers = nil
}

// LoadOf is the load of instance at *dpRank, or summed over its ranks when dpRank is nil,
// over the reports live at now.
func (t *FleetLoadTable) LoadOf(instance string, dpRank *uint32, now time.Time) LoadSum {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sum LoadSum
	for _, e := range t.routers {
		if !now.Before(e.expiresAt) {
			continue
		}
		named := false
		for _, i := range e.byInstance[instance] {
			l := &e.loads[i]
			if dpRank != nil && l.DPRank != *dpRank {
				continue
			}
			sum.PrefillBlocks += l.PrefillBlocks
			sum.DecodeBlocks += l.DecodeBlocks
			named = true
		}
		if named {
			sum.Routers++
		}
	}
	return sum
}

// FillCandidates fills, in place, the load of every candidate that gives none
// (QueuedPrefillTokens and ActiveDecodeBlocks both 0) from the reports live now: its
// DPRank's, or all its ranks' when DPRank is nil; QueuedPrefillTokens = summed prefill
// blocks × blockSize (saturating), ActiveDecodeBlocks = summed decode blocks. A candidate
// that gives a load keeps it, and one no live report names stays at 0. The server's rule
// for a route's candidates (docs/routing.md §Shared load). Returns how many it filled.
func (t *FleetLoadTable) FillCandidates(candidates []Candidate, blockSize uint32) int {
	return t.FillCandidatesAt(candidates, blockSize, time.Now())
}

// FillCandidatesAt is FillCandidates with the reports live at now.
func (t *FleetLoadTable) FillCandidatesAt(candidates []Candidate, blockSize uint32, now time.Time) int {
	filled := 0
	for i := range candidates {
		c := &candidates[i]
		if c.QueuedPrefillTokens != 0 || c.ActiveDecodeBlocks != 0 {
			continue
		}
		sum := t.LoadOf(c.InstanceID, c.DPRank, now)
		if sum.Routers == 0 {
			continue
		}
		hi, tokens := bits.Mul64(sum.PrefillBlocks, uint64(blockSize))
		if hi != 0 {
			tokens = math.MaxUint64
		}
		c.QueuedPrefillTokens = tokens
		c.ActiveDecodeBlocks = sum.DecodeBlocks
		filled++
	}
	return filled
}

// FleetRouter is one live report of a FleetLoadTable.
type FleetRouter struct {
	RouterID  string
	ExpiresAt time.Time
	Loads     []InstanceLoad
}

// LiveRouters is every report live at now, by router id.
func (t *FleetLoadTable) LiveRouters(now time.Time) []FleetRouter {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []FleetRouter
	for id, e := range t.routers {
		if now.Before(e.expiresAt) {
			out = append(out, FleetRouter{RouterID: id, ExpiresAt: e.expiresAt,
				Loads: append([]InstanceLoad(nil), e.loads...)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RouterID < out[j].RouterID })
	return out
}
