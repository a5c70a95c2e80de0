package kvatlas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

var testContext = Context{Model: "llama", BlockSize: 4}

// storedEvent is a stored event of holder/rank on GPU carrying tokens' standard keys.
func storedEvent(holder string, tokens []uint32) Event {
	return Event{Type: EventStored, Context: testContext, Holder: Holder{BackendID: holder},
		Tier: TierGPU, SeqHashes: NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, testContext.BlockSize)}
}

func seqTokens(n int, start uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = start + uint32(i)
	}
	return out
}

func TestPingStatsCluster(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.HashSeed != DefaultHashSeed || len(st.Raw) == 0 {
		t.Errorf("stats: hash_seed %d, %d raw bytes", st.HashSeed, len(st.Raw))
	}
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatalf("Cluster: %v", err)
	}
	if cl.State != "leader" || cl.LeaderID != cl.ID || len(cl.Members) != 1 ||
		cl.Members[0].RPCAddress == nil || *cl.Members[0].RPCAddress != s.rpc {
		t.Errorf("cluster of a single server: %+v", cl)
	}
	if a := c.Auth(); a.Name != "anonymous" {
		t.Errorf("Auth without a token: %+v", a)
	}
}

func TestIngestLookupRouteLocate(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	tokens := seqTokens(4*6, 100) // 6 blocks
	ans, err := c.Ingest(ctx, []Event{storedEvent("engine-a", tokens[:16]), storedEvent("engine-b", tokens)})
	if err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	if ans.Revision == 0 || ans.Events != 2 || ans.Blocks != 10 {
		t.Errorf("ingest answer %+v, want a revision, 2 events, 10 blocks", ans)
	}

	// By the hashes computed here, and by tokens hashed on the server: the same answer.
	hashes := NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, 4)
	byHash, err := c.Lookup(ctx, LookupRequest{Context: testContext, Hashes: hashes})
	if err != nil {
		t.Fatalf("Lookup by hash: %v", err)
	}
	byTokens, err := c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: append(tokens, 1, 2)})
	if err != nil {
		t.Fatalf("Lookup by tokens: %v", err)
	}
	for name, a := range map[string]*LookupAnswer{"by hash": byHash, "by tokens": byTokens} {
		if a.BlocksQueried != 6 || a.BlocksFound != 6 || len(a.Instances) != 2 {
			t.Fatalf("lookup %s: %+v", name, a)
		}
		if a.Instances[0].InstanceID != "engine-b" || a.Instances[0].Blocks.GPU != 6 ||
			a.Instances[1].InstanceID != "engine-a" || a.Instances[1].Blocks.GPU != 4 {
			t.Errorf("lookup %s instances: %+v", name, a.Instances)
		}
		if a.Context.Tenant != "default" || a.Context.Model != "llama" || a.Revision < ans.Revision {
			t.Errorf("lookup %s context/revision: %+v", name, a)
		}
	}
	one, err := c.Lookup(ctx, LookupRequest{Context: testContext, Hashes: hashes, Instance: "engine-a"})
	if err != nil || len(one.Instances) != 1 || one.Instances[0].InstanceID != "engine-a" {
		t.Errorf("lookup of one instance: %+v, %v", one, err)
	}

	// engine-a holds 4 blocks, engine-b all 6: b is the cheaper pick for the prompt.
	seed := uint64(7)
	opts := DefaultRouteOptions()
	opts.Seed = &seed
	route, err := c.Route(ctx, RouteRequest{Lookup: LookupRequest{Context: testContext, Tokens: tokens},
		Candidates: []Candidate{{InstanceID: "engine-a"}, {InstanceID: "engine-b"}, {InstanceID: "engine-c", QueuedPrefillTokens: 64}},
		Options:    &opts})
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	if route.PromptBlocks != 6 || len(route.Ranked) != 3 || route.Ranked[0].Candidate.InstanceID != "engine-b" ||
		route.Ranked[0].Index != 1 || route.Ranked[0].Matched.GPU != 6 || route.Ranked[0].Probability != 1 {
		t.Errorf("route: %+v", route)
	}
	// queue_scale travels as a trailer only when it differs from the default.
	opts.QueueScale = 5
	if _, err := c.Route(ctx, RouteRequest{Lookup: LookupRequest{Context: testContext, Hashes: hashes},
		Candidates: []Candidate{{InstanceID: "engine-a"}}, Options: &opts}); err != nil {
		t.Errorf("Route with queue_scale 5: %v", err)
	}

	loc, err := c.Locate(ctx, hashes[0], &testContext)
	if err != nil {
		t.Fatalf("Locate: %v", err)
	}
	if len(loc.Copies) != 2 || loc.Copies[0].Depth != 0 || loc.Copies[0].Tier != TierGPU {
		t.Errorf("locate: %+v", loc)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	_, err := c.Lookup(ctx, LookupRequest{Context: Context{BlockSize: 4}, Hashes: []uint64{1}})
	var e *Error
	if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || e.Code != CodeInvalidArgument {
		t.Fatalf("lookup without a model: %v, want invalid_argument", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("an invalid_argument error also matched ErrNotFound")
	}
	if e.Message == "" {
		t.Errorf("the server's message is missing: %#v", e)
	}
	bad := storedEvent("h", seqTokens(8, 0))
	bad.Locations = []string{"only-one"} // two blocks, one location
	_, err = c.Ingest(ctx, []Event{storedEvent("h", seqTokens(8, 0)), bad})
	if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &e) || !contains(e.Message, "events[1]") {
		t.Errorf("ingest with a bad second event: %v, want invalid_argument naming events[1]", err)
	}
	_, err = c.IngestOnce(ctx, WriterPosition{ID: "bad id", Sequence: 1}, []Event{bad})
	if !errors.Is(err, ErrInvalidArgument) || !contains(err.Error(), "writer_id") {
		t.Errorf("a malformed writer id: %v", err)
	}
	_, err = c.Route(ctx, RouteRequest{Lookup: LookupRequest{Context: testContext}})
	if !errors.Is(err, ErrInvalidArgument) || !contains(err.Error(), "candidates") {
		t.Errorf("route without candidates: %v", err)
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// A writer's batch resent with the same sequence is applied once; the same batch sent
// twice without a writer counts twice (the block's refcount).
func TestIngestOnceAppliesOnce(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	tokens := seqTokens(8, 1)
	key := NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, 4)[0]
	refcount := func() uint32 {
		loc, err := c.Locate(ctx, key, &testContext)
		if err != nil || len(loc.Copies) != 1 {
			t.Fatalf("Locate: %+v, %v", loc, err)
		}
		return loc.Copies[0].Refcount
	}
	w := WriterPosition{ID: "sched-1:go", Sequence: 1}
	for i := 0; i < 2; i++ {
		if _, err := c.IngestOnce(ctx, w, []Event{storedEvent("h", tokens)}); err != nil {
			t.Fatalf("IngestOnce #%d: %v", i+1, err)
		}
	}
	if got := refcount(); got != 1 {
		t.Errorf("refcount after one batch sent twice under a writer: %d, want 1", got)
	}
	w.Sequence = 2
	if _, err := c.IngestOnce(ctx, w, []Event{storedEvent("h", tokens)}); err != nil {
		t.Fatalf("IngestOnce sequence 2: %v", err)
	}
	if _, err := c.Ingest(ctx, []Event{storedEvent("h", tokens)}); err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	if got := refcount(); got != 3 {
		t.Errorf("refcount after sequence 2 and a plain ingest: %d, want 3", got)
	}
}

// Many goroutines share one connection; every call gets its own answer.
func TestConcurrentCallsShareAConnection(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}, MaxInFlight: 16})
	ctx := testCtx(t)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tokens := seqTokens(4*(1+i%5), uint32(1000*i))
			if i%2 == 0 {
				if _, err := c.Ingest(ctx, []Event{storedEvent(fmt.Sprintf("h%d", i), tokens)}); err != nil {
					errs <- err
				}
				return
			}
			a, err := c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: tokens})
			if err == nil && a.BlocksQueried != uint32(1+i%5) {
				err = fmt.Errorf("lookup %d: %d blocks queried, want %d (an answer of another call?)", i, a.BlocksQueried, 1+i%5)
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c.mu.Lock()
	open := len(c.conns)
	c.mu.Unlock()
	if open != 1 {
		t.Errorf("%d connections open, want 1", open)
	}
}

