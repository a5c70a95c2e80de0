package kvatlas

// Shared load (docs/routing.md §Shared load): the kLoadReport and kLoadView payloads, the
// checks of a report, the fleet table's fill rule and expiry, and the LoadReporter's
// sending rules against a fake transport. The tests against a server are in
// load_server_test.go.

import (
	"context"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The examples of docs/protocol.md §kLoadReport and §kLoadView, byte for byte.
func TestLoadReportDocumentedBytes(t *testing.T) {
	r := LoadReport{RouterID: "r", TTLMs: 500, Loads: []InstanceLoad{{InstanceID: "a", DPRank: 1,
		PrefillBlocks: 3, DecodeBlocks: 4}}}
	const request = "0172f403010161010304"
	if got := hexSpaced(encodeLoadReport(&r)); got != request {
		t.Errorf("request:\n got %s\nwant %s", got, request)
	}
	// TTLMs 0 is sent as the default lease, 2,000 ms (d0 0f).
	r.TTLMs = 0
	if got, want := hexSpaced(encodeLoadReport(&r)), "0172d00f010161010304"; got != want {
		t.Errorf("request with the default ttl:\n got %s\nwant %s", got, want)
	}
	// An empty report: the router leaves.
	if got, want := hexSpaced(encodeLoadReport(&LoadReport{RouterID: "r", TTLMs: 500})), "0172f40300"; got != want {
		t.Errorf("empty report:\n got %s\nwant %s", got, want)
	}

	a, err := decodeLoadReportAnswer(unhex(t, "07 fb d0 95 ff bc 31"))
	if err != nil || a != (LoadReportAnswer{Revision: 7, ExpiresAtMs: 1700000000123}) {
		t.Errorf("answer: %+v, %v; want revision 7, expires at 1700000000123", a, err)
	}

	view := unhex(t, "07 01  01 72 f4 03  01  01 61 01 03 04")
	v, err := decodeLoadView(view)
	want := LoadView{Revision: 7, Routers: []LoadViewRouter{{RouterID: "r", ExpiresInMs: 500,
		Loads: []InstanceLoad{{InstanceID: "a", DPRank: 1, PrefillBlocks: 3, DecodeBlocks: 4}}}}}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Errorf("view: %+v, %v; want %+v", v, err, want)
	}
	// No router: revision and an empty list.
	if v, err := decodeLoadView([]byte{0x07, 0x00}); err != nil || v.Revision != 7 || len(v.Routers) != 0 {
		t.Errorf("empty view: %+v, %v", v, err)
	}
}

// An answer that does not decode is ErrCorruption naming the field.
func TestLoadAnswersThatDoNotDecode(t *testing.T) {
	for _, c := range []struct {
		name, payload, field string
		view                 bool
	}{
		{"truncated answer", "07", "expires_at_ms", false},
		{"trailing byte", "07 01 00", "trailing", false},
		{"non-canonical varint", "87 00 01", "revision", false},
		{"truncated view", "07 01 01 72 f4 03 01 01 61 01 03", "decode_blocks", true},
		{"router count past the payload", "07 05 01 72 f4 03 00", "routers", true},
		{"rank past 32 bits", "07 01 01 72 f4 03 01 01 61 80 80 80 80 10 03 04", "dp_rank", true},
		{"view trailing byte", "07 01 01 72 f4 03 00 00", "trailing", true},
	} {
		var err error
		if c.view {
			_, err = decodeLoadView(unhex(t, c.payload))
		} else {
			_, err = decodeLoadReportAnswer(unhex(t, c.payload))
		}
		if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v; want corruption naming %q", c.name, err, c.field)
		}
	}
	// More than MaxLoadEntries loads in one router is not an answer a server sends.
	e := &encoder{}
	e.varint(7)
	e.varint(1)
	putRouter(e, "r", 500, make([]InstanceLoad, MaxLoadEntries+1))
	if _, err := decodeLoadView(e.b); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "loads") {
		t.Errorf("view with %d loads: %v; want corruption naming loads", MaxLoadEntries+1, err)
	}
}

