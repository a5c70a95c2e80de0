package kvatlas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
)

// A replica's answers equal the server's: the same lookups and routes, by tokens and by
// hashes, with an instance, with locations, sent to both after the same changes.

func keysOf(tokens []uint32) []uint64 {
	return NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, testContext.BlockSize)
}

func event(typ EventType, holder string, rank uint32, tier Tier, keys []uint64) Event {
	return Event{Type: typ, Context: testContext, Holder: Holder{BackendID: holder, DPRank: rank},
		Tier: tier, SeqHashes: keys}
}

// The lookups and routes both must answer alike, over prompt (tokens of 12 blocks).
func sameAnswers(t *testing.T, c *Client, li *LocalIndex, prompt []uint32, stage string) {
	t.Helper()
	ctx := testCtx(t)
	keys := keysOf(prompt)
	lookups := []LookupRequest{
		{Context: testContext, Tokens: prompt},
		{Context: testContext, Tokens: prompt[:13]}, // a partial last block
		{Context: testContext, Tokens: prompt[4:]},  // from block 1: nobody's prefix
		{Context: testContext, Hashes: keys},
		{Context: testContext, Hashes: keys[:5], Instance: "engine-a"},
		{Context: testContext, Hashes: keys, Instance: "engine-z"}, // matches nothing
		{Context: testContext, Hashes: keys, IncludeLocations: true},
		{Context: testContext, Hashes: []uint64{}},
	}
	compareAll(t, stage, "lookup", lookups, func(r LookupRequest) (*LookupAnswer, error) { return c.Lookup(ctx, r) }, li.Lookup)
	rank1 := uint32(1)
	seed := uint64(7)
	hot := DefaultRouteOptions()
	hot.Temperature, hot.Seed = 0.5, &seed
	tiers := DefaultRouteOptions()
	tiers.Weights = TierWeights{GPU: 1, CPU: 0.2, Disk: 0.9, Shared: 1}
	tiers.DecodeScale = 2
	candidates := []Candidate{{InstanceID: "engine-a"}, {InstanceID: "engine-b", QueuedPrefillTokens: 40},
		{InstanceID: "engine-a", DPRank: &rank1}, {InstanceID: "engine-c", ActiveDecodeBlocks: 3},
		{InstanceID: "nobody"}}
	routes := []RouteRequest{
		{Lookup: LookupRequest{Context: testContext, Tokens: prompt}, Candidates: candidates},
		{Lookup: LookupRequest{Context: testContext, Tokens: prompt[:13]}, Candidates: candidates[1:]},
		{Lookup: LookupRequest{Context: testContext, Hashes: keys[:3]}, Candidates: candidates, Options: &tiers},
		{Lookup: LookupRequest{Context: testContext, Hashes: keys}, Candidates: candidates, Options: &hot},
		{Lookup: LookupRequest{Context: testContext, Hashes: keys}, Candidates: candidates[4:]},
	}
	compareAll(t, stage, "route", routes, func(r RouteRequest) (*RouteAnswer, error) { return c.Route(ctx, r) }, li.Route)
}

// compareAll sends each request to the server and to the replica and compares the answers.
func compareAll[R, A any](t *testing.T, stage, what string, requests []R, server, local func(R) (*A, error)) {
	t.Helper()
	for i, r := range requests {
		want, err := server(r)
		if err != nil {
			t.Fatalf("%s: server %s %d: %v", stage, what, i, err)
		}
		got, err := local(r)
		if err != nil {
			t.Fatalf("%s: local %s %d: %v", stage, what, i, err)
		}
		same(t, stage, what, i, want, got)
	}
}

// same compares answers field by field through their JSON; a route's probabilities, which
// Go's math.Exp and the C library's exp may round a unit in the last place apart, to
// within 1e-12.
func same(t *testing.T, stage, what string, i int, want, got interface{}) {
	t.Helper()
	w, wok := want.(*RouteAnswer)
	g, gok := got.(*RouteAnswer)
	if wok && gok && len(w.Ranked) == len(g.Ranked) {
		for j := range g.Ranked {
			if math.Abs(w.Ranked[j].Probability-g.Ranked[j].Probability) <= 1e-12 {
				g.Ranked[j].Probability = w.Ranked[j].Probability
			}
		}
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) != string(gj) {
		t.Errorf("%s: %s %d differs\nserver: %s\nlocal:  %s", stage, what, i, wj, gj)
	}
}

func waitLocal(t *testing.T, li *LocalIndex, revision uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startupBound)
	defer cancel()
	if err := li.WaitForRevision(ctx, revision); err != nil {
		t.Fatalf("WaitForRevision(%d): %v", revision, err)
	}
}

