package kvatlas

// A LocalIndex's predictions (LocalIndexOptions.Predictions): the table's TTL on a given
// clock, its cap, renewals, its expiry queue, replacement by real records; and the
// LocalIndex's lookups and routes crediting them as the server's route does, on an
// injected clock.

import (
	"reflect"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func prefixesAt(tb *predictedTable, keys []uint64, now int64) map[Holder]uint32 {
	out := map[Holder]uint32{}
	for _, p := range tb.prefixes(keys, "", now) {
		out[Holder{p.InstanceID, p.DPRank}] = p.Blocks
	}
	return out
}

func TestPredictedTableExpiresOnItsClock(t *testing.T) {
	tb := newPredictedTable(100)
	q := Holder{BackendID: "q"}
	if n := tb.record(q, []uint64{1, 2, 3}, 1000*ms, 0); n != 3 {
		t.Fatalf("recorded %d, want 3", n)
	}
	keys := []uint64{1, 2, 3, 4}
	if got := prefixesAt(tb, keys, 999*ms); got[q] != 3 {
		t.Errorf("before the end: %v", got)
	}
	// Ended at its end (end <= now), also before a sweep: reads skip it.
	if got := prefixesAt(tb, keys, 1000*ms); len(got) != 0 {
		t.Errorf("at the end: %v", got)
	}
	if tb.stats.entries != 3 {
		t.Errorf("entries before a sweep: %d", tb.stats.entries)
	}
	// The next recording sweeps the ended entries.
	tb.record(Holder{BackendID: "r"}, []uint64{9}, 5000*ms, 1000*ms)
	if tb.stats.entries != 1 || tb.stats.expired != 3 || len(tb.buckets) != 1 {
		t.Errorf("after a sweep: %+v, %d buckets", tb.stats, len(tb.buckets))
	}
	// A prediction that ended already (a replayed log) records nothing.
	if n := tb.record(q, []uint64{1}, 1000*ms, 1000*ms); n != 0 || tb.buckets[q] != nil {
		t.Errorf("an ended prediction recorded %d", n)
	}
	// Only a prefix counts: a hole at key 2 cuts it.
	tb.record(q, []uint64{1, 3}, 9000*ms, 1000*ms)
	if got := prefixesAt(tb, []uint64{1, 2, 3}, 1000*ms); got[q] != 1 {
		t.Errorf("prefix with a hole: %v", got)
	}
}

func TestPredictedTableRenewals(t *testing.T) {
	tb := newPredictedTable(100)
	q := Holder{BackendID: "q", DPRank: 1}
	tb.record(q, []uint64{1, 2}, 1000*ms, 0)
	// Later: moved; earlier or equal: kept as it is (not counted as recorded).
	if n := tb.record(q, []uint64{1}, 2000*ms, 10*ms); n != 1 {
		t.Errorf("renewed %d, want 1", n)
	}
	if n := tb.record(q, []uint64{1, 2}, 1000*ms, 10*ms); n != 0 {
		t.Errorf("an earlier end recorded %d", n)
	}
	if tb.stats.entries != 2 || tb.stats.recorded != 3 {
		t.Errorf("stats: %+v", tb.stats)
	}
	// Past the first end: key 1's older queue element is skipped, key 2 ends.
	tb.record(Holder{BackendID: "other"}, []uint64{7}, 9000*ms, 1500*ms)
	if got := prefixesAt(tb, []uint64{1, 2}, 1500*ms); got[q] != 1 || tb.stats.entries != 2 || tb.stats.expired != 1 {
		t.Errorf("after the first end: %v, %+v", got, tb.stats)
	}
	// Renewed over and over, the queue stays within twice the entries (plus slack).
	for i := int64(0); i < 5000; i++ {
		tb.record(q, []uint64{1, 2, 3}, 3000*ms+i, 1500*ms)
	}
	if q := len(tb.queue) - tb.head; q > 2*tb.stats.entries+1024+3 {
		t.Errorf("queue of %d elements for %d entries", q, tb.stats.entries)
	}
	if got := prefixesAt(tb, []uint64{1, 2, 3}, 2999*ms); got[q] != 3 {
		t.Errorf("after the renewals: %v", got)
	}
	// Every renewal's element is gone once all ended.
	tb.record(Holder{BackendID: "late"}, []uint64{8}, 99000*ms, 9500*ms)
	if tb.stats.entries != 1 || len(tb.queue)-tb.head != 1 {
		t.Errorf("after every end: %+v, queue %d", tb.stats, len(tb.queue)-tb.head)
	}
}

func TestPredictedTableCap(t *testing.T) {
	tb := newPredictedTable(3)
	a, b := Holder{BackendID: "a"}, Holder{BackendID: "b"}
	tb.record(a, []uint64{1, 2}, 1000*ms, 0)
	if n := tb.record(b, []uint64{1, 2}, 1000*ms, 0); n != 1 {
		t.Errorf("recorded %d past the cap, want 1", n)
	}
	if tb.stats.entries != 3 || tb.stats.dropped != 1 {
		t.Errorf("stats at the cap: %+v", tb.stats)
	}
	// A renewal takes no new entry: allowed at the cap.
	if n := tb.record(a, []uint64{1, 2}, 2000*ms, 0); n != 2 || tb.stats.dropped != 1 {
		t.Errorf("renewal at the cap: %d, %+v", n, tb.stats)
	}
	// A holder all of whose keys were dropped keeps no bucket.
	if n := tb.record(Holder{BackendID: "c"}, []uint64{5}, 1000*ms, 0); n != 0 || len(tb.buckets) != 2 {
		t.Errorf("a dropped holder: %d, %d buckets", n, len(tb.buckets))
	}
	// Room again once entries end.
	if n := tb.record(Holder{BackendID: "c"}, []uint64{5}, 9000*ms, 1000*ms); n != 1 {
		t.Errorf("after b's end: %d (%+v)", n, tb.stats)
	}
}

// The expiry sweep pops at most predictedExpireBudget elements per recording, as the
// server's; reads skip what waits.
func TestPredictedTableExpiryBudget(t *testing.T) {
	tb := newPredictedTable(1 << 20)
	keys := make([]uint64, predictedExpireBudget+100)
	for i := range keys {
		keys[i] = uint64(i + 1)
	}
	q := Holder{BackendID: "q"}
	tb.record(q, keys, 1000*ms, 0)
	tb.record(Holder{BackendID: "r"}, []uint64{1}, 9000*ms, 2000*ms)
	if tb.stats.expired != predictedExpireBudget || tb.stats.entries != 101 {
		t.Errorf("one sweep: %+v", tb.stats)
	}
	if got := prefixesAt(tb, keys[predictedExpireBudget:], 2000*ms); got[q] != 0 {
		t.Errorf("ended entries waiting for the sweep are read: %v", got)
	}
	tb.record(Holder{BackendID: "r"}, []uint64{2}, 9000*ms, 2000*ms)
	if tb.stats.entries != 2 || tb.buckets[q] != nil {
		t.Errorf("second sweep: %+v", tb.stats)
	}
}

// A holder's stored, removed and cleared records drop its predictions in the context
// (what the server does on its events); evicted and holder-expired ones, and other holders'
// records, do not.
func TestPredictedTableReplacedByRealRecords(t *testing.T) {
	keys := []uint64{1, 2, 3}
	q, other := Holder{BackendID: "q", DPRank: 1}, Holder{BackendID: "q", DPRank: 2}
	for _, c := range []struct {
		op    FeedOp
		drops bool
	}{{OpStored, true}, {OpRemoved, true}, {OpCleared, true}, {OpEvicted, false}, {OpHolderExpired, false}} {
		tb := newPredictedTable(100)
		for _, h := range []Holder{q, other} {
			tb.apply(&FeedRecord{Op: OpPredicted, Holder: h, Keys: keys, ExpiresAtMs: 10_000}, 0)
		}
		tb.apply(&FeedRecord{Op: c.op, Holder: q, Keys: []uint64{99}}, 5*ms)
		got := prefixesAt(tb, keys, 5*ms)
		if want := map[bool]uint32{true: 0, false: 3}[c.drops]; got[q] != want || got[other] != 3 {
			t.Errorf("%s: %v", c.op, got)
		}
		if c.drops && (tb.stats.entries != 3 || tb.stats.replaced != 3) {
			t.Errorf("%s: stats %+v", c.op, tb.stats)
		}
	}
}

// The far end of a u64 expires_at_ms saturates rather than wrapping into the past.
func TestPredictedEndSaturates(t *testing.T) {
	if predictedEnd(^uint64(0)) <= 0 || predictedEnd(1) != ms {
		t.Errorf("ends: %d, %d", predictedEnd(^uint64(0)), predictedEnd(1))
	}
}

func TestMatchesFromLookupCreditsPredictions(t *testing.T) {
	rank1, rank3 := uint32(1), uint32(3)
	a := &LookupAnswer{
		Instances: []InstanceMatch{{InstanceID: "q", Blocks: TierBlocks{GPU: 1, CPU: 1, Disk: 1},
			DPRanks: []RankMatch{{DPRank: 0, Blocks: TierBlocks{GPU: 1, CPU: 1, Disk: 1}}}}},
		Predicted: []PredictedPrefix{{"q", 1, 4}, {"q", 2, 6}, {"z", 0, 2}},
	}
	got := MatchesFromLookup(a, []Candidate{{InstanceID: "q"}, {InstanceID: "q", DPRank: &rank1},
		{InstanceID: "q", DPRank: &rank3}, {InstanceID: "z"}, {InstanceID: "y"}})
	want := []PrefixMatch{{GPU: 1, CPU: 1, Disk: 1, Predicted: 6}, {Predicted: 4}, {}, {Predicted: 2}, {}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("matches:\n got %+v\nwant %+v", got, want)
	}
}

// localIndexForTest is a LocalIndex of one context fed by hand (no server), on clock.
func localIndexForTest(c Context, opts LocalIndexOptions, clock func() time.Time) (*LocalIndex, *localReplica) {
	if opts.MaxLookupBlocks == 0 {
		opts.MaxLookupBlocks = 8192
	}
	if opts.MaxPredictedEntries == 0 {
		opts.MaxPredictedEntries = defaultMaxPredictedEntries
	}
	li := &LocalIndex{opts: opts, hasher: NewBlockHasher(DefaultHashSeed), holderIDs: map[Holder]uint32{}, now: clock}
	r := &localReplica{ctx: normalContext(c), changed: make(chan struct{}), table: newLocalTable(0)}
	if opts.Predictions {
		r.predicted = newPredictedTable(opts.MaxPredictedEntries)
	}
	li.replicas = []*localReplica{r}
	return li, r
}

// Records applied as the feed delivers them: the lookup carries the predicted prefixes,
// the route credits them as ScoreCandidates does over the same matches, a real record of
// the holder replaces them, and they end on the injected clock.
func TestLocalIndexCreditsPredictions(t *testing.T) {
	c := Context{Model: "m", BlockSize: 4}
	now := time.UnixMilli(1_000_000)
	li, r := localIndexForTest(c, LocalIndexOptions{Predictions: true}, func() time.Time { return now })
	keys := []uint64{11, 12, 13, 14, 15, 16}
	end := uint64(now.UnixMilli() + 2000)
	li.apply(r, []FeedRecord{
		{Revision: 5, Op: OpStored, Context: r.ctx, Holder: Holder{BackendID: "a"}, Tier: TierGPU, Keys: keys[:2]},
		{Revision: 5, Op: OpPredicted, Context: r.ctx, Holder: Holder{BackendID: "q", DPRank: 1}, Keys: keys[:5], ExpiresAtMs: end},
		{Revision: 5, Op: OpPredicted, Context: r.ctx, Holder: Holder{BackendID: "q"}, Keys: keys[:3], ExpiresAtMs: end},
	}, 5)
	// A predicted record is no copy.
	if st := li.Status()[0]; st.Blocks != 2 || st.Copies != 2 || st.PredictedEntries != 8 {
		t.Errorf("status: %+v", st)
	}
	a, err := li.LookupHashes(c, keys)
	if err != nil {
		t.Fatal(err)
	}
	if want := []PredictedPrefix{{"q", 0, 3}, {"q", 1, 5}}; !reflect.DeepEqual(a.Predicted, want) {
		t.Errorf("lookup's predicted: %+v, want %+v", a.Predicted, want)
	}
	if only, _ := li.Lookup(LookupRequest{Context: c, Hashes: keys, Instance: "a"}); len(only.Predicted) != 0 {
		t.Errorf("instance a's lookup: %+v", only.Predicted)
	}
	rank0 := uint32(0)
	candidates := []Candidate{{InstanceID: "a"}, {InstanceID: "q"}, {InstanceID: "q", DPRank: &rank0}}
	route, err := li.Route(RouteRequest{Lookup: LookupRequest{Context: c, Hashes: keys}, Candidates: candidates})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ScoreCandidates(DefaultRouteOptions(), 6, 4, candidates, []PrefixMatch{
		{GPU: 2, CPU: 2, Disk: 2}, {Predicted: 5}, {Predicted: 3}})
	if !reflect.DeepEqual(route.Ranked, want) || route.Ranked[0].Index != 1 || route.Ranked[0].PredictedBlocks != 5 {
		t.Errorf("route:\n got %+v\nwant %+v", route.Ranked, want)
	}
	// q's rank 1 sends an event: its predictions go, rank 0's stay.
	li.apply(r, []FeedRecord{{Revision: 6, Op: OpRemoved, Context: r.ctx, Holder: Holder{BackendID: "q", DPRank: 1},
		Keys: []uint64{99}}}, 6)
	if a, _ := li.LookupHashes(c, keys); !reflect.DeepEqual(a.Predicted, []PredictedPrefix{{"q", 0, 3}}) {
		t.Errorf("after q/1's event: %+v", a.Predicted)
	}
	// The end on this process's clock.
	now = now.Add(2 * time.Second)
	if a, _ := li.LookupHashes(c, keys); a.Predicted != nil {
		t.Errorf("after the end: %+v", a.Predicted)
	}
	route, _ = li.Route(RouteRequest{Lookup: LookupRequest{Context: c, Hashes: keys}, Candidates: candidates})
	if route.Ranked[0].Candidate.InstanceID != "a" || route.Ranked[1].PredictedBlocks != 0 {
		t.Errorf("route after the end: %+v", route.Ranked)
	}
}

// Without Predictions, a predicted record (which a server sends only to watches that ask)
// changes nothing, and lookups carry none.
func TestLocalIndexWithoutPredictions(t *testing.T) {
	c := Context{Model: "m", BlockSize: 4}
	li, r := localIndexForTest(c, LocalIndexOptions{}, time.Now)
	li.apply(r, []FeedRecord{
		{Revision: 5, Op: OpStored, Context: r.ctx, Holder: Holder{BackendID: "q"}, Keys: []uint64{1}},
		{Revision: 5, Op: OpPredicted, Context: r.ctx, Holder: Holder{BackendID: "q"}, Keys: []uint64{1},
			ExpiresAtMs: uint64(time.Now().UnixMilli() + 60_000)},
	}, 5)
	a, _ := li.LookupHashes(c, []uint64{1})
	if len(a.Instances) != 1 || a.Instances[0].Blocks.GPU != 1 || a.Predicted != nil {
		t.Errorf("lookup: %+v", a)
	}
}

// The cap per context, counted in the status.
func TestLocalIndexPredictedCap(t *testing.T) {
	c := Context{Model: "m", BlockSize: 4}
	li, r := localIndexForTest(c, LocalIndexOptions{Predictions: true, MaxPredictedEntries: 2}, time.Now)
	li.apply(r, []FeedRecord{{Revision: 5, Op: OpPredicted, Context: r.ctx, Holder: Holder{BackendID: "q"},
		Keys: []uint64{1, 2, 3}, ExpiresAtMs: uint64(time.Now().UnixMilli() + 60_000)}}, 5)
	if st := li.Status()[0]; st.PredictedEntries != 2 || st.PredictedDropped != 1 {
		t.Errorf("status: %+v", st)
	}
}