// ValidateLoadReport refuses what the server refuses, with its code and message, and
// ReportLoad fails with it before sending anything.
func TestLoadReportValidation(t *testing.T) {
	ok := func() LoadReport {
		return LoadReport{RouterID: "r", TTLMs: 500, Loads: []InstanceLoad{{InstanceID: "a", PrefillBlocks: 1}}}
	}
	long := strings.Repeat("x", 257)
	many := ok()
	many.Loads = make([]InstanceLoad, MaxLoadEntries+1)
	for i := range many.Loads {
		many.Loads[i] = InstanceLoad{InstanceID: "a", DPRank: uint32(i)}
	}
	cases := []struct {
		name   string
		change func(*LoadReport)
		code   Code
		want   string
	}{
		{"empty router id", func(r *LoadReport) { r.RouterID = "" }, CodeInvalidArgument, "router_id: is required"},
		{"long router id", func(r *LoadReport) { r.RouterID = long }, CodeInvalidArgument, "router_id: at most 256 bytes, got 257"},
		{"short ttl", func(r *LoadReport) { r.TTLMs = 99 }, CodeInvalidArgument, "ttl_ms: must be an integer from 100 to 600000, got 99"},
		{"long ttl", func(r *LoadReport) { r.TTLMs = 600_001 }, CodeInvalidArgument, "ttl_ms: must be an integer from 100 to 600000, got 600001"},
		{"empty instance", func(r *LoadReport) { r.Loads[0].InstanceID = "" }, CodeInvalidArgument, "loads[0].instance_id: must be a string of 1 to 256 bytes"},
		{"long instance", func(r *LoadReport) { r.Loads[0].InstanceID = long }, CodeInvalidArgument, "loads[0].instance_id"},
		{"prefill past 2^48", func(r *LoadReport) { r.Loads[0].PrefillBlocks = MaxLoadBlocks + 1 }, CodeInvalidArgument, "loads[0].prefill_blocks: at most 281474976710656, got 281474976710657"},
		{"decode past 2^48", func(r *LoadReport) { r.Loads[0].DecodeBlocks = math.MaxUint64 }, CodeInvalidArgument, "loads[0].decode_blocks: at most 281474976710656"},
		{"twice", func(r *LoadReport) {
			r.Loads = append(r.Loads, InstanceLoad{InstanceID: "b"}, InstanceLoad{InstanceID: "a"})
		}, CodeInvalidArgument, `loads[2]: instance "a" rank 0 is given twice`},
		{"too many", func(r *LoadReport) { *r = many }, CodePayloadTooLarge, "loads: 10001 entries; one report holds at most 10000"},
	}
	var unsent Client // no endpoints: a report that passed the checks would fail unavailable
	for _, c := range cases {
		r := ok()
		c.change(&r)
		err := ValidateLoadReport(r)
		if CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %s %q", c.name, err, c.code, c.want)
		}
		if _, err := unsent.ReportLoad(context.Background(), r); CodeOf(err) != c.code {
			t.Errorf("%s: ReportLoad: %v; want %s before sending", c.name, err, c.code)
		}
	}
	// The bounds themselves pass; TTLMs 0 is the default lease.
	for _, r := range []LoadReport{
		{RouterID: strings.Repeat("x", 256), TTLMs: 100},
		{RouterID: "r", TTLMs: 600_000, Loads: []InstanceLoad{{InstanceID: strings.Repeat("y", 256),
			PrefillBlocks: MaxLoadBlocks, DecodeBlocks: MaxLoadBlocks}}},
		{RouterID: "r", Loads: []InstanceLoad{{InstanceID: "a"}, {InstanceID: "a", DPRank: 1}}},
		{RouterID: "r", TTLMs: 500, Loads: many.Loads[:MaxLoadEntries]},
	} {
		if err := ValidateLoadReport(r); err != nil {
			t.Errorf("report %.40q ttl %d with %d loads: %v", r.RouterID, r.TTLMs, len(r.Loads), err)
		}
	}
}

func rankPtr(r uint32) *uint32 { return &r }

