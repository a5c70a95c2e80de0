package kvatlas

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// LoadReporterOptions configure a LoadReporter.
type LoadReporterOptions struct {
	// RouterID names this router replica, unique per replica (1..256 bytes).
	RouterID string
	// Interval: at most one report per interval (1 ms … TTLMs / 3). 0 = 10 ms.
	Interval time.Duration
	// TTLMs is each report's lease (100..600,000 ms). 0 = DefaultLoadTTLMs (2,000).
	TTLMs uint32
}

// DefaultLoadReportInterval is the interval of a LoadReporter whose options give none.
const DefaultLoadReportInterval = 10 * time.Millisecond

// LoadSender sends one report: the reporter's transport (Client.ReportLoad, or a test's).
type LoadSender func(ctx context.Context, r LoadReport) error

// LoadReporter is a router replica's in-flight table, reported to the cluster as an
// absolute summary (docs/routing.md §Shared load; the C++ kvatlas::LoadReporter) so that
// every server's routes, and schedulers that fetch the loads, see the whole fleet's load.
// The router calls RouteStarted when it sends a request to an instance and PrefillDone /
// RouteFinished as it progresses; a goroutine sends the summary (Client.ReportLoad) at
// most once per interval when it changed, and at least every TTLMs / 3 when it did not
// (the lease's keep-alive; a router with nothing in flight whose last report was empty
// sends nothing more), so that a router costs the cluster a bounded number of writes
// however many requests it routes. A lost report is harmless: the next one replaces it.
// Close sends an empty report, so that the router leaves at once rather than when its
// lease runs out. Safe for concurrent use.
type LoadReporter struct {
	send     LoadSender
	routerID string
	interval time.Duration
	ttlMs    uint32

	mu        sync.Mutex
	changed   bool
	nextToken uint64
	inFlight  map[uint64]inFlightRoute
	// (instance, rank) → summed loads: the summary, kept as requests come and go.
	totals map[loadKey]*loadTotal
	sent   uint64
	failed uint64

	sendMu    sync.Mutex // one report in flight at a time, in order
	stop      chan struct{}
	cancel    context.CancelFunc // cancels a periodic report in flight at Close
	ctx       context.Context
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

type loadKey struct {
	instance string
	rank     uint32
}

type loadTotal struct{ prefill, decode uint64 }

type inFlightRoute struct {
	key             loadKey
	prefill, decode uint64
}

// NewLoadReporter starts a reporter that sends through client.ReportLoad. It fails with
// ErrInvalidArgument for a nil client, an empty or too long RouterID, a TTLMs outside
// 100..600,000 or an Interval below 1 ms or longer than TTLMs / 3. The reporter sends a
// first (empty) report at once.
func NewLoadReporter(client *Client, opts LoadReporterOptions) (*LoadReporter, error) {
	if client == nil {
		return nil, newError(CodeInvalidArgument, "client: must not be nil")
	}
	return NewLoadReporterFunc(func(ctx context.Context, r LoadReport) error {
		_, err := client.ReportLoad(ctx, r)
		return err
	}, opts)
}

// NewLoadReporterFunc starts a reporter that sends through send (called from one
// goroutine at a time, in order), checking opts as NewLoadReporter does.
func NewLoadReporterFunc(send LoadSender, opts LoadReporterOptions) (*LoadReporter, error) {
	if send == nil {
		return nil, newError(CodeInvalidArgument, "send: must not be nil")
	}
	if err := ValidateLoadReport(LoadReport{RouterID: opts.RouterID, TTLMs: opts.TTLMs}); err != nil {
		return nil, err
	}
	ttl := loadTTL(opts.TTLMs)
	if opts.Interval == 0 {
		opts.Interval = DefaultLoadReportInterval
	}
	maxInterval := time.Duration(ttl/3) * time.Millisecond
	if opts.Interval < time.Millisecond || opts.Interval > maxInterval {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("interval: must be from 1 ms to ttl_ms / 3 (%d ms), got %v", ttl/3, opts.Interval))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &LoadReporter{send: send, routerID: opts.RouterID, interval: opts.Interval, ttlMs: ttl,
		nextToken: 1, inFlight: map[uint64]inFlightRoute{}, totals: map[loadKey]*loadTotal{},
		stop: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go r.run()
	return r, nil
}

// RouteStarted records a request of promptBlocks blocks (queued for prefill) that will
// hold decodeBlocks KV blocks while decoding, sent to instance's dpRank. It returns the
// token naming it for PrefillDone and RouteFinished.
func (r *LoadReporter) RouteStarted(instance string, dpRank uint32, promptBlocks, decodeBlocks uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	token := r.nextToken
	r.nextToken++
	k := loadKey{instance, dpRank}
	r.inFlight[token] = inFlightRoute{key: k, prefill: promptBlocks, decode: decodeBlocks}
	t := r.totals[k]
	if t == nil {
		t = &loadTotal{}
		r.totals[k] = t
	}
	t.prefill += promptBlocks
	t.decode += decodeBlocks
	r.changed = true
	return token
}

// PrefillDone records that the request's prefill finished: its prompt blocks are no
// longer queued. An unknown token (finished, or never given) changes nothing.
func (r *LoadReporter) PrefillDone(token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.inFlight[token]
	if !ok || f.prefill == 0 {
		return
	}
	r.totals[f.key].prefill -= f.prefill
	f.prefill = 0
	r.inFlight[token] = f
	r.changed = true
}

// RouteFinished records that the request finished (or failed): none of its load counts
// any more. An unknown token changes nothing.
func (r *LoadReporter) RouteFinished(token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.inFlight[token]
	if !ok {
		return
	}
	t := r.totals[f.key]
	t.prefill -= f.prefill
	t.decode -= f.decode
	if t.prefill == 0 && t.decode == 0 {
		delete(r.totals, f.key)
	}
	delete(r.inFlight, token)
	r.changed = true
}

// summaryLocked is the report of the table: entries by instance and rank, each number at
// most MaxLoadBlocks (past it the server would refuse the report), and past
// MaxLoadEntries entries only the busiest. mu held.
func (r *LoadReporter) summaryLocked() LoadReport {
	report := LoadReport{RouterID: r.routerID, TTLMs: r.ttlMs}
	for k, t := range r.totals {
		if t.prefill == 0 && t.decode == 0 {
			continue
		}
		report.Loads = append(report.Loads, InstanceLoad{InstanceID: k.instance, DPRank: k.rank,
			PrefillBlocks: minU64(t.prefill, MaxLoadBlocks), DecodeBlocks: minU64(t.decode, MaxLoadBlocks)})
	}
	loads := report.Loads
	sort.Slice(loads, func(i, j int) bool {
		if loads[i].InstanceID != loads[j].InstanceID {
			return loads[i].InstanceID < loads[j].InstanceID
		}
		return loads[i].DPRank < loads[j].DPRank
	})
	if len(loads) > MaxLoadEntries {
		sort.SliceStable(loads, func(i, j int) bool {
			return loads[i].PrefillBlocks+loads[i].DecodeBlocks > loads[j].PrefillBlocks+loads[j].DecodeBlocks
		})
		report.Loads = loads[:MaxLoadEntries]
	}
	return report
}

func minU64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// Summary is the report the next send carries: this router's in-flight load by instance
// and rank (sorted), entries with nothing in flight left out.
func (r *LoadReporter) Summary() LoadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.summaryLocked()
}

// Flush sends the summary now, whatever the interval, and returns the transport's error.
// A failed report is sent again at the next interval.
func (r *LoadReporter) Flush(ctx context.Context) error {
	_, err := r.flush(ctx)
	return err
}

// flush sends the summary and returns it with the transport's error. Each send is bounded
// by the lease: a report later than that is replaced by the next one anyway.
func (r *LoadReporter) flush(ctx context.Context) (LoadReport, error) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.mu.Lock()
	report := r.summaryLocked()
	r.changed = false
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(r.ttlMs)*time.Millisecond)
	err := r.send(ctx, report)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.sent++
	} else {
		r.failed++
		r.changed = true // try again at the next interval
	}
	return report, err
}