func TestLocalIndexAnswersAsTheServer(t *testing.T) {
	s := startServer(t)
	rpc := s.rpc
	c := dialT(t, Options{Endpoints: []string{rpc}})
	ctx := testCtx(t)
	prompt := seqTokens(4*12, 500)
	keys := keysOf(prompt)
	other := Context{Model: "other", BlockSize: 4}
	// Before the replica starts (its snapshot): a GPU prefix, a CPU one on rank 1, a
	// shared backend with locations, and a context the replica does not follow.
	shared := event(EventStored, "lmcache", 0, TierShared, keys[:7])
	shared.Locations = []string{"s3://a", "", "s3://c", "s3://d", "s3://e", "s3://f", "s3://g"}
	otherEvent := event(EventStored, "engine-a", 0, TierGPU, keys)
	otherEvent.Context = other
	if _, err := c.Ingest(ctx, []Event{event(EventStored, "engine-a", 0, TierGPU, keys[:9]),
		event(EventStored, "engine-a", 1, TierCPU, keys[:4]), shared, otherEvent}); err != nil {
		t.Fatal(err)
	}

	li, err := NewLocalIndex(ctx, c, LocalIndexOptions{Contexts: []Context{testContext}})
	if err != nil {
		t.Fatalf("NewLocalIndex: %v", err)
	}
	defer li.Close()
	if _, err := li.Lookup(LookupRequest{Context: other, Tokens: prompt}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a context not replicated: %v", err)
	}
	if _, err := li.Lookup(LookupRequest{Context: testContext, Tokens: prompt, Linearizable: true}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a linearizable lookup: %v", err)
	}
	if err := li.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	sameAnswers(t, c, li, prompt, "snapshot")

	// Through the feed: more tiers and holders, one first seen below block 0.
	late := event(EventStored, "late", 0, TierGPU, keys[1:6])
	late.ParentHash = &keys[0]
	a, err := c.Ingest(ctx, []Event{event(EventStored, "engine-b", 0, TierDisk, keys[:11]),
		event(EventStored, "engine-b", 0, TierGPU, keys[:3]), event(EventStored, "engine-c", 0, TierCPU, keys[:2]),
		event(EventStored, "engine-a", 0, TierCPU, keys[9:12]), late})
	if err != nil {
		t.Fatal(err)
	}
	waitLocal(t, li, a.Revision)
	sameAnswers(t, c, li, prompt, "ingest")

	// Removals: a block in the middle of a chain, a holder cleared, a shared copy.
	a, err = c.Ingest(ctx, []Event{event(EventRemoved, "engine-b", 0, TierDisk, keys[5:6]),
		{Type: EventCleared, Context: testContext, Holder: Holder{BackendID: "engine-c"}},
		event(EventRemoved, "lmcache", 0, TierShared, keys[2:3]), event(EventRemoved, "engine-a", 0, TierGPU, keys[0:1])})
	if err != nil {
		t.Fatal(err)
	}
	waitLocal(t, li, a.Revision)
	sameAnswers(t, c, li, prompt, "removals")

	// A restart: the replica watches again from its revision.
	s.stop()
	s2 := startServerIn(t, s.dataDir, rpc)
	w := dialT(t, Options{Endpoints: []string{s2.rpc}})
	a, err = w.Ingest(ctx, []Event{event(EventStored, "engine-d", 0, TierGPU, keys[:12])})
	if err != nil {
		t.Fatal(err)
	}
	waitLocal(t, li, a.Revision)
	sameAnswers(t, c, li, prompt, "restart")

	// Changes the replica missed while the server was elsewhere: its revision is no longer
	// in the restarted server's feed window (compacted), so it lists the context again.
	snapshots := li.Status()[0].Snapshots
	s2.stop()
	s3 := startServerIn(t, s.dataDir, "127.0.0.1:0")
	w3 := dialT(t, Options{Endpoints: []string{s3.rpc}})
	if _, err := w3.Ingest(ctx, []Event{event(EventRemoved, "engine-d", 0, TierGPU, keys[4:5]),
		event(EventStored, "engine-e", 0, TierCPU, keys[:6])}); err != nil {
		t.Fatal(err)
	}
	s3.stop()
	s4 := startServerIn(t, s.dataDir, rpc)
	w4 := dialT(t, Options{Endpoints: []string{s4.rpc}})
	st, err := w4.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitLocal(t, li, st.Revision)
	sameAnswers(t, c, li, prompt, "compacted")
	status := li.Status()[0]
	if status.Snapshots <= snapshots || status.State != LocalLive || status.Resumes == 0 {
		t.Errorf("after a compacted feed: %+v (%d snapshots before)", status, snapshots)
	}
	if behind, _, err := li.Lag(ctx); err != nil || behind != 0 {
		t.Errorf("Lag: %d, %v", behind, err)
	}
}

func TestLocalIndexOptions(t *testing.T) {
	seed := DefaultHashSeed
	for _, opts := range []LocalIndexOptions{{}, {Contexts: []Context{{Model: "m"}}}, {Contexts: []Context{{BlockSize: 16}}}} {
		opts.HashSeed = &seed
		if _, err := NewLocalIndex(context.Background(), nil, opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v", opts, err)
		}
	}
}

// The scorer reproduces the server's sampler: a seed picks the same candidate.
func TestMT19937_64MatchesTheStandard(t *testing.T) {
	// The C++ standard fixes the 10000th output of a default-seeded (5489) mt19937_64.
	m := newMT19937_64(5489)
	var x uint64
	for i := 0; i < 10000; i++ {
		x = m.next()
	}
	if x != 9981545732273789042 {
		t.Errorf("10000th output: %d", x)
	}
}

// Lookups while the feed brings copies of new holders: every holder a lookup meets in the
// table must be in the holder list it reads (interned before its copies were added, and
// the list read after the table's lock is taken).
func TestLocalIndexLookupsDuringIngest(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	li, err := NewLocalIndex(ctx, c, LocalIndexOptions{Contexts: []Context{testContext}})
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	if err := li.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	keys := keysOf(seqTokens(4*8, 1))
	stop := make(chan struct{})
	done := make(chan error, 2)
	for g := 0; g < 2; g++ {
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := li.LookupHashes(testContext, keys); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	var last uint64
	for i := 0; i < 100; i++ {
		a, err := c.Ingest(ctx, []Event{event(EventStored, fmt.Sprintf("engine-%d", i), 0, TierGPU, keys)})
		if err != nil {
			t.Fatal(err)
		}
		last = a.Revision
	}
	waitLocal(t, li, last)
	close(stop)
	for g := 0; g < 2; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	a, err := li.LookupHashes(testContext, keys)
	if err != nil || len(a.Instances) != 100 {
		t.Fatalf("after 100 holders: %d instances, %v", len(a.Instances), err)
	}
}
