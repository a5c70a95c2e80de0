package kvatlas

// The local route cost (ScoreCandidates) against costs worked out by hand, with the cases
// and numbers of the server's tests (tests/unit/common/routing_test.cc), and the option
// checks. No server is needed.

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func scoreT(t *testing.T, o RouteOptions, promptBlocks uint32, candidates []Candidate, matches []PrefixMatch) []ScoredCandidate {
	t.Helper()
	scored, err := ScoreCandidates(o, promptBlocks, 16, candidates, matches)
	if err != nil {
		t.Fatalf("ScoreCandidates: %v", err)
	}
	return scored
}

func ids(scored []ScoredCandidate) string {
	var out []string
	for _, s := range scored {
		out = append(out, s.Candidate.InstanceID)
	}
	return strings.Join(out, ",")
}

// termsOff are the options of the server's tests from before the cost terms were on by
// default: queue_scale 0.3, decode_scale 0.1, no replica credit, no excess queue term.
func termsOff() RouteOptions {
	o := DefaultRouteOptions()
	o.QueueScale, o.DecodeScale = 0.3, 0.1
	o.ReplicaCredit, o.ExcessQueueScale, o.ExcessQueueEpsilon = 0, 0, 0
	return o
}

func TestDefaultRouteOptions(t *testing.T) {
	want := RouteOptions{Weights: TierWeights{GPU: 1, CPU: 0.75, Disk: 0.25, Shared: 0.5},
		PrefillScale: 1, QueueScale: 0.4, DecodeScale: 0.01, ReplicaCredit: 1,
		ExcessQueueScale: 0.7, ExcessQueueEpsilon: 0.5}
	if got := DefaultRouteOptions(); got != want {
		t.Errorf("DefaultRouteOptions() = %+v, want %+v", got, want)
	}
	// The kRoute trailers leave out exactly these values.
	d := DefaultRouteOptions()
	if defaultQueueScale != d.QueueScale || defaultReplicaCredit != d.ReplicaCredit ||
		defaultExcessQueueScale != d.ExcessQueueScale || defaultExcessQueueEpsilon != d.ExcessQueueEpsilon {
		t.Errorf("the codec's defaults differ from DefaultRouteOptions()")
	}
	if err := ValidateRouteOptions(d); err != nil {
		t.Errorf("the defaults are refused: %v", err)
	}
}

// Every term at its default, worked out by hand. Prompt of 10 blocks of 16 tokens, and a
// shared backend holding 2 blocks (every candidate's Shared). Queues 10, 3, 0 and 0.5
// blocks: mean 3.375, and only a's is above it, so a's 10 blocks are the loaded holders'.
//
//	a: 10 on GPU: credit 10, new 0; queue 0.4·10 + excess 0.7·(10 − 1.5·3.375) = 7.45625;
//	   decode 0.01·50 = 0.5: 7.95625.
//	b: 4 GPU + 2 DISK + replica (10 − 6)/4 = 1: credit 4 + 0.5 + 1 = 5.5, new 4.5;
//	   + 0.4·3 = 5.7.
//	c: 2 shared + replica (10 − 2)/4: credit 1 + 2 = 3, new 7: 7.
//	d: 7 predicted (shared 2 below them adds nothing) + replica (10 − 7)/4: credit 7.75,
//	   new 2.25; + 0.4·0.5 = 2.45; decode 0.01·10 = 0.1: 2.45 + 0.1 = 2.5500000000000003.
func TestScoreCandidatesDefaultTerms(t *testing.T) {
	candidates := []Candidate{{InstanceID: "a", QueuedPrefillTokens: 160, ActiveDecodeBlocks: 50},
		{InstanceID: "b", QueuedPrefillTokens: 48}, {InstanceID: "c"},
		{InstanceID: "d", QueuedPrefillTokens: 8, ActiveDecodeBlocks: 10}}
	matches := []PrefixMatch{{GPU: 10, CPU: 10, Disk: 10, Shared: 2}, {GPU: 4, CPU: 4, Disk: 6, Shared: 2},
		{Shared: 2}, {Shared: 2, Predicted: 7}}
	scored := scoreT(t, DefaultRouteOptions(), 10, candidates, matches)
	if got := ids(scored); got != "d,b,c,a" {
		t.Fatalf("ranking %s, want d,b,c,a: %+v", got, scored)
	}
	type costs struct {
		credit, newBlocks, queued, prefill, decode, cost float64
		predicted, shared                                uint32
	}
	for i, want := range []costs{
		{7.75, 2.25, 0.5, 2.45, 0.1, 2.5500000000000003, 7, 0},
		{5.5, 4.5, 3, 5.7, 0, 5.7, 0, 0},
		{3, 7, 0, 7, 0, 7, 0, 2},
		{10, 0, 10, 7.45625, 0.5, 7.95625, 0, 0},
	} {
		s := scored[i]
		got := costs{s.Credit, s.NewPrefillBlocks, s.QueuedPrefillBlocks, s.PrefillCost, s.DecodeCost,
			s.Cost, s.PredictedBlocks, s.SharedBlocks}
		if got != want {
			t.Errorf("%s: %+v, want %+v", s.Candidate.InstanceID, got, want)
		}
	}
}