// ReportsSent is how many reports the transport accepted.
func (r *LoadReporter) ReportsSent() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// ReportsFailed is how many reports the transport failed.
func (r *LoadReporter) ReportsFailed() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// Close forgets the in-flight table, stops the goroutine (a periodic report in flight is
// cancelled), waits for it, and sends an empty report so that this router's load stops
// counting at once; it returns that report's error (the lease ends it anyway). Later
// calls return the same. The reporter sends nothing by itself afterwards.
func (r *LoadReporter) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.inFlight = map[uint64]inFlightRoute{}
		r.totals = map[loadKey]*loadTotal{}
		r.mu.Unlock()
		close(r.stop)
		r.cancel()
		<-r.done
		r.closeErr = r.Flush(context.Background())
	})
	return r.closeErr
}

// run sends a report when the table changed, or when the last one is a third of the lease
// old (unless it was empty and nothing is in flight: an idle router need not renew it),
// then sleeps out the interval whatever arrives meanwhile.
func (r *LoadReporter) run() {
	defer close(r.done)
	keepAlive := time.Duration(r.ttlMs/3) * time.Millisecond
	var lastSent time.Time // the zero time: the first round sends
	sentEmpty := false     // the last report accepted had no loads
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		r.mu.Lock()
		renew := time.Since(lastSent) >= keepAlive && !(sentEmpty && len(r.totals) == 0)
		send := r.changed || renew
		r.mu.Unlock()
		if send {
			if report, err := r.flush(r.ctx); err == nil {
				sentEmpty = len(report.Loads) == 0
			}
			lastSent = time.Now()
		}
		timer.Reset(r.interval)
		select {
		case <-r.stop:
			return
		case <-timer.C:
		}
	}
}