// The server's rule: a candidate giving no load gets the live reports' sum for its rank,
// or for all ranks when it names none; one giving a load keeps it; one nobody names stays
// 0; prefill blocks count × block size, saturating.
func TestFleetLoadTableFillRule(t *testing.T) {
	var table FleetLoadTable
	now := time.Now()
	later := now.Add(time.Minute)
	table.Replace(LoadReport{RouterID: "r1", Loads: []InstanceLoad{
		{InstanceID: "a", DPRank: 0, PrefillBlocks: 3, DecodeBlocks: 40},
		{InstanceID: "a", DPRank: 1, PrefillBlocks: 5, DecodeBlocks: 60},
		{InstanceID: "b", DPRank: 0, PrefillBlocks: 7, DecodeBlocks: 1},
	}}, later)
	table.Replace(LoadReport{RouterID: "r2", Loads: []InstanceLoad{
		{InstanceID: "a", DPRank: 1, PrefillBlocks: 11, DecodeBlocks: 100},
		{InstanceID: "huge", PrefillBlocks: MaxLoadBlocks},
	}}, later)
	if got, want := table.LoadOf("a", nil, now), (LoadSum{PrefillBlocks: 19, DecodeBlocks: 200, Routers: 2}); got != want {
		t.Errorf("LoadOf(a, all ranks) = %+v, want %+v", got, want)
	}
	if got, want := table.LoadOf("a", rankPtr(0), now), (LoadSum{PrefillBlocks: 3, DecodeBlocks: 40, Routers: 1}); got != want {
		t.Errorf("LoadOf(a, rank 0) = %+v, want %+v", got, want)
	}
	candidates := []Candidate{
		{InstanceID: "a"},                                    // every rank of a
		{InstanceID: "a", DPRank: rankPtr(1)},                // rank 1: both routers
		{InstanceID: "a", DPRank: rankPtr(0)},                // rank 0: r1 only
		{InstanceID: "a", DPRank: rankPtr(2)},                // a rank nobody reports
		{InstanceID: "b", QueuedPrefillTokens: 9},            // the caller's load is kept
		{InstanceID: "b", ActiveDecodeBlocks: 2},             // so is a decode load alone
		{InstanceID: "c"},                                    // nobody reports c
		{InstanceID: "huge"},                                 // 2^48 blocks
		{InstanceID: "b", DPRank: rankPtr(0), Predict: true}, // other fields untouched
	}
	const blockSize = 16
	n := table.FillCandidatesAt(candidates, blockSize, now)
	want := []Candidate{
		{InstanceID: "a", QueuedPrefillTokens: 19 * 16, ActiveDecodeBlocks: 200},
		{InstanceID: "a", DPRank: rankPtr(1), QueuedPrefillTokens: 16 * 16, ActiveDecodeBlocks: 160},
		{InstanceID: "a", DPRank: rankPtr(0), QueuedPrefillTokens: 3 * 16, ActiveDecodeBlocks: 40},
		{InstanceID: "a", DPRank: rankPtr(2)},
		{InstanceID: "b", QueuedPrefillTokens: 9},
		{InstanceID: "b", ActiveDecodeBlocks: 2},
		{InstanceID: "c"},
		{InstanceID: "huge", QueuedPrefillTokens: MaxLoadBlocks * blockSize}, // fits: 2^52
		{InstanceID: "b", DPRank: rankPtr(0), QueuedPrefillTokens: 7 * 16, ActiveDecodeBlocks: 1, Predict: true},
	}
	if n != 5 || !reflect.DeepEqual(candidates, want) {
		t.Errorf("filled %d:\n got %+v\nwant %+v (5 filled)", n, candidates, want)
	}
	huge := []Candidate{{InstanceID: "huge"}}
	table.FillCandidatesAt(huge, math.MaxUint32, now)
	if huge[0].QueuedPrefillTokens != math.MaxUint64 {
		t.Errorf("2^48 blocks × 2^32-1 tokens = %d, want saturated %d", huge[0].QueuedPrefillTokens, uint64(math.MaxUint64))
	}
	// An empty report erases its router.
	table.Replace(LoadReport{RouterID: "r2"}, later)
	if got := table.LoadOf("a", rankPtr(1), now); got != (LoadSum{PrefillBlocks: 5, DecodeBlocks: 60, Routers: 1}) {
		t.Errorf("after r2 left: LoadOf(a, rank 1) = %+v", got)
	}
	if got := table.LiveRouters(now); len(got) != 1 || got[0].RouterID != "r1" || len(got[0].Loads) != 3 {
		t.Errorf("LiveRouters = %+v, want r1 alone", got)
	}
}

