package kvatlas

// Shared load against real servers (docs/routing.md §Shared load): reports sent by
// LoadReporters and ReportLoad, seen by FetchLoads and summed by a FleetLoadTable; a
// LocalIndex scheduler whose candidates are filled from the fleet's reports moves a
// request off the loaded instance and ranks as the server's route does (the Go twin of
// tests/integration/local_shared_load_test.cc); a reporter's Close takes its load away;
// reports sent through a follower reach the leader and every member.

import (
	"encoding/json"
	"reflect"
	"sort"
	"testing"
	"time"
)

func reporterT(t *testing.T, c *Client, id string, ttlMs uint32) *LoadReporter {
	t.Helper()
	r, err := NewLoadReporter(c, LoadReporterOptions{RouterID: id, TTLMs: ttlMs})
	if err != nil {
		t.Fatalf("NewLoadReporter(%s): %v", id, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func viewRouters(v *LoadView) map[string]LoadViewRouter {
	out := map[string]LoadViewRouter{}
	for _, r := range v.Routers {
		out[r.RouterID] = r
	}
	return out
}

func TestLoadReportsSummedAcrossRouters(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	r1 := reporterT(t, c, "r1", 5_000)
	r2 := reporterT(t, c, "r2", 5_000)
	r1.RouteStarted("a", 0, 3, 4)
	r1.RouteStarted("a", 1, 5, 6)
	r2.RouteStarted("a", 0, 10, 20)
	r2.RouteStarted("b", 0, 1, 1)
	for _, r := range []*LoadReporter{r1, r2} {
		if err := r.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	v, err := c.FetchLoads(ctx)
	if err != nil {
		t.Fatalf("FetchLoads: %v", err)
	}
	routers := viewRouters(v)
	want := map[string][]InstanceLoad{
		"r1": {{InstanceID: "a", DPRank: 0, PrefillBlocks: 3, DecodeBlocks: 4}, {InstanceID: "a", DPRank: 1, PrefillBlocks: 5, DecodeBlocks: 6}},
		"r2": {{InstanceID: "a", DPRank: 0, PrefillBlocks: 10, DecodeBlocks: 20}, {InstanceID: "b", DPRank: 0, PrefillBlocks: 1, DecodeBlocks: 1}},
	}
	if v.Revision == 0 || len(v.Routers) != 2 {
		t.Fatalf("view: %+v, want two routers at a revision", v)
	}
	for id, loads := range want {
		got := routers[id]
		sort.Slice(got.Loads, func(i, j int) bool {
			return got.Loads[i].InstanceID < got.Loads[j].InstanceID ||
				got.Loads[i].InstanceID == got.Loads[j].InstanceID && got.Loads[i].DPRank < got.Loads[j].DPRank
		})
		if !reflect.DeepEqual(got.Loads, loads) || got.ExpiresInMs == 0 || got.ExpiresInMs > 5_000 {
			t.Errorf("router %s: %+v, want loads %+v expiring within 5,000 ms", id, got, loads)
		}
	}

	var table FleetLoadTable
	if err := c.FetchLoadsInto(ctx, &table); err != nil {
		t.Fatalf("FetchLoadsInto: %v", err)
	}
	now := time.Now()
	for _, c := range []struct {
		rank *uint32
		want LoadSum
	}{
		{nil, LoadSum{PrefillBlocks: 18, DecodeBlocks: 30, Routers: 2}},
		{rankPtr(0), LoadSum{PrefillBlocks: 13, DecodeBlocks: 24, Routers: 2}},
		{rankPtr(1), LoadSum{PrefillBlocks: 5, DecodeBlocks: 6, Routers: 1}},
	} {
		if got := table.LoadOf("a", c.rank, now); got != c.want {
			t.Errorf("LoadOf(a, %v) = %+v, want %+v", c.rank, got, c.want)
		}
	}
	candidates := []Candidate{{InstanceID: "a"}, {InstanceID: "a", DPRank: rankPtr(1)},
		{InstanceID: "b", QueuedPrefillTokens: 7}, {InstanceID: "c"}}
	n, err := c.FillLoads(ctx, candidates, 16)
	wantFilled := []Candidate{{InstanceID: "a", QueuedPrefillTokens: 18 * 16, ActiveDecodeBlocks: 30},
		{InstanceID: "a", DPRank: rankPtr(1), QueuedPrefillTokens: 5 * 16, ActiveDecodeBlocks: 6},
		{InstanceID: "b", QueuedPrefillTokens: 7}, {InstanceID: "c"}}
	if err != nil || n != 2 || !reflect.DeepEqual(candidates, wantFilled) {
		t.Errorf("FillLoads: %d, %v:\n got %+v\nwant %+v", n, err, candidates, wantFilled)
	}

	// ReportLoad itself: the answer's lease end is the leader's clock (this machine's) plus
	// the ttl; an empty report takes the router away.
	before := time.Now().UnixMilli()
	a, err := c.ReportLoad(ctx, LoadReport{RouterID: "r3", TTLMs: 1_000,
		Loads: []InstanceLoad{{InstanceID: "z", DecodeBlocks: 9}}})
	after := time.Now().UnixMilli()
	if err != nil || a.Revision <= v.Revision || a.ExpiresAtMs+5 < uint64(before+1_000) || a.ExpiresAtMs > uint64(after+1_000+5) {
		t.Errorf("ReportLoad: %+v, %v; want a revision past %d expiring 1,000 ms after [%d, %d]", a, err, v.Revision, before, after)
	}
	if _, err := c.ReportLoad(ctx, LoadReport{RouterID: "r3"}); err != nil {
		t.Errorf("empty ReportLoad: %v", err)
	}
	v, err = c.FetchLoads(ctx)
	if _, present := viewRouters(v)["r3"]; err != nil || present || len(v.Routers) != 2 {
		t.Errorf("after r3's empty report: %+v, %v", v, err)
	}
}

// The routing costs of the scheduler test, spelled out so that a change of the defaults
// does not change what it checks: "a" saves 8 new prefill blocks over "b" (cost 8); each
// router queues 15 prompt blocks on "a" (cost 0.3 × 15 = 4.5): one router's load does not
// outweigh the saving, the two routers' sum (9) does.
func sharedLoadCosts() *RouteOptions {
	o := DefaultRouteOptions()
	o.PrefillScale, o.QueueScale, o.DecodeScale = 1.0, 0.3, 0.1
	// The plain cost, without the relative terms: the figures above are the load's alone.
	o.ReplicaCredit, o.ExcessQueueScale = 0, 0
	return &o
}

func TestLocalIndexRoutesWithFleetLoad(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	llama := Context{Model: "llama", BlockSize: 16}
	prompt := make([]uint64, 16)
	for i := range prompt {
		prompt[i] = uint64(i + 1)
	}
	stored := func(holder string, blocks int) Event {
		return Event{Type: EventStored, Context: llama, Holder: Holder{BackendID: holder}, Tier: TierGPU,
			SeqHashes: prompt[:blocks]}
	}
	ingested, err := c.Ingest(ctx, []Event{stored("a", 12), stored("b", 4)})
	if err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	li, err := NewLocalIndex(ctx, c, LocalIndexOptions{Contexts: []Context{llama}})
	if err != nil {
		t.Fatalf("NewLocalIndex: %v", err)
	}
	defer li.Close()
	waitLocal(t, li, ingested.Revision)

	request := func(candidates []Candidate) RouteRequest {
		return RouteRequest{Lookup: LookupRequest{Context: llama, Hashes: prompt}, Candidates: candidates,
			Options: sharedLoadCosts()}
	}
	noLoad := []Candidate{{InstanceID: "a"}, {InstanceID: "b"}}
	// The scheduler's step: fetch the fleet's loads, fill, route locally.
	var table FleetLoadTable
	route := func() ([]Candidate, *RouteAnswer) {
		t.Helper()
		filled := append([]Candidate(nil), noLoad...)
		if err := c.FetchLoadsInto(ctx, &table); err != nil {
			t.Fatalf("FetchLoadsInto: %v", err)
		}
		table.FillCandidates(filled, llama.BlockSize)
		a, err := li.Route(request(filled))
		if err != nil {
			t.Fatalf("LocalIndex.Route: %v", err)
		}
		return filled, a
	}
	if _, a := route(); a.Ranked[0].Candidate.InstanceID != "a" {
		t.Errorf("no load anywhere: picked %s, want a (the longer prefix)", a.Ranked[0].Candidate.InstanceID)
	}

	r1 := reporterT(t, c, "r1", 5_000)
	r2 := reporterT(t, c, "r2", 5_000)
	r1.RouteStarted("a", 0, 15, 0)
	if err := r1.Flush(ctx); err != nil {
		t.Fatalf("r1.Flush: %v", err)
	}
	filled, a := route()
	if a.Ranked[0].Candidate.InstanceID != "a" || filled[0].QueuedPrefillTokens != 15*16 {
		t.Errorf("one router's load: picked %s with a's queue %d tokens; want a (4.5 < 8), 240 tokens",
			a.Ranked[0].Candidate.InstanceID, filled[0].QueuedPrefillTokens)
	}

	r2.RouteStarted("a", 0, 15, 0)
	if err := r2.Flush(ctx); err != nil {
		t.Fatalf("r2.Flush: %v", err)
	}
	filled, shared := route()
	if filled[0].QueuedPrefillTokens != 30*16 || filled[1].QueuedPrefillTokens != 0 {
		t.Errorf("two routers' load: filled %+v, want 480 queued tokens on a, none on b", filled)
	}
	if shared.Ranked[0].Candidate.InstanceID != "b" {
		t.Errorf("two routers' load: picked %s, want b (9 > 8: the sum moves it)", shared.Ranked[0].Candidate.InstanceID)
	}
	// Without the fill the same scheduler still sends it to the loaded instance.
	unfilled, err := li.Route(request(noLoad))
	if err != nil || unfilled.Ranked[0].Candidate.InstanceID != "a" {
		t.Errorf("unfilled local route: %+v, %v; want a", unfilled, err)
	}
	// The server's route over the same load-less candidates fills and ranks the same: the
	// same loads shown, the same costs to the bit.
	server, err := c.Route(ctx, request(noLoad))
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	sj, _ := json.Marshal(server.Ranked)
	lj, _ := json.Marshal(shared.Ranked)
	if string(sj) != string(lj) {
		t.Errorf("the server's route and the filled local route differ\nserver: %s\nlocal:  %s", sj, lj)
	}
	// FillLoads is the same step in one call.
	once := append([]Candidate(nil), noLoad...)
	if n, err := c.FillLoads(ctx, once, llama.BlockSize); err != nil || n != 1 || !reflect.DeepEqual(once, filled) {
		t.Errorf("FillLoads: %d, %v: %+v, want %+v", n, err, once, filled)
	}

	// A router that leaves (Close: an empty report) is gone from the next fetch.
	if err := r2.Close(); err != nil {
		t.Fatalf("r2.Close: %v", err)
	}
	v, err := c.FetchLoads(ctx)
	if routers := viewRouters(v); err != nil || len(routers) != 1 || routers["r1"].RouterID != "r1" {
		t.Errorf("after r2 left: %+v, %v; want r1 alone", v, err)
	}
	filled, a = route()
	if a.Ranked[0].Candidate.InstanceID != "a" || filled[0].QueuedPrefillTokens != 15*16 {
		t.Errorf("after r2 left: picked %s with a's queue %d tokens; want a, 240 tokens",
			a.Ranked[0].Candidate.InstanceID, filled[0].QueuedPrefillTokens)
	}
	server, err = c.Route(ctx, request(noLoad))
	if err != nil || server.Ranked[0].Candidate.InstanceID != "a" || server.Ranked[0].Candidate.QueuedPrefillTokens != 15*16 {
		t.Errorf("the server's route after r2 left: %+v, %v", server, err)
	}
}

// A reporter whose client knows only a follower: its reports follow not_leader to the
// leader, and every member's view shows them once applied.
func TestLoadReportsThroughAFollower(t *testing.T) {
	servers := startCluster(t, 3)
	leader, followers := roles(t, servers)
	c := dialT(t, Options{Endpoints: []string{followers[0].rpc}})
	ctx := testCtx(t)
	r := reporterT(t, c, "r1", 10_000)
	r.RouteStarted("a", 2, 7, 8)
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush through a follower: %v", err)
	}
	c.mu.Lock()
	remembered := c.leader
	c.mu.Unlock()
	if remembered != leader.rpc {
		t.Errorf("the report went to %q, want the leader %q", remembered, leader.rpc)
	}
	want := []InstanceLoad{{InstanceID: "a", DPRank: 2, PrefillBlocks: 7, DecodeBlocks: 8}}
	for _, s := range servers {
		m := dialT(t, Options{Endpoints: []string{s.rpc}})
		deadline := time.Now().Add(startupBound)
		for {
			v, err := m.FetchLoads(ctx)
			if err == nil && len(v.Routers) == 1 && reflect.DeepEqual(v.Routers[0].Loads, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's view: %+v, %v; want r1's report", s.rpc, v, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close through a follower: %v", err)
	}
}
