package kvatlas

// Approximate mode (docs/routing.md §Approximate mode): Candidate.Predict in kRoute's
// approximate trailer, and the predicted blocks of the answer's trailer.

import (
	"testing"
	"time"
)

// The kRoute request of docs/protocol.md §kRoute, byte for byte (decode_scale 0.1 given
// explicitly, queue_scale and the cost terms at their defaults): without Predict it ends
// after the seed's presence byte; with it (and queue_scale 0.3), the queue_scale and
// approximate trailers follow.
func TestRoutePredictDocumentedBytes(t *testing.T) {
	rank := uint32(2)
	o := DefaultRouteOptions()
	o.DecodeScale = 0.1
	r := RouteRequest{
		Lookup: LookupRequest{Context: Context{Tenant: "default", Model: "m", BlockSize: 2},
			Hashes: []uint64{1}, IncludeLocations: true},
		Candidates: []Candidate{{InstanceID: "a", DPRank: &rank, QueuedPrefillTokens: 32,
			ActiveDecodeBlocks: 5}},
		Options: &o,
	}
	const head = "190764656661756c74016d000200010101000000000000000001" + // lookup
		"010161010220" + "05" + // candidates
		"000000000000f03f" + "000000000000e83f" + "000000000000d03f" + "000000000000e03f" +
		"000000000000f03f"
	const tail = "0000000000000000" + "00" // temperature 0, no seed
	const plain = head + "9a9999999999b93f" + tail
	if got := hexSpaced(encodeRoute(&r)); got != plain {
		t.Errorf("route:\n got %s\nwant %s", got, plain)
	}
	// No options: the defaults, decode_scale 0.01, and no trailer either.
	r.Options = nil
	if got, want := hexSpaced(encodeRoute(&r)), head+"7b14ae47e17a843f"+tail; got != want {
		t.Errorf("route with the default options:\n got %s\nwant %s", got, want)
	}
	r.Options = &o
	// A PREDICTED weight of its own, no candidate flagged: the trailers with weight 0.5 and
	// no index; the default weight given explicitly changes nothing.
	half, one := 0.5, 1.0
	o.PredictedWeight = &one
	if got := hexSpaced(encodeRoute(&r)); got != plain {
		t.Errorf("route with the default PREDICTED weight:\n got %s\nwant %s", got, plain)
	}
	o.QueueScale = 0.3
	o.PredictedWeight = &half
	const weighted = "01333333333333d33f" + "01000000000000e03f00"
	if got := hexSpaced(encodeRoute(&r)); got != plain+weighted {
		t.Errorf("route with PREDICTED 0.5:\n got %s\nwant %s", got, plain+weighted)
	}
	o.PredictedWeight = nil
	r.Candidates[0].Predict = true
	const trailers = "01333333333333d33f" + "01000000000000f03f0100"
	if got := hexSpaced(encodeRoute(&r)); got != plain+trailers {
		t.Errorf("route with a predict candidate:\n got %s\nwant %s", got, plain+trailers)
	}
}