// The server's "experimental terms" case: a holds all 10 blocks with 10 queued, b all 10
// with 2 queued, c and d nothing, idle: mean queue 3 blocks.
func TestScoreCandidatesReplicaCreditAndExcessQueue(t *testing.T) {
	candidates := []Candidate{{InstanceID: "a", QueuedPrefillTokens: 160},
		{InstanceID: "b", QueuedPrefillTokens: 32}, {InstanceID: "c"}, {InstanceID: "d"}}
	matches := []PrefixMatch{{GPU: 10, CPU: 10, Disk: 10}, {GPU: 10, CPU: 10, Disk: 10}, {}, {}}
	// Off: c's 10 blocks are new (cost 10), a pays queue_scale · 10 = 3, b 0.6.
	off := scoreT(t, termsOff(), 10, candidates, matches)
	if ids(off) != "b,a,c,d" || off[2].Cost != 10 || off[1].Cost != 3 || off[0].Cost != 0.6 {
		t.Errorf("terms off: %+v", off)
	}

	// Replica credit 0.8: only a's queue is above the mean, so each of c's 10 blocks has 1
	// loaded holder of 4 candidates: credit 0.8 · 10 · 1/4 = 2, new 8. a and b credit
	// nothing more (nothing past their own 10 blocks).
	o := termsOff()
	o.ReplicaCredit = 0.8
	ranked := scoreT(t, o, 10, candidates, matches)
	if ids(ranked) != "b,a,c,d" {
		t.Fatalf("replica credit 0.8: ranking %s", ids(ranked))
	}
	if c := ranked[2]; c.Credit != 2 || c.NewPrefillBlocks != 8 || c.Cost != 8 {
		t.Errorf("replica credit 0.8, c: %+v", c)
	}
	if a := ranked[1]; a.Credit != 10 || a.Cost != 3 {
		t.Errorf("replica credit 0.8, a: %+v", a)
	}
	if b := ranked[0]; b.Credit != 10 || b.Cost != 0.6 {
		t.Errorf("replica credit 0.8, b: %+v", b)
	}

	// Excess queue 2 over (1 + 1) · mean = 6 blocks: a's 10 queued blocks are 4 over, + 8.
	o = termsOff()
	o.ExcessQueueScale, o.ExcessQueueEpsilon = 2, 1
	ranked = scoreT(t, o, 10, candidates, matches)
	if ids(ranked) != "b,c,d,a" {
		t.Fatalf("excess queue: ranking %s", ids(ranked))
	}
	if ranked[0].PrefillCost != 0.6 || ranked[3].PrefillCost != 3+8 || ranked[3].Cost != 11 {
		t.Errorf("excess queue: %+v", ranked)
	}
	// Epsilon 3: the bound is 12 blocks, a's 10 are not over it.
	o.ExcessQueueEpsilon = 3
	if ranked = scoreT(t, o, 10, candidates, matches); ranked[1].Candidate.InstanceID != "a" || ranked[1].Cost != 3 {
		t.Errorf("excess queue under the bound: %+v", ranked)
	}
}