// A fetched report counts until its expires_in_ms, measured from the fetch, runs out; the
// next fetch replaces the whole table.
func TestFleetLoadTableExpiry(t *testing.T) {
	var table FleetLoadTable
	table.Replace(LoadReport{RouterID: "old", Loads: []InstanceLoad{{InstanceID: "z", PrefillBlocks: 1}}}, time.Now().Add(time.Hour))
	fetched := time.Now()
	v := LoadView{Revision: 9, Routers: []LoadViewRouter{
		{RouterID: "short", ExpiresInMs: 100, Loads: []InstanceLoad{{InstanceID: "a", PrefillBlocks: 1, DecodeBlocks: 10}}},
		{RouterID: "long", ExpiresInMs: 1000, Loads: []InstanceLoad{{InstanceID: "a", PrefillBlocks: 2, DecodeBlocks: 20}}},
		{RouterID: "forever", ExpiresInMs: math.MaxUint64, Loads: []InstanceLoad{{InstanceID: "f", DecodeBlocks: 1}}},
	}}
	v.FillTable(&table, fetched)
	fill := func(at time.Duration) Candidate {
		c := []Candidate{{InstanceID: "a"}}
		table.FillCandidatesAt(c, 4, fetched.Add(at))
		return c[0]
	}
	for _, c := range []struct {
		at      time.Duration
		prefill uint64
		decode  uint64
	}{
		{0, 12, 30},
		{99 * time.Millisecond, 12, 30},
		{100 * time.Millisecond, 8, 20}, // "short" ended
		{999 * time.Millisecond, 8, 20},
		{1000 * time.Millisecond, 0, 0}, // both ended: nothing to fill
	} {
		got := fill(c.at)
		if got.QueuedPrefillTokens != c.prefill || got.ActiveDecodeBlocks != c.decode {
			t.Errorf("%v after the fetch: %+v, want %d tokens, %d decode blocks", c.at, got, c.prefill, c.decode)
		}
	}
	if got := table.LoadOf("z", nil, fetched); got.Routers != 0 {
		t.Errorf("a report from before the fetch survived it: %+v", got)
	}
	if got := table.LoadOf("f", nil, fetched.Add(100*365*24*time.Hour)); got.Routers != 1 {
		t.Errorf("a report counting ~forever ended within a century: %+v", got)
	}
	if got := table.LiveRouters(fetched.Add(500 * time.Millisecond)); len(got) != 2 || got[0].RouterID != "forever" || got[1].RouterID != "long" {
		t.Errorf("LiveRouters 500 ms after the fetch = %+v, want forever and long", got)
	}
}

// fakeSender records the reports a LoadReporter sends.
type fakeSender struct {
	mu      sync.Mutex
	reports []LoadReport
	at      []time.Time
	fail    int // fail this many sends before accepting
	sent    chan struct{}
}

func newFakeSender() *fakeSender { return &fakeSender{sent: make(chan struct{}, 1<<16)} }

func (f *fakeSender) send(_ context.Context, r LoadReport) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, r)
	f.at = append(f.at, time.Now())
	f.sent <- struct{}{}
	if f.fail > 0 {
		f.fail--
		return newError(CodeUnavailable, "fake failure")
	}
	return nil
}

func (f *fakeSender) snapshot() ([]LoadReport, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]LoadReport(nil), f.reports...), append([]time.Time(nil), f.at...)
}

// waitFor waits (within startupBound: never a timed assertion) until the sender has sent
// a report that ok accepts, and returns the reports sent so far.
func (f *fakeSender) waitFor(t *testing.T, what string, ok func([]LoadReport) bool) []LoadReport {
	t.Helper()
	deadline := time.After(startupBound)
	for {
		reports, _ := f.snapshot()
		if ok(reports) {
			return reports
		}
		select {
		case <-f.sent:
		case <-deadline:
			t.Fatalf("no %s within %v; sent %+v", what, startupBound, reports)
		}
	}
}

func lastIs(want []InstanceLoad) func([]LoadReport) bool {
	return func(rs []LoadReport) bool {
		return len(rs) > 0 && reflect.DeepEqual(rs[len(rs)-1].Loads, want)
	}
}

