package kvatlas

// Approximate mode against a real server (KVATLAS_SERVER_BIN, one that knows kPredict):
// a router's RecordPrediction reaches a Go LocalIndex with predictions on through the
// change feed, whose routes then rank as the server's own; a real event of the holder
// replaces its predictions on both; they end on both after the server's predicted TTL.

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// The server's predicted_ttl_ms in these tests: long enough for the checks made while a
// prediction lives (each a few ms), short enough to wait out.
const testPredictedTTL = 4 * time.Second

// requirePredict skips the test when the server predates kPredict (it answers an unknown
// message type with invalid_argument). The probe's prediction is in a context of its own.
func requirePredict(t *testing.T, c *Client) {
	t.Helper()
	_, err := c.RecordPrediction(testCtx(t), Context{Model: "probe", BlockSize: 4}, Holder{BackendID: "probe"}, []uint64{1})
	if errors.Is(err, ErrInvalidArgument) {
		t.Skipf("the server (KVATLAS_SERVER_BIN) predates kPredict (%v): build one with approximate mode's predicted records", err)
	}
	if err != nil {
		t.Fatalf("RecordPrediction probe: %v", err)
	}
}

// waitFor polls cond (a bounded wait, never a timed assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

func TestLocalIndexPredictionsAgainstServer(t *testing.T) {
	s := startServer(t, "--predicted-ttl-ms", "4000")
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	requirePredict(t, c)
	// The options byte the Go client never sends, as the server refuses it (docs/protocol.md
	// §kWatch): 0, unknown bits, bytes after it.
	plainStart := encodeWatchStart(nil, &FeedFilter{}, false)
	for _, bad := range []struct {
		options []byte
		want    string
	}{
		{[]byte{0}, "options: 0 sets no option (leave the byte out)"},
		{[]byte{3}, "options: unknown option bits 2 (known: 1 = predicted)"},
		{[]byte{1, 0}, "payload: 1 trailing bytes"},
	} {
		_, err := c.read(ctx, typeWatch, append(append([]byte(nil), plainStart...), bad.options...))
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Message != bad.want {
			t.Errorf("watch with options % x: %v, want invalid_argument %q", bad.options, err, bad.want)
		}
	}
	prompt := seqTokens(4*8, 7000)
	keys := keysOf(prompt)
	ing, err := c.Ingest(ctx, []Event{event(EventStored, "a", 0, TierGPU, keys[:2])})
	if err != nil {
		t.Fatal(err)
	}
	li, err := NewLocalIndex(ctx, c, LocalIndexOptions{Contexts: []Context{testContext}, Predictions: true})
	if err != nil {
		t.Fatalf("NewLocalIndex: %v", err)
	}
	defer li.Close()
	waitLocal(t, li, ing.Revision)
	predicted, err := c.Watch(ctx, WatchOptions{Filter: ContextFilter(testContext), Predicted: true})
	if err != nil {
		t.Fatalf("Watch with Predicted: %v", err)
	}
	defer predicted.Close()
	plain, err := c.Watch(ctx, WatchOptions{Filter: ContextFilter(testContext)})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer plain.Close()

	// The router's decisions: all 8 blocks to x (rank 0), the first 4 to z.
	before := time.Now()
	for _, p := range []struct {
		holder Holder
		keys   []uint64
	}{{Holder{BackendID: "x"}, keys}, {Holder{BackendID: "z", DPRank: 1}, keys[:4]}} {
		if queued, err := c.RecordPrediction(ctx, testContext, p.holder, p.keys); err != nil || queued != uint32(len(p.keys)) {
			t.Fatalf("RecordPrediction(%v): %d, %v", p.holder, queued, err)
		}
	}
	want := []PredictedPrefix{{"x", 0, 8}, {"z", 1, 4}}
	localPredicted := func() []PredictedPrefix {
		a, err := li.LookupHashes(testContext, keys)
		if err != nil {
			t.Fatalf("local lookup: %v", err)
		}
		return a.Predicted
	}
	waitFor(t, "the replica to see the predictions", func() bool { return reflect.DeepEqual(localPredicted(), want) })

	// The watch asking for them got them as predicted records, ending one TTL after they
	// were accepted (the server's clock: this machine's).
	got := map[string]FeedRecord{}
	waitFor(t, "the predicted records", func() bool {
		records, err := predicted.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		for _, r := range records {
			if r.Op == OpPredicted {
				got[r.Holder.BackendID] = r
			}
		}
		return len(got) == 2
	})
	x := got["x"]
	// The server's recorder sorts and deduplicates a round's keys: the same keys, sorted.
	sameKeys := len(x.Keys) == len(keys)
	for _, k := range keys {
		found := false
		for _, g := range x.Keys {
			found = found || g == k
		}
		sameKeys = sameKeys && found
	}
	if x.Holder.DPRank != 0 || !sameKeys || x.Context != normalContext(testContext) ||
		len(x.Locations) != 0 || x.Tier != TierGPU {
		t.Errorf("x's predicted record: %+v", x)
	}
	if end := time.UnixMilli(int64(x.ExpiresAtMs)); end.Before(before.Add(testPredictedTTL-time.Second)) ||
		end.After(time.Now().Add(testPredictedTTL+time.Second)) {
		t.Errorf("x's prediction ends at %v, recorded at %v with a TTL of %v", end, before, testPredictedTTL)
	}

	// Routes: the replica ranks as the server does. A PREDICTED weight of its own makes
	// the server answer each candidate's predicted blocks (and records nothing: no candidate
	// is flagged Predict).
	rank0, rank1 := uint32(0), uint32(1)
	weight := 0.9
	o := DefaultRouteOptions()
	o.PredictedWeight = &weight
	candidates := []Candidate{{InstanceID: "a"}, {InstanceID: "x", QueuedPrefillTokens: 8}, {InstanceID: "z"},
		{InstanceID: "z", DPRank: &rank0}, {InstanceID: "z", DPRank: &rank1}}
	sameRoute := func(stage string) *RouteAnswer {
		t.Helper()
		r := RouteRequest{Lookup: LookupRequest{Context: testContext, Tokens: prompt}, Candidates: candidates, Options: &o}
		server, err := c.Route(ctx, r)
		if err != nil {
			t.Fatalf("%s: server route: %v", stage, err)
		}
		local, err := li.Route(r)
		if err != nil {
			t.Fatalf("%s: local route: %v", stage, err)
		}
		if !reflect.DeepEqual(local.Ranked, server.Ranked) || local.PromptBlocks != server.PromptBlocks ||
			local.BlocksFound != server.BlocksFound {
			t.Errorf("%s: the replica's route differs:\nlocal  %+v\nserver %+v", stage, local.Ranked, server.Ranked)
		}
		return local
	}
	route := sameRoute("predicted")
	if top := route.Ranked[0]; top.Candidate.InstanceID != "x" || top.PredictedBlocks != 8 || top.Matched.Predicted != 8 {
		t.Errorf("x is not first with 8 predicted blocks: %+v", route.Ranked)
	}

	// z's rank 1 sends a real event: its predictions go on the server and on the replica.
	// The watch without the option saw no predicted record up to it.
	ev, err := c.Ingest(ctx, []Event{event(EventStored, "z", 1, TierCPU, keysOf(seqTokens(4, 90000)))})
	if err != nil {
		t.Fatal(err)
	}
	waitLocal(t, li, ev.Revision)
	if p := localPredicted(); !reflect.DeepEqual(p, want[:1]) {
		t.Errorf("after z/1's event: %+v", p)
	}
	for seen := false; !seen; {
		records, err := plain.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		for _, r := range records {
			if r.Op == OpPredicted {
				t.Errorf("a predicted record on a watch that did not ask: %+v", r)
			}
			seen = seen || r.Revision == ev.Revision
		}
	}
	route = sameRoute("after z's event")
	for _, r := range route.Ranked {
		if r.Candidate.InstanceID == "z" && r.PredictedBlocks != 0 {
			t.Errorf("z still predicted: %+v", r)
		}
	}

	// After the TTL: gone on the replica, and both rank the same without them.
	time.Sleep(time.Until(time.UnixMilli(int64(x.ExpiresAtMs)).Add(50 * time.Millisecond)))
	if p := localPredicted(); p != nil {
		t.Errorf("after the TTL: %+v", p)
	}
	route = sameRoute("after the TTL")
	if top := route.Ranked[0]; top.Candidate.InstanceID != "a" || route.Ranked[1].PredictedBlocks != 0 {
		t.Errorf("after the TTL: %+v", route.Ranked)
	}
	if st := li.Status()[0]; st.PredictedDropped != 0 {
		t.Errorf("status: %+v", st)
	}
}

// What only the server can refuse: a server that records no predictions, and a name past
// its limit.
func TestRecordPredictionServerErrors(t *testing.T) {
	s := startServer(t, "--predicted-max-entries", "0")
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	_, err := c.RecordPrediction(ctx, testContext, Holder{BackendID: "x"}, []uint64{1})
	if errors.Is(err, ErrInvalidArgument) {
		t.Skipf("the server (KVATLAS_SERVER_BIN) predates kPredict (%v)", err)
	}
	if !errors.Is(err, ErrFailedPrecondition) {
		t.Errorf("predicted_max_entries 0: %v, want failed_precondition", err)
	}
	long := make([]byte, 4096)
	for i := range long {
		long[i] = 'x'
	}
	_, err = c.RecordPrediction(ctx, testContext, Holder{BackendID: string(long)}, []uint64{1})
	if !errors.Is(err, ErrInvalidArgument) || !contains(err.Error(), "backend_id") {
		t.Errorf("a backend id of 4096 bytes: %v, want invalid_argument naming backend_id", err)
	}
}