// The replica credit counts from the candidate's own shared prefix on, holders' prefixes
// include their predicted blocks and stop at the prompt, and a holder whose queue is not
// above the mean counts for nothing.
func TestScoreCandidatesReplicaHolders(t *testing.T) {
	o := termsOff()
	o.ReplicaCredit = 1
	// Queues 10, 0, 0, 2 blocks: mean 3. a holds 20 blocks on disk (10 of the prompt), b 4
	// on GPU and 4 shared, c nothing, e 6 predicted and 2 queued (below the mean: no holder).
	candidates := []Candidate{{InstanceID: "a", QueuedPrefillTokens: 160}, {InstanceID: "b"},
		{InstanceID: "c"}, {InstanceID: "e", QueuedPrefillTokens: 32}}
	matches := []PrefixMatch{{Disk: 20}, {GPU: 4, CPU: 4, Disk: 4, Shared: 8}, {}, {Predicted: 6}}
	scored := scoreT(t, o, 10, candidates, matches)
	byID := map[string]ScoredCandidate{}
	for _, s := range scored {
		byID[s.Candidate.InstanceID] = s
	}
	// b: 4 GPU + 0.5 · 4 shared + (10 − 8)/4 = 6.5. c: 10/4 = 2.5. e: 6 predicted +
	// (10 − 6)/4 = 7. a: 0.25 · 10 disk, nothing past its 10.
	for id, want := range map[string]float64{"a": 2.5, "b": 6.5, "c": 2.5, "e": 7} {
		if got := byID[id].Credit; got != want {
			t.Errorf("%s: credit %v, want %v", id, got, want)
		}
	}
	// A predicted prefix makes a loaded holder: e's queue now above the mean (4 of 14/4
	// = 3.5 blocks), a's 10 too. c: (10 + 6)/4 = 4.
	candidates[3].QueuedPrefillTokens = 64
	scored = scoreT(t, o, 10, candidates, matches)
	for _, s := range scored {
		if s.Candidate.InstanceID == "c" && s.Credit != 4 {
			t.Errorf("c with two loaded holders: credit %v, want 4", s.Credit)
		}
	}
}

// The server's predicted case: a 2 on GPU and 6 predicted (4 past GPU), b 8 predicted, c
// 5 shared and 3 predicted (the predicted ones first, then shared past them).
func TestScoreCandidatesPredicted(t *testing.T) {
	a := PrefixMatch{GPU: 2, CPU: 2, Disk: 2, Predicted: 6}
	b := PrefixMatch{Predicted: 8}
	c := PrefixMatch{Shared: 5, Predicted: 3}
	o := DefaultRouteOptions()
	scored := scoreT(t, o, 10, []Candidate{{InstanceID: "a"}, {InstanceID: "b"}, {InstanceID: "c"}},
		[]PrefixMatch{a, b, c})
	if ids(scored) != "b,a,c" {
		t.Fatalf("ranking %s: %+v", ids(scored), scored)
	}
	if s := scored[0]; s.PredictedBlocks != 8 || s.Credit != 8 {
		t.Errorf("b: %+v", s)
	}
	if s := scored[1]; s.GPUBlocks != 2 || s.PredictedBlocks != 4 || s.Credit != 6 {
		t.Errorf("a: %+v", s)
	}
	if s := scored[2]; s.PredictedBlocks != 3 || s.SharedBlocks != 2 || s.Credit != 3.0+0.5*2 {
		t.Errorf("c: %+v", s)
	}
	// Weighed by the PREDICTED weight: at 0.5, a (2 + 0.5·4 = 4) ties b (0.5·8 = 4); at 0
	// predictions count for nothing.
	half, zero, over := 0.5, 0.0, 1.5
	o.PredictedWeight = &half
	scored = scoreT(t, o, 10, []Candidate{{InstanceID: "a"}, {InstanceID: "b"}}, []PrefixMatch{a, b})
	if scored[0].Credit != 4 || scored[1].Credit != 4 || ids(scored) != "a,b" {
		t.Errorf("PREDICTED 0.5: %+v", scored)
	}
	o.PredictedWeight = &zero
	scored = scoreT(t, o, 10, []Candidate{{InstanceID: "b"}, {InstanceID: "a"}}, []PrefixMatch{b, a})
	if ids(scored) != "a,b" || scored[1].Credit != 0 || scored[1].PredictedBlocks != 8 {
		t.Errorf("PREDICTED 0: %+v", scored)
	}
	o.PredictedWeight = &over
	_, err := ScoreCandidates(o, 1, 16, []Candidate{{InstanceID: "a"}}, []PrefixMatch{{}})
	if err == nil || !strings.HasPrefix(errorMessage(err), "weights.PREDICTED: must be a number from 0 to 1, got 1.5") {
		t.Errorf("PREDICTED 1.5: %v", err)
	}
}

func errorMessage(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Message
	}
	return err.Error()
}