func newReporterT(t *testing.T, send LoadSender, opts LoadReporterOptions) *LoadReporter {
	t.Helper()
	r, err := NewLoadReporterFunc(send, opts)
	if err != nil {
		t.Fatalf("NewLoadReporterFunc(%+v): %v", opts, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestLoadReporterOptions(t *testing.T) {
	send := func(context.Context, LoadReport) error { return nil }
	for _, c := range []struct {
		opts LoadReporterOptions
		want string
	}{
		{LoadReporterOptions{}, "router_id: is required"},
		{LoadReporterOptions{RouterID: strings.Repeat("x", 257)}, "router_id: at most 256 bytes"},
		{LoadReporterOptions{RouterID: "r", TTLMs: 99}, "ttl_ms: must be an integer from 100 to 600000, got 99"},
		{LoadReporterOptions{RouterID: "r", TTLMs: 700_000}, "ttl_ms"},
		{LoadReporterOptions{RouterID: "r", Interval: -time.Millisecond}, "interval: must be from 1 ms to ttl_ms / 3 (666 ms), got -1ms"},
		{LoadReporterOptions{RouterID: "r", Interval: time.Microsecond}, "interval: must be from 1 ms"},
		{LoadReporterOptions{RouterID: "r", TTLMs: 300, Interval: 101 * time.Millisecond}, "interval: must be from 1 ms to ttl_ms / 3 (100 ms), got 101ms"},
	} {
		r, err := NewLoadReporterFunc(send, c.opts)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want invalid_argument %q", c.opts, err, c.want)
		}
		if r != nil {
			r.Close()
		}
	}
	if _, err := NewLoadReporter(nil, LoadReporterOptions{RouterID: "r"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := NewLoadReporterFunc(nil, LoadReporterOptions{RouterID: "r"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil send: %v", err)
	}
	// The bounds pass, and the defaults are 10 ms and 2,000 ms.
	f := newFakeSender()
	r := newReporterT(t, f.send, LoadReporterOptions{RouterID: "r"})
	if r.interval != DefaultLoadReportInterval || r.ttlMs != DefaultLoadTTLMs {
		t.Errorf("defaults: interval %v, ttl %d ms", r.interval, r.ttlMs)
	}
	if rs := f.waitFor(t, "first report", func(rs []LoadReport) bool { return len(rs) > 0 }); rs[0].TTLMs != DefaultLoadTTLMs || rs[0].RouterID != "r" {
		t.Errorf("first report %+v, want router r with the default lease", rs[0])
	}
	newReporterT(t, f.send, LoadReporterOptions{RouterID: "r2", TTLMs: 300, Interval: 100 * time.Millisecond})
	newReporterT(t, f.send, LoadReporterOptions{RouterID: "r3", TTLMs: 100, Interval: time.Millisecond})
}

// The summary follows RouteStarted, PrefillDone and RouteFinished: summed per instance and
// rank, sorted, empty entries left out; unknown tokens change nothing.
func TestLoadReporterSummary(t *testing.T) {
	r := newReporterT(t, func(context.Context, LoadReport) error { return nil },
		LoadReporterOptions{RouterID: "r", TTLMs: 900})
	t1 := r.RouteStarted("b", 0, 10, 100)
	t2 := r.RouteStarted("a", 1, 20, 200)
	t3 := r.RouteStarted("b", 0, 30, 300)
	t4 := r.RouteStarted("a", 0, 40, 400)
	if t1 == 0 || t1 == t2 || t2 == t3 || t3 == t4 {
		t.Fatalf("tokens %d %d %d %d are not distinct and non-zero", t1, t2, t3, t4)
	}
	want := LoadReport{RouterID: "r", TTLMs: 900, Loads: []InstanceLoad{
		{InstanceID: "a", DPRank: 0, PrefillBlocks: 40, DecodeBlocks: 400},
		{InstanceID: "a", DPRank: 1, PrefillBlocks: 20, DecodeBlocks: 200},
		{InstanceID: "b", DPRank: 0, PrefillBlocks: 40, DecodeBlocks: 400},
	}}
	if got := r.Summary(); !reflect.DeepEqual(got, want) {
		t.Errorf("summary:\n got %+v\nwant %+v", got, want)
	}
	r.PrefillDone(t1)
	r.PrefillDone(t1) // twice: once counts
	r.RouteFinished(t2)
	r.RouteFinished(t2)
	r.PrefillDone(t2)  // finished: no-op
	r.PrefillDone(999) // unknown
	r.RouteFinished(0) // unknown
	want.Loads = []InstanceLoad{
		{InstanceID: "a", DPRank: 0, PrefillBlocks: 40, DecodeBlocks: 400},
		{InstanceID: "b", DPRank: 0, PrefillBlocks: 30, DecodeBlocks: 400},
	}
	if got := r.Summary(); !reflect.DeepEqual(got, want) {
		t.Errorf("summary after prefill and finish:\n got %+v\nwant %+v", got, want)
	}
	// What changes nothing marks nothing to report.
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	r.PrefillDone(t1)
	r.PrefillDone(t2)
	r.RouteFinished(t2)
	r.RouteFinished(12345)
	r.mu.Lock()
	changed := r.changed
	r.mu.Unlock()
	if changed {
		t.Error("a repeated PrefillDone or RouteFinished marked the table changed")
	}
	r.RouteFinished(t1)
	r.RouteFinished(t3)
	r.RouteFinished(t4)
	if got := r.Summary(); len(got.Loads) != 0 {
		t.Errorf("summary with nothing in flight: %+v", got)
	}
	// Past the protocol's bounds: numbers capped at 2^48, and only the busiest
	// MaxLoadEntries entries.
	r.RouteStarted("big", 0, MaxLoadBlocks+5, 1)
	for i := 0; i < MaxLoadEntries; i++ {
		r.RouteStarted("small", uint32(i), 1, 0)
	}
	s := r.Summary()
	if err := ValidateLoadReport(s); err != nil || len(s.Loads) != MaxLoadEntries || s.Loads[0].InstanceID != "big" ||
		s.Loads[0].PrefillBlocks != MaxLoadBlocks {
		t.Errorf("summary past the bounds: %d loads, first %+v, %v", len(s.Loads), s.Loads[0], err)
	}
}

// Reports follow changes at most once per interval: a burst of changes coalesces into a
// few reports, spaced at least an interval apart, the last one the final table.
func TestLoadReporterCoalescesChanges(t *testing.T) {
	f := newFakeSender()
	const interval = 100 * time.Millisecond
	r := newReporterT(t, f.send, LoadReporterOptions{RouterID: "r", TTLMs: 60_000, Interval: interval})
	f.waitFor(t, "first report", func(rs []LoadReport) bool { return len(rs) > 0 })
	var tokens []uint64
	for i := 0; i < 2000; i++ {
		tokens = append(tokens, r.RouteStarted("a", 0, 2, 1))
		if i%4 == 0 {
			r.RouteFinished(tokens[i/2])
		}
	}
	final := r.Summary().Loads
	if len(final) != 1 || final[0].PrefillBlocks != 2*1500 {
		t.Fatalf("final table %+v, want 1,500 requests on a", final)
	}
	reports := f.waitFor(t, "report of the final table", lastIs(final))
	_, at := f.snapshot()
	if len(reports) > 1+2000/4 {
		t.Errorf("%d reports for 2,000 changes: not coalesced", len(reports))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < interval-time.Millisecond {
			t.Errorf("reports %d and %d %v apart, less than the interval %v", i-1, i, gap, interval)
		}
	}
	// Nothing changed, the lease is long: no further report for a while (at least 3
	// intervals; the keep-alive is 20 s away).
	n := len(reports)
	time.Sleep(3 * interval)
	if now, _ := f.snapshot(); len(now) != n {
		t.Errorf("%d reports without a change (keep-alive not due): %+v", len(now)-n, now[n:])
	}
}

// Without changes, a report is renewed every ttl / 3 (not every interval); an idle router
// whose last report was empty sends nothing more.
func TestLoadReporterKeepAlive(t *testing.T) {
	f := newFakeSender()
	const ttl = 300 // keep-alive every 100 ms, checked every 5 ms
	r := newReporterT(t, f.send, LoadReporterOptions{RouterID: "r", TTLMs: ttl, Interval: 5 * time.Millisecond})
	token := r.RouteStarted("a", 0, 3, 4)
	loads := []InstanceLoad{{InstanceID: "a", PrefillBlocks: 3, DecodeBlocks: 4}}
	f.waitFor(t, "report of the route", lastIs(loads))
	reports, _ := f.snapshot()
	first := len(reports) - 1
	f.waitFor(t, "three renewals", func(rs []LoadReport) bool { return len(rs) >= first+4 })
	reports, at := f.snapshot()
	for i := first + 1; i < len(reports); i++ {
		if !reflect.DeepEqual(reports[i].Loads, loads) {
			t.Fatalf("renewal %d carries %+v, want %+v", i, reports[i].Loads, loads)
		}
		if gap := at[i].Sub(at[i-1]); gap < ttl/3*time.Millisecond-time.Millisecond {
			t.Errorf("renewal %d only %v after the report before: renewed before ttl / 3", i, gap)
		}
	}
	// Everything finished: one empty report, then silence (well past the keep-alive).
	r.RouteFinished(token)
	reports = f.waitFor(t, "empty report", lastIs(nil))
	n := len(reports)
	time.Sleep(3 * ttl / 3 * time.Millisecond)
	if now, _ := f.snapshot(); len(now) != n {
		t.Errorf("an idle router renewed its empty report: %+v", now[n:])
	}
}

// A failed report is sent again at the next interval (not at the keep-alive, 200 s away),
// and counted.
func TestLoadReporterRetriesAFailedReport(t *testing.T) {
	f := newFakeSender()
	f.fail = 2
	r := newReporterT(t, f.send, LoadReporterOptions{RouterID: "r", TTLMs: MaxLoadTTLMs, Interval: 5 * time.Millisecond})
	f.waitFor(t, "third report (two failed)", func(rs []LoadReport) bool { return len(rs) >= 3 })
	if r.ReportsFailed() != 2 || r.ReportsSent() < 1 {
		t.Errorf("sent %d, failed %d; want 2 failed, then sent", r.ReportsSent(), r.ReportsFailed())
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Errorf("Flush: %v", err)
	}
}

// Close stops the goroutine and sends an empty report: the router leaves at once. Nothing
// is sent afterwards.
func TestLoadReporterCloseSendsAnEmptyReport(t *testing.T) {
	f := newFakeSender()
	r, err := NewLoadReporterFunc(f.send, LoadReporterOptions{RouterID: "r", TTLMs: 300, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.RouteStarted("a", 0, 3, 4)
	r.RouteStarted("b", 2, 1, 1)
	f.waitFor(t, "report of the routes", func(rs []LoadReport) bool { return len(rs) > 0 && len(rs[len(rs)-1].Loads) == 2 })
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	reports, _ := f.snapshot()
	if last := reports[len(reports)-1]; last.RouterID != "r" || len(last.Loads) != 0 {
		t.Errorf("last report %+v, want r's empty report", last)
	}
	select {
	case <-r.done:
	default:
		t.Error("Close returned before the goroutine ended")
	}
	r.RouteStarted("c", 0, 1, 1)
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // ten intervals, well past the keep-alive's third of them
	if now, _ := f.snapshot(); len(now) != len(reports) {
		t.Errorf("%d reports after Close: %+v", len(now)-len(reports), now[len(reports):])
	}
	// Close's error is the empty report's.
	f2 := newFakeSender()
	r2, err := NewLoadReporterFunc(f2.send, LoadReporterOptions{RouterID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	f2.waitFor(t, "first report", func(rs []LoadReport) bool { return len(rs) > 0 })
	f2.mu.Lock()
	f2.fail = 1
	f2.mu.Unlock()
	if err := r2.Close(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Close with a failing transport: %v, want its error", err)
	}
}

// Many goroutines route at once (go test -race): the table ends empty and consistent.
func TestLoadReporterConcurrentUse(t *testing.T) {
	f := newFakeSender()
	r := newReporterT(t, f.send, LoadReporterOptions{RouterID: "r", TTLMs: 300, Interval: time.Millisecond})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				token := r.RouteStarted("a", uint32(g%2), 2, 3)
				if i%3 == 0 {
					_ = r.Summary()
				}
				r.PrefillDone(token)
				r.RouteFinished(token)
			}
		}(g)
	}
	wg.Wait()
	if s := r.Summary(); len(s.Loads) != 0 {
		t.Errorf("summary after every route finished: %+v", s)
	}
	f.waitFor(t, "empty report", lastIs(nil))
}