// The cost terms trailer (docs/protocol.md §kRoute): written only when replica_credit,
// excess_queue_scale or excess_queue_epsilon is not the default, after the queue_scale
// trailer (then always written) and the approximate one (a lone 0x00 when not approximate).
func TestRouteCostTermsTrailerBytes(t *testing.T) {
	o := DefaultRouteOptions()
	r := RouteRequest{
		Lookup:     LookupRequest{Context: Context{Model: "m", BlockSize: 2}, Hashes: []uint64{1}},
		Candidates: []Candidate{{InstanceID: "a"}},
		Options:    &o,
	}
	base := hexSpaced(encodeRoute(&r))
	if got := hexSpaced(encodeRoute(&RouteRequest{Lookup: r.Lookup, Candidates: r.Candidates})); got != base {
		t.Errorf("the defaults given explicitly:\n got %s\nwant %s", got, base)
	}
	const queueScale = "019a9999999999d93f" // the default 0.4, written before the terms
	for _, c := range []struct {
		name  string
		set   func(*RouteOptions)
		terms string
	}{
		{"replica_credit 0.5", func(o *RouteOptions) { o.ReplicaCredit = 0.5 },
			"000000000000e03f" + "666666666666e63f" + "000000000000e03f"},
		{"excess_queue_scale 2", func(o *RouteOptions) { o.ExcessQueueScale = 2 },
			"000000000000f03f" + "0000000000000040" + "000000000000e03f"},
		{"excess_queue_epsilon 0.25", func(o *RouteOptions) { o.ExcessQueueEpsilon = 0.25 },
			"000000000000f03f" + "666666666666e63f" + "000000000000d03f"},
		// A literal that leaves the terms out has them off: 0, sent as such.
		{"a literal", func(o *RouteOptions) {
			*o = RouteOptions{Weights: DefaultTierWeights, PrefillScale: 1, QueueScale: 0.4, DecodeScale: 0.01}
		}, "0000000000000000" + "0000000000000000" + "0000000000000000"},
	} {
		o = DefaultRouteOptions()
		c.set(&o)
		r.Candidates[0].Predict = false
		want := base + queueScale + "00" + "01" + c.terms
		if got := hexSpaced(encodeRoute(&r)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
		// Approximate too: the approximate trailer in full between them.
		r.Candidates[0].Predict = true
		want = base + queueScale + "01000000000000f03f0100" + "01" + c.terms
		if got := hexSpaced(encodeRoute(&r)); got != want {
			t.Errorf("%s, approximate:\n got %s\nwant %s", c.name, got, want)
		}
	}
	// Approximate with the terms at their defaults: no terms trailer.
	o = DefaultRouteOptions()
	if got, want := hexSpaced(encodeRoute(&r)), base+queueScale+"01000000000000f03f0100"; got != want {
		t.Errorf("approximate only:\n got %s\nwant %s", got, want)
	}
}

func TestRouteAnswerPredictedTrailer(t *testing.T) {
	e := &encoder{}
	e.u64(9)    // revision
	e.varint(8) // prompt_blocks
	e.varint(0) // blocks_found
	e.varint(1) // ranked
	e.varint(0) // index
	putCandidate(e, &Candidate{InstanceID: "q"})
	for i := 0; i < 8; i++ {
		e.varint(0) // matched, blocks_from
	}
	for i := 0; i < 7; i++ {
		e.f64(0)
	}
	plain := append([]byte(nil), e.b...)
	e.flag(true)
	e.varint(8) // matched.predicted
	e.varint(6) // predicted_blocks
	a, err := decodeRouteAnswer(e.b)
	if err != nil || len(a.Ranked) != 1 || a.Ranked[0].Matched.Predicted != 8 ||
		a.Ranked[0].PredictedBlocks != 6 {
		t.Errorf("answer with the predicted trailer: %+v, %v", a, err)
	}
	if a, err := decodeRouteAnswer(plain); err != nil || a.Ranked[0].PredictedBlocks != 0 {
		t.Errorf("answer without it: %+v, %v", a, err)
	}
	if _, err := decodeRouteAnswer(append(plain, 2)); err == nil || !contains(err.Error(), "predicted") {
		t.Errorf("a bad trailer flag: %v, want an error naming predicted", err)
	}
}

// A route that picks a Predict candidate records the request's blocks as predicted on it;
// the next route with that prompt credits them and prefers it. A candidate without the
// flag gets nothing recorded.
func TestRoutePredicts(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	tokens := seqTokens(4*8, 5000) // 8 blocks
	plainTokens := seqTokens(4*8, 9000)
	route := func(tokens []uint32, candidates ...Candidate) *RouteAnswer {
		t.Helper()
		a, err := c.Route(ctx, RouteRequest{Lookup: LookupRequest{Context: testContext, Tokens: tokens},
			Candidates: candidates})
		if err != nil {
			t.Fatalf("Route: %v", err)
		}
		return a
	}
	// Picked without the flag first: nothing may be recorded for "plain".
	if a := route(plainTokens, Candidate{InstanceID: "plain"}); a.Ranked[0].Candidate.InstanceID != "plain" {
		t.Fatalf("route to plain: %+v", a)
	}
	first := route(tokens, Candidate{InstanceID: "quiet", Predict: true})
	if first.Ranked[0].Candidate.InstanceID != "quiet" || first.Ranked[0].PredictedBlocks != 0 {
		t.Fatalf("first route: %+v", first)
	}
	candidates := []Candidate{{InstanceID: "other"}, {InstanceID: "quiet", Predict: true}}
	var second *RouteAnswer
	// Recorded within a 50 ms batch and one commit: a bounded wait, not a timed assertion.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		second = route(tokens, candidates...)
		if second.Ranked[0].PredictedBlocks == 8 || time.Now().After(deadline) {
			break
		}
	}
	top := second.Ranked[0]
	if top.Candidate.InstanceID != "quiet" || top.Index != 1 || top.PredictedBlocks != 8 ||
		top.Matched.Predicted != 8 || top.Credit != 8 {
		t.Fatalf("second route: %+v", second.Ranked)
	}
	if other := second.Ranked[1]; other.PredictedBlocks != 0 || other.Matched.Predicted != 0 {
		t.Errorf("other: %+v", other)
	}
	// PREDICTED weight 0: the predicted blocks are still reported, credited nothing, so
	// "other", first, wins the tie.
	zero := 0.0
	o := DefaultRouteOptions()
	o.PredictedWeight = &zero
	unweighted, err := c.Route(ctx, RouteRequest{Lookup: LookupRequest{Context: testContext, Tokens: tokens},
		Candidates: candidates, Options: &o})
	if err != nil {
		t.Fatalf("Route with PREDICTED 0: %v", err)
	}
	if top := unweighted.Ranked[0]; top.Candidate.InstanceID != "other" || unweighted.Ranked[1].PredictedBlocks != 8 ||
		unweighted.Ranked[1].Credit != 0 {
		t.Errorf("route with PREDICTED 0: %+v", unweighted.Ranked)
	}
	// "plain" was routed before "quiet"'s prediction, which has now applied.
	third := route(plainTokens, Candidate{InstanceID: "plain"}, Candidate{InstanceID: "quiet", Predict: true})
	for _, r := range third.Ranked {
		if r.PredictedBlocks != 0 || r.Matched.Predicted != 0 {
			t.Errorf("predicted blocks for %s without a predict route: %+v", r.Candidate.InstanceID, r)
		}
	}
}