func TestValidateRouteOptionsRanges(t *testing.T) {
	for _, c := range []struct {
		set  func(*RouteOptions)
		want string
	}{
		{func(o *RouteOptions) { o.ReplicaCredit = 1.5 }, "replica_credit: must be a number from 0 to 1, got 1.5"},
		{func(o *RouteOptions) { o.ReplicaCredit = -0.5 }, "replica_credit: must be a number from 0 to 1, got -0.5"},
		{func(o *RouteOptions) { o.ExcessQueueScale = -1 }, "excess_queue_scale: must be a finite number from 0 to 1000000, got -1"},
		{func(o *RouteOptions) { o.ExcessQueueScale = 2e6 }, "excess_queue_scale: must be a finite number from 0 to 1000000, got 2e+06"},
		{func(o *RouteOptions) { o.ExcessQueueEpsilon = math.NaN() }, "excess_queue_epsilon: must be a finite number from 0 to 1000000, got nan"},
		{func(o *RouteOptions) { o.ExcessQueueEpsilon = math.Inf(1) }, "excess_queue_epsilon: must be a finite number from 0 to 1000000, got inf"},
	} {
		o := DefaultRouteOptions()
		c.set(&o)
		err := ValidateRouteOptions(o)
		if err == nil || !errors.Is(err, ErrInvalidArgument) || errorMessage(err) != c.want {
			t.Errorf("%s: got %v", c.want, err)
		}
	}
	// The ends of the ranges pass.
	o := DefaultRouteOptions()
	o.ReplicaCredit, o.ExcessQueueScale, o.ExcessQueueEpsilon = 0, 1e6, 1e6
	if err := ValidateRouteOptions(o); err != nil {
		t.Errorf("the largest values: %v", err)
	}
	// With every option out of range, the first one named is the server's first check:
	// fixing each in turn names the next.
	order := []struct {
		field string
		fix   func(*RouteOptions)
	}{
		{"weights.GPU", func(o *RouteOptions) { o.Weights.GPU = 1 }},
		{"weights.CPU", func(o *RouteOptions) { o.Weights.CPU = 1 }},
		{"weights.DISK", func(o *RouteOptions) { o.Weights.Disk = 1 }},
		{"weights.SHARED", func(o *RouteOptions) { o.Weights.Shared = 1 }},
		{"weights.PREDICTED", func(o *RouteOptions) { o.PredictedWeight = nil }},
		{"prefill_scale", func(o *RouteOptions) { o.PrefillScale = 1 }},
		{"queue_scale", func(o *RouteOptions) { o.QueueScale = 1 }},
		{"decode_scale", func(o *RouteOptions) { o.DecodeScale = 1 }},
		{"replica_credit", func(o *RouteOptions) { o.ReplicaCredit = 1 }},
		{"excess_queue_scale", func(o *RouteOptions) { o.ExcessQueueScale = 1 }},
		{"excess_queue_epsilon", func(o *RouteOptions) { o.ExcessQueueEpsilon = 1 }},
		{"temperature", func(o *RouteOptions) { o.Temperature = 0 }},
	}
	bad := -1.0
	all := RouteOptions{Weights: TierWeights{GPU: -1, CPU: -1, Disk: -1, Shared: -1}, PredictedWeight: &bad,
		PrefillScale: -1, QueueScale: -1, DecodeScale: -1, ReplicaCredit: -1, ExcessQueueScale: -1,
		ExcessQueueEpsilon: -1, Temperature: -1}
	for _, step := range order {
		err := ValidateRouteOptions(all)
		if err == nil || !strings.HasPrefix(errorMessage(err), step.field+": ") {
			t.Errorf("want %s checked next, got %v", step.field, err)
		}
		step.fix(&all)
	}
	if err := ValidateRouteOptions(all); err != nil {
		t.Errorf("all fixed: %v", err)
	}
}

// The largest accepted inputs give finite costs with every term at its largest.
func TestScoreCandidatesLargestInputs(t *testing.T) {
	most := uint64(math.MaxUint64)
	candidates := []Candidate{{InstanceID: "full", QueuedPrefillTokens: most, ActiveDecodeBlocks: most},
		{InstanceID: "idle"}, {InstanceID: "half", QueuedPrefillTokens: most / 2, ActiveDecodeBlocks: most / 2}}
	matches := []PrefixMatch{{Disk: math.MaxUint32}, {}, {}}
	seed := uint64(3)
	for _, temperature := range []float64{0, 1e-300, 0.5, 1e300} {
		o := DefaultRouteOptions()
		o.PrefillScale, o.QueueScale, o.DecodeScale = 1e6, 1e6, 1e6
		o.ExcessQueueScale, o.ReplicaCredit = 1e6, 1
		o.Temperature, o.Seed = temperature, &seed
		scored, err := ScoreCandidates(o, math.MaxUint32, 1, candidates, matches)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, s := range scored {
			for _, v := range []float64{s.Cost, s.Probability, s.Credit, s.NewPrefillBlocks,
				s.QueuedPrefillBlocks, s.PrefillCost, s.DecodeCost} {
				if math.IsInf(v, 0) || math.IsNaN(v) {
					t.Errorf("temperature %g, %s: %+v", temperature, s.Candidate.InstanceID, s)
				}
			}
			total += s.Probability
		}
		if math.Abs(total-1) > 1e-9 {
			t.Errorf("temperature %g: probabilities sum to %v", temperature, total)
		}
	}
}
