package kvatlas

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
)

// The route cost of the server's kRoute and POST /v1/route (common/src/routing.cc,
// docs/routing.md), for routing decisions in the caller's process (the C++
// kvatlas::Scorer): over a LocalIndex's lookups, or a Client.Lookup answer.

// maxRoutingScale bounds the scales so that no cost overflows (the server's
// kMaxRoutingScale).
const maxRoutingScale = 1e6

// shown writes a number as the server's messages do (C's "%.6g": "1.5", "2e+06", "inf",
// "nan").
func shown(v float64) string {
	switch {
	case math.IsNaN(v) && math.Signbit(v):
		return "-nan"
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// ValidateRouteOptions fails with ErrInvalidArgument naming the first option out of
// range, as the server does.
func ValidateRouteOptions(o RouteOptions) error {
	const fraction, scale = "a number from 0 to 1", "a finite number from 0 to 1000000"
	predicted := 1.0
	if o.PredictedWeight != nil {
		predicted = *o.PredictedWeight
	}
	check := func(v, max float64, field, what string) error {
		if !math.IsInf(v, 0) && !math.IsNaN(v) && v >= 0 && v <= max {
			return nil
		}
		return newError(CodeInvalidArgument, fmt.Sprintf("%s: must be %s, got %s", field, what, shown(v)))
	}
	for _, c := range []struct {
		v, max      float64
		field, what string
	}{
		{o.Weights.GPU, 1, "weights.GPU", fraction},
		{o.Weights.CPU, 1, "weights.CPU", fraction},
		{o.Weights.Disk, 1, "weights.DISK", fraction},
		{o.Weights.Shared, 1, "weights.SHARED", fraction},
		{predicted, 1, "weights.PREDICTED", fraction},
		{o.PrefillScale, maxRoutingScale, "prefill_scale", scale},
		{o.QueueScale, maxRoutingScale, "queue_scale", scale},
		{o.DecodeScale, maxRoutingScale, "decode_scale", scale},
		{o.ReplicaCredit, 1, "replica_credit", fraction},
		{o.ExcessQueueScale, maxRoutingScale, "excess_queue_scale", scale},
		{o.ExcessQueueEpsilon, maxRoutingScale, "excess_queue_epsilon", scale},
		{o.Temperature, math.MaxFloat64, "temperature", "a finite number >= 0"},
	} {
		if err := check(c.v, c.max, c.field, c.what); err != nil {
			return err
		}
	}
	return nil
}

// MatchesFromLookup is each candidate's prefix in a lookup answer over every instance:
// its instance's (or, with DPRank, that rank's) GPU/CPU/DISK prefixes, the longest
// shared-backend prefix, and its predicted prefix (LookupAnswer.Predicted): that rank's,
// or the best over the instance's ranks without DPRank — what the server's route reads
// from its own predicted table.
func MatchesFromLookup(a *LookupAnswer, candidates []Candidate) []PrefixMatch {
	var shared uint32
	for _, m := range a.Shared {
		if m.Blocks > shared {
			shared = m.Blocks
		}
	}
	byID := make(map[string]*InstanceMatch, len(a.Instances))
	for i := range a.Instances {
		if _, dup := byID[a.Instances[i].InstanceID]; !dup {
			byID[a.Instances[i].InstanceID] = &a.Instances[i]
		}
	}
	out := make([]PrefixMatch, len(candidates))
	for i, c := range candidates {
		out[i].Shared = shared
		inst := byID[c.InstanceID]
		if inst == nil {
			continue
		}
		blocks := inst.Blocks
		if c.DPRank != nil {
			blocks = TierBlocks{}
			for _, r := range inst.DPRanks {
				if r.DPRank == *c.DPRank {
					blocks = r.Blocks
				}
			}
		}
		out[i].GPU, out[i].CPU, out[i].Disk = blocks.GPU, blocks.CPU, blocks.Disk
	}
	// Predictions are few (instances a router sent work to without events): a pass per
	// prediction costs less than an index.
	for _, p := range a.Predicted {
		for i, c := range candidates {
			if c.InstanceID == p.InstanceID && (c.DPRank == nil || *c.DPRank == p.DPRank) && p.Blocks > out[i].Predicted {
				out[i].Predicted = p.Blocks
			}
		}
	}
	return out
}

func clamp(v, lo, hi uint32) uint32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// loadedHolders are RouteOptions.ReplicaCredit's holders: the prefix each candidate holds
// itself (GPU ∪ CPU ∪ DISK, predicted blocks included, at most the prompt) when its queue
// is above mean, 0 otherwise.
func loadedHolders(matches []PrefixMatch, queued []float64, mean float64, promptBlocks uint32) []uint32 {
	held := make([]uint32, len(matches))
	for i := range matches {
		if queued[i] > mean {
			h := matches[i].Disk
			if matches[i].Predicted > h {
				h = matches[i].Predicted
			}
			if h > promptBlocks {
				h = promptBlocks
			}
			held[i] = h
		}
	}
	return held
}

// replicaBlocks is Σ over the blocks from `from` on of (loaded holders of the block / N),
// held having one entry per candidate, N of them: Σ_k max(held_k − from, 0) / N.
func replicaBlocks(held []uint32, from uint32) float64 {
	blocks := 0.0
	for _, h := range held {
		if h > from {
			blocks += float64(h - from)
		}
	}
	return blocks / float64(len(held))
}

// ScoreCandidates ranks candidates for a prompt of promptBlocks blocks from their matches
// (parallel to candidates), lowest cost first; with a temperature, the sampled pick is
// moved first (docs/routing.md). blockSize converts queued prefill tokens to blocks. The
// costs are the server's to the bit (common/src/routing.cc, the same operations in the
// same order): predicted blocks, the replica credit and the excess queue term included.
func ScoreCandidates(o RouteOptions, promptBlocks, blockSize uint32, candidates []Candidate, matches []PrefixMatch) ([]ScoredCandidate, error) {
	if err := ValidateRouteOptions(o); err != nil {
		return nil, err
	}
	if len(candidates) == 0 {
		return nil, newError(CodeInvalidArgument, "candidates: at least one is needed")
	}
	if len(matches) != len(candidates) {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf(
			"matches: one per candidate is needed, got %d for %d candidates", len(matches), len(candidates)))
	}
	if blockSize == 0 {
		return nil, newError(CodeInvalidArgument, "block_size: must be a positive integer")
	}
	queued := make([]float64, len(candidates))
	meanQueued := 0.0
	for i := range candidates {
		queued[i] = float64(candidates[i].QueuedPrefillTokens) / float64(blockSize)
		meanQueued += queued[i]
	}
	meanQueued /= float64(len(queued))
	var held []uint32
	if o.ReplicaCredit > 0 {
		held = loadedHolders(matches, queued, meanQueued, promptBlocks)
	}
	scored := make([]ScoredCandidate, len(candidates))
	w := o.Weights
	wPredicted := 1.0
	if o.PredictedWeight != nil {
		wPredicted = *o.PredictedWeight
	}
	for i := range candidates {
		s := &scored[i]
		s.Index, s.Candidate, s.Matched = uint64(i), candidates[i], matches[i]
		// Each block counts once, in the first tier that covers it; nothing past the prompt.
		gpu := matches[i].GPU
		if gpu > promptBlocks {
			gpu = promptBlocks
		}
		cpu := clamp(matches[i].CPU, gpu, promptBlocks)
		disk := clamp(matches[i].Disk, cpu, promptBlocks)
		// Predicted blocks sit where the engine would have them (its device), past what it
		// is known to hold and before what every candidate reaches through a shared backend.
		predicted := clamp(matches[i].Predicted, disk, promptBlocks)
		shared := clamp(matches[i].Shared, predicted, promptBlocks)
		s.GPUBlocks, s.CPUBlocks, s.DiskBlocks = gpu, cpu-gpu, disk-cpu
		s.PredictedBlocks, s.SharedBlocks = predicted-disk, shared-predicted
		s.Credit = w.GPU*float64(s.GPUBlocks) + w.CPU*float64(s.CPUBlocks) +
			w.Disk*float64(s.DiskBlocks) + wPredicted*float64(s.PredictedBlocks) +
			w.Shared*float64(s.SharedBlocks)
		if o.ReplicaCredit > 0 {
			s.Credit += o.ReplicaCredit * replicaBlocks(held, shared)
		}
		s.NewPrefillBlocks = math.Max(float64(promptBlocks)-s.Credit, 0)
		s.QueuedPrefillBlocks = queued[i]
		s.PrefillCost = o.PrefillScale*s.NewPrefillBlocks + o.QueueScale*s.QueuedPrefillBlocks
		if o.ExcessQueueScale > 0 {
			bound := (1 + o.ExcessQueueEpsilon) * meanQueued
			s.PrefillCost += o.ExcessQueueScale * math.Max(queued[i]-bound, 0)
		}
		s.DecodeCost = o.DecodeScale * float64(candidates[i].ActiveDecodeBlocks)
		s.Cost = s.PrefillCost + s.DecodeCost
	}
	sort.SliceStable(scored, func(a, b int) bool { return scored[a].Cost < scored[b].Cost })
	if o.Temperature <= 0 {
		scored[0].Probability = 1
		return scored, nil
	}
	// Softmax over costs normalised to [0, 1]: p ∝ exp(−normalised / temperature).
	low := scored[0].Cost
	span := scored[len(scored)-1].Cost - low
	total := 0.0
	for i := range scored {
		normalised := 0.0
		if span > 0 {
			normalised = (scored[i].Cost - low) / span
		}
		scored[i].Probability = math.Exp(-normalised / o.Temperature)
		total += scored[i].Probability
	}
	for i := range scored {
		scored[i].Probability /= total
	}
	var seed uint64
	if o.Seed != nil {
		seed = *o.Seed
	} else {
		seed = randomSeed()
	}
	// The top 53 bits of mt19937_64's first output: the server's draw for the same seed.
	u := float64(newMT19937_64(seed).next()>>11) * (1.0 / (1 << 53))
	pick := len(scored) - 1
	cumulative := 0.0
	for i := range scored {
		cumulative += scored[i].Probability
		if u < cumulative {
			pick = i
			break
		}
	}
	picked := scored[pick]
	copy(scored[1:pick+1], scored[:pick])
	scored[0] = picked
	return scored, nil
}

// PromptBlocks is the request's prompt length in blocks: its hashes, or its tokens
// rounded up (a partial last block is prefilled too).
func PromptBlocks(r *LookupRequest) uint32 {
	var n uint64
	if r.Tokens == nil {
		n = uint64(len(r.Hashes))
	} else if r.Context.BlockSize > 0 {
		n = (uint64(len(r.Tokens)) + uint64(r.Context.BlockSize) - 1) / uint64(r.Context.BlockSize)
	}
	if n > math.MaxUint32 {
		n = math.MaxUint32
	}
	return uint32(n)
}

// RouteFromLookup ranks r's candidates from lookup, the answer to r.Lookup over every
// instance: what the server's kRoute answers for r.
func RouteFromLookup(r *RouteRequest, lookup *LookupAnswer) (*RouteAnswer, error) {
	opts := DefaultRouteOptions()
	if r.Options != nil {
		opts = *r.Options
	}
	a := &RouteAnswer{Revision: lookup.Revision, PromptBlocks: PromptBlocks(&r.Lookup),
		BlocksFound: lookup.BlocksFound}
	ranked, err := ScoreCandidates(opts, a.PromptBlocks, r.Lookup.Context.BlockSize, r.Candidates,
		MatchesFromLookup(lookup, r.Candidates))
	if err != nil {
		return nil, err
	}
	a.Ranked = ranked
	return a, nil
}

// mt19937_64 is C++'s std::mt19937_64, whose output the standard fixes: the server samples
// with it, so a seed picks the same candidate here.
type mt19937_64 struct {
	mt [312]uint64
	i  int
}

func newMT19937_64(seed uint64) *mt19937_64 {
	m := &mt19937_64{i: 312}
	m.mt[0] = seed
	for i := 1; i < 312; i++ {
		m.mt[i] = 6364136223846793005*(m.mt[i-1]^(m.mt[i-1]>>62)) + uint64(i)
	}
	return m
}

func (m *mt19937_64) next() uint64 {
	const upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
	if m.i >= 312 {
		for i := 0; i < 312; i++ {
			x := (m.mt[i] & upper) | (m.mt[(i+1)%312] & lower)
			xa := x >> 1
			if x&1 != 0 {
				xa ^= 0xB5026F5AA96619E9
			}
			m.mt[i] = m.mt[(i+156)%312] ^ xa
		}
		m.i = 0
	}
	x := m.mt[m.i]
	m.i++
	x ^= (x >> 29) & 0x5555555555555555
	x ^= (x << 17) & 0x71D67FFFEDA60000
	x ^= (x << 37) & 0xFFF7EEE000000000
	x ^= x >> 43
	return x
}

// randomSeed draws a sampler seed when the options name none.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