func TestDialFailsClearly(t *testing.T) {
	ctx := context.Background()
	if _, err := Dial(ctx, Options{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("no endpoints: %v", err)
	}
	if _, err := Dial(ctx, Options{Endpoints: []string{"localhost"}}); !errors.Is(err, ErrInvalidArgument) ||
		!contains(err.Error(), `"localhost"`) {
		t.Errorf("an endpoint without a port: %v", err)
	}
	port := freePorts(t, 1)[0]
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	_, err := Dial(ctx, Options{Endpoints: []string{addr}})
	if !errors.Is(err, ErrUnavailable) || !contains(err.Error(), addr) {
		t.Errorf("nothing listening: %v, want unavailable naming %s", err, addr)
	}
}

// A lost connection is retried at once by the next call; after a round in which no
// endpoint accepted, calls fail without a new attempt until the back-off passes.
func TestReconnectBackoff(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}, ReconnectBackoffMin: 10 * time.Minute})
	ctx := testCtx(t)
	s.stop()
	err := c.Ping(ctx) // the open connection is lost (or found closed)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ping after the server stopped: %v", err)
	}
	if err = c.Ping(ctx); err != nil && !contains(err.Error(), "no new attempt") {
		err = c.Ping(ctx) // the first Ping may have found the connection already closed
	}
	if !errors.Is(err, ErrUnavailable) || !contains(err.Error(), "no new attempt") || !contains(err.Error(), s.rpc) {
		t.Errorf("Ping within the back-off: %v, want unavailable naming %s and the back-off", err, s.rpc)
	}
}

// A request over MaxRequestBytes fails without being sent: the connection and the other
// calls on it go on.
func TestRequestTooLarge(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}, MaxRequestBytes: 1000})
	ctx := testCtx(t)
	_, err := c.Ingest(ctx, []Event{storedEvent("h", seqTokens(4*200, 0))})
	if !errors.Is(err, ErrPayloadTooLarge) || !contains(err.Error(), "MaxRequestBytes") {
		t.Errorf("a 200-block ingest over 1000 bytes: %v, want payload_too_large", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("Ping after a refused request: %v", err)
	}
}
