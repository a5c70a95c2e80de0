package kvatlas

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// LocalIndex is an in-process replica of chosen contexts of the kvatlas map (the C++
// kvatlas::LocalIndex, docs/feed.md §LocalIndex): it lists each context (Snapshot) and
// follows the change feed from that revision (Watch filtered to the context), so that a
// router answers Lookup and Route in microseconds, without a network round trip, with the
// server's answers at the revision the replica has reached. A watch that is cut or loses
// its connection resumes from its last revision (on whichever endpoint accepts); one whose
// revision the server no longer has (compacted: it restarted, or the replica was away too
// long) lists the context again. Safe for concurrent use.
type LocalIndex struct {
	client   *Client
	opts     LocalIndexOptions
	hasher   BlockHasher
	cancel   context.CancelFunc
	done     sync.WaitGroup
	replicas []*localReplica

	holdersMu sync.RWMutex // holders, holderIDs (shared by every context)
	holders   []Holder
	holderIDs map[Holder]uint32

	now func() time.Time // the clock predictions end by (tests replace it)
}

// LocalIndexOptions configure a LocalIndex.
type LocalIndexOptions struct {
	// The contexts to replicate: at least one, each with a model and a block size. Lookups
	// of other contexts fail with ErrNotFound.
	Contexts []Context
	// Keys a lookup walks at most, as the server's max_lookup_blocks (default 8192).
	MaxLookupBlocks uint32
	// The server's hash_seed for lookups by tokens; nil = ask the server (Stats).
	HashSeed *uint64
	// Wait after a failed attempt (snapshot, watch); doubles up to the max. Defaults 50 ms
	// and 2 s.
	RetryBackoffMin, RetryBackoffMax time.Duration
	// Called from the context's sync goroutine for each failed attempt (e.g. to log it).
	OnError func(Context, error)
	// Approximate mode (docs/routing.md §Approximate mode): also follow the feed's predicted
	// records (WatchOptions.Predicted) and keep them per context, so that lookups fill
	// LookupAnswer.Predicted and Route and MatchesFromLookup credit them as the server's
	// route does. A replica sees the predictions applied after its watch starts (snapshots
	// list none); each counts until its ExpiresAtMs on this process's clock, and a holder's
	// stored, removed or cleared record drops its predictions in the context. Needs a server
	// that publishes them (an older one refuses the watch: ErrInvalidArgument, retried).
	Predictions bool
	// Bound on the (block, holder) predictions kept per context; past it new ones are
	// dropped (LocalContextStatus.PredictedDropped). Default 1,000,000.
	MaxPredictedEntries int
}

// LocalIndexState is where a context's replica is in its sync loop.
type LocalIndexState uint8

const (
	// LocalLoading: listing the context (first, or again after a compacted feed).
	LocalLoading LocalIndexState = iota
	// LocalLive: loaded and following a live watch.
	LocalLive
	// LocalFailed: the last attempt failed (Status().LastError says why); retrying after
	// a backoff. Lookups answer from what was applied before.
	LocalFailed
)

func (s LocalIndexState) String() string {
	switch s {
	case LocalLoading:
		return "loading"
	case LocalLive:
		return "live"
	case LocalFailed:
		return "failed"
	}
	return "state(?)"
}

// LocalContextStatus is one replicated context's sync state.
type LocalContextStatus struct {
	Context Context
	State   LocalIndexState
	// The revision applied (the feed is complete through it); 0 before the first snapshot.
	Revision uint64
	// When a record or a feed position was last applied (zero before the first snapshot).
	LastApplied time.Time
	Blocks      uint64
	Copies      uint64
	MemoryBytes uint64 // the table's own accounting of its memory
	Snapshots   uint64 // snapshots loaded (the first and reloads after a compacted feed)
	Resumes     uint64 // watches started again from Revision (cut, lost connection)
	LastError   error  // the last failed attempt, nil once synced again
	// With Predictions on: the (block, holder) predictions kept (ended ones not yet swept
	// included), and those dropped past MaxPredictedEntries.
	PredictedEntries, PredictedDropped uint64
}

type localReplica struct {
	ctx Context
	mu  sync.RWMutex // table, revision
	// table is nil until the first snapshot.
	table    *localTable
	revision uint64
	// The context's predictions (nil when off); kept across snapshot reloads (soft state
	// that no snapshot lists).
	predicted *predictedTable

	statusMu sync.Mutex
	status   LocalContextStatus
	changed  chan struct{} // closed and replaced when revision or state changes
}

// NewLocalIndex starts replicating opts.Contexts through client (which the LocalIndex
// uses but does not close). It does not wait for the snapshots: see WaitSynced. It fails
// with ErrInvalidArgument for bad options and, when HashSeed is nil, with the Stats
// call's error.
func NewLocalIndex(ctx context.Context, client *Client, opts LocalIndexOptions) (*LocalIndex, error) {
	if len(opts.Contexts) == 0 {
		return nil, newError(CodeInvalidArgument, "contexts: at least one context is needed")
	}
	for i, c := range opts.Contexts {
		if c.Model == "" || c.BlockSize == 0 {
			return nil, newError(CodeInvalidArgument, fmt.Sprintf("contexts[%d]: a model and a positive block size are needed", i))
		}
	}
	if opts.MaxLookupBlocks == 0 {
		opts.MaxLookupBlocks = 8192
	}
	if opts.RetryBackoffMin <= 0 {
		opts.RetryBackoffMin = 50 * time.Millisecond
	}
	if opts.RetryBackoffMax < opts.RetryBackoffMin {
		opts.RetryBackoffMax = 2 * time.Second
	}
	if opts.MaxPredictedEntries <= 0 {
		opts.MaxPredictedEntries = defaultMaxPredictedEntries
	}
	seed := DefaultHashSeed
	if opts.HashSeed != nil {
		seed = *opts.HashSeed
	} else {
		st, err := client.Stats(ctx)
		if err != nil {
			return nil, err
		}
		seed = st.HashSeed
	}
	runCtx, cancel := context.WithCancel(context.Background())
	li := &LocalIndex{client: client, opts: opts, hasher: NewBlockHasher(seed), cancel: cancel,
		holderIDs: map[Holder]uint32{}, now: time.Now}
	for _, c := range opts.Contexts {
		c = normalContext(c)
		r := &localReplica{ctx: c, changed: make(chan struct{})}
		if opts.Predictions {
			r.predicted = newPredictedTable(opts.MaxPredictedEntries)
		}
		r.status.Context = c
		li.replicas = append(li.replicas, r)
		li.done.Add(1)
		go func() {
			defer li.done.Done()
			li.follow(runCtx, r)
		}()
	}
	return li, nil
}

// Close stops following and waits for the sync goroutines. The client stays open.
func (li *LocalIndex) Close() {
	li.cancel()
	li.done.Wait()
}

func normalContext(c Context) Context {
	if c.Tenant == "" {
		c.Tenant = "default"
	}
	return c
}

func (li *LocalIndex) replica(c Context) *localReplica {
	c = normalContext(c)
	for _, r := range li.replicas {
		if r.ctx == c {
			return r
		}
	}
	return nil
}

func (li *LocalIndex) intern(h Holder) uint32 {
	li.holdersMu.RLock()
	id, ok := li.holderIDs[h]
	li.holdersMu.RUnlock()
	if ok {
		return id
	}
	li.holdersMu.Lock()
	defer li.holdersMu.Unlock()
	if id, ok := li.holderIDs[h]; ok {
		return id
	}
	id = uint32(len(li.holders))
	li.holders = append(li.holders, h)
	li.holderIDs[h] = id
	return id
}

func (li *LocalIndex) holderList() []Holder {
	li.holdersMu.RLock()
	defer li.holdersMu.RUnlock()
	return li.holders // append-only: the prefix is immutable
}

// Lookup is Client.Lookup answered from the replica, at the revision it has reached:
// ErrNotFound for a context not replicated, ErrUnavailable before its first snapshot or
// when MinRevision is not reached here, ErrInvalidArgument for a linearizable read (only
// the leader answers one).
func (li *LocalIndex) Lookup(r LookupRequest) (*LookupAnswer, error) {
	if r.Linearizable {
		return nil, newError(CodeInvalidArgument, "linearizable: a local replica cannot answer a linearizable read")
	}
	rep := li.replica(r.Context)
	if rep == nil {
		return nil, newError(CodeNotFound, "context: not replicated by this LocalIndex")
	}
	keys := r.Hashes
	if r.Tokens != nil {
		keys = li.hasher.SequenceHashes(r.Tokens, rep.ctx.BlockSize)
	}
	return li.lookupKeys(rep, keys, r.Instance, r.IncludeLocations, r.MinRevision)
}

// LookupHashes is Lookup by block keys over every instance (the router's hot path).
func (li *LocalIndex) LookupHashes(c Context, keys []uint64) (*LookupAnswer, error) {
	rep := li.replica(c)
	if rep == nil {
		return nil, newError(CodeNotFound, "context: not replicated by this LocalIndex")
	}
	return li.lookupKeys(rep, keys, "", false, 0)
}

func (li *LocalIndex) lookupKeys(rep *localReplica, keys []uint64, instance string, locations bool, minRevision uint64) (*LookupAnswer, error) {
	rep.mu.RLock()
	defer rep.mu.RUnlock()
	// After the table's lock: every holder the table names was interned before it was
	// added (under the write lock), so this list has it.
	holders := li.holderList()
	if rep.table == nil {
		return nil, newError(CodeUnavailable, "context: its snapshot is not loaded yet")
	}
	if minRevision > rep.revision {
		return nil, newError(CodeUnavailable, fmt.Sprintf("min_revision: %d not reached (the replica is at %d)", minRevision, rep.revision))
	}
	a := rep.table.lookup(keys, instance, locations, li.opts.MaxLookupBlocks, holders, rep.revision, rep.ctx)
	if rep.predicted != nil {
		// Over the keys the lookup walked, as the server's route predicts over its lookup's.
		if uint64(len(keys)) > uint64(li.opts.MaxLookupBlocks) {
			keys = keys[:li.opts.MaxLookupBlocks]
		}
		a.Predicted = rep.predicted.prefixes(keys, instance, li.now().UnixNano())
	}
	return &a, nil
}

// Route is Client.Route answered from the replica: the lookup over every instance, then
// the server's cost (RouteFromLookup).
func (li *LocalIndex) Route(r RouteRequest) (*RouteAnswer, error) {
	lookup := r.Lookup
	lookup.Instance, lookup.IncludeLocations = "", false
	a, err := li.Lookup(lookup)
	if err != nil {
		return nil, err
	}
	return RouteFromLookup(&r, a)
}

// Status is each context's sync state, in the order of LocalIndexOptions.Contexts.
func (li *LocalIndex) Status() []LocalContextStatus {
	out := make([]LocalContextStatus, len(li.replicas))
	for i, r := range li.replicas {
		r.statusMu.Lock()
		out[i] = r.status
		r.statusMu.Unlock()
		r.mu.RLock()
		out[i].Revision = r.revision
		if r.table != nil {
			out[i].Blocks, out[i].Copies, out[i].MemoryBytes = r.table.blockCount(), r.table.copies, r.table.memoryBytes()
		}
		if r.predicted != nil {
			out[i].PredictedEntries, out[i].PredictedDropped = uint64(r.predicted.stats.entries), r.predicted.stats.dropped
		}
		r.mu.RUnlock()
	}
	return out
}

// Lag is how many revisions the least advanced context is behind the server client talks
// to (a Stats call), and that server's revision.
func (li *LocalIndex) Lag(ctx context.Context) (behind, serverRevision uint64, err error) {
	st, err := li.client.Stats(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range li.Status() {
		if st.Revision > s.Revision && st.Revision-s.Revision > behind {
			behind = st.Revision - s.Revision
		}
	}
	return behind, st.Revision, nil
}

// WaitForRevision waits until every context is live with revision applied (e.g. an
// ingest's answer), or ctx ends (its error, naming the contexts behind).
func (li *LocalIndex) WaitForRevision(ctx context.Context, revision uint64) error {
	for _, r := range li.replicas {
		for {
			r.statusMu.Lock()
			live, changed := r.status.State == LocalLive, r.changed
			r.statusMu.Unlock()
			r.mu.RLock()
			reached := r.table != nil && r.revision >= revision
			r.mu.RUnlock()
			if live && reached {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return ctxError(ctx, "waiting for the local replica: "+li.describe())
			}
		}
	}
	return nil
}

// WaitSynced waits until every context has loaded its snapshot and follows a live watch.
func (li *LocalIndex) WaitSynced(ctx context.Context) error { return li.WaitForRevision(ctx, 0) }

func (li *LocalIndex) describe() string {
	var parts []string
	for _, s := range li.Status() {
		p := fmt.Sprintf("%s/%d %s at revision %d", s.Context.Model, s.Context.BlockSize, s.State, s.Revision)
		if s.LastError != nil {
			p += " (" + s.LastError.Error() + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// setStatus changes the context's state under statusMu and wakes the waiters.
func (r *localReplica) setStatus(change func(*LocalContextStatus)) {
	r.statusMu.Lock()
	change(&r.status)
	close(r.changed)
	r.changed = make(chan struct{})
	r.statusMu.Unlock()
}

// follow is one context's sync loop: snapshot, then watch from its revision; watch again
// from the last revision after a cut or a lost connection; list again after a compacted
// feed (or a server whose history is behind the replica's for good).
func (li *LocalIndex) follow(ctx context.Context, r *localReplica) {
	backoff := li.opts.RetryBackoffMin
	var resume *uint64 // nil: the snapshot must be (re)loaded
	future := 0        // consecutive watches refused for a revision in the server's future
	failed := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		r.setStatus(func(s *LocalContextStatus) { s.State, s.LastError = LocalFailed, err })
		if li.opts.OnError != nil {
			li.opts.OnError(r.ctx, err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false
		}
		if backoff *= 2; backoff > li.opts.RetryBackoffMax {
			backoff = li.opts.RetryBackoffMax
		}
		return true
	}
	for ctx.Err() == nil {
		if resume == nil {
			r.setStatus(func(s *LocalContextStatus) {
				if s.State != LocalFailed {
					s.State = LocalLoading
				}
			})
			rev, err := li.load(ctx, r)
			if err != nil {
				if !failed(err) {
					return
				}
				continue
			}
			resume = &rev
		}
		from := *resume
		w, err := li.client.Watch(ctx, WatchOptions{From: &from, Filter: ContextFilter(r.ctx),
			Predicted: li.opts.Predictions})
		if err != nil {
			if errors.Is(err, ErrInvalidArgument) {
				future++
			} else {
				future = 0
			}
			if errors.Is(err, ErrCompacted) || future > 3 {
				resume, future = nil, 0
				continue
			}
			if !failed(err) {
				return
			}
			continue
		}
		future = 0
		backoff = li.opts.RetryBackoffMin
		r.setStatus(func(s *LocalContextStatus) { s.State, s.LastError = LocalLive, nil })
		err = li.drain(ctx, r, w)
		w.Close()
		next := w.ResumeFrom()
		resume = &next
		if ctx.Err() != nil {
			return
		}
		r.setStatus(func(s *LocalContextStatus) { s.Resumes++ })
		switch {
		case errors.Is(err, ErrCompacted):
			resume = nil
		case errors.Is(err, ErrWatchCut): // at once: the server is there, we were slow
		default:
			if !failed(err) {
				return
			}
		}
	}
}

// load lists the context and swaps the new table in; its revision.
func (li *LocalIndex) load(ctx context.Context, r *localReplica) (uint64, error) {
	// Bounded as a whole: a context of 50M copies takes about a minute.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	snap, err := li.client.Snapshot(sctx, r.ctx)
	if err != nil {
		return 0, err
	}
	t := newLocalTable(len(snap.Copies))
	for _, c := range snap.Copies {
		t.add(c.Key, packCopy(li.intern(c.Holder), c.Tier), c.Location)
	}
	r.mu.Lock()
	r.table, r.revision = t, snap.Revision
	r.mu.Unlock()
	r.setStatus(func(s *LocalContextStatus) { s.Snapshots++; s.LastApplied = time.Now() })
	return snap.Revision, nil
}

// The wait after which a quiet feed is checked with a ping: a connection can die without
// a word, and the replica must not count as live then.
const localLivenessCheck = time.Second

// drain applies the stream's records until it ends (its error) or ctx does.
func (li *LocalIndex) drain(ctx context.Context, r *localReplica, w *WatchStream) error {
	for {
		next, cancel := context.WithTimeout(ctx, localLivenessCheck)
		records, err := w.Next(next)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, ErrDeadlineExceeded) {
				return err
			}
			// On the watch's own connection (a member's when the client routes by the
			// directory): another server answering says nothing of this one.
			ping, cancel := context.WithTimeout(ctx, localLivenessCheck)
			_, err = w.cn.call(ping, typePing, nil)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		li.apply(r, records, w.ResumeFrom())
	}
}

// apply applies complete revisions and moves the replica to reached.
func (li *LocalIndex) apply(r *localReplica, records []FeedRecord, reached uint64) {
	type prepared struct {
		packed uint32
		rec    *FeedRecord
	}
	ops := make([]prepared, len(records)) // interned outside the table's lock
	for i := range records {
		ops[i] = prepared{packCopy(li.intern(records[i].Holder), records[i].Tier), &records[i]}
	}
	now := li.now().UnixNano()
	r.mu.Lock()
	for _, op := range ops {
		rec := op.rec
		if r.predicted != nil {
			r.predicted.apply(rec, now)
		}
		if rec.Op == OpStored {
			located := len(rec.Locations) == len(rec.Keys)
			for i, k := range rec.Keys {
				loc := ""
				if located {
					loc = rec.Locations[i]
				}
				r.table.add(k, op.packed, loc)
			}
		} else if rec.Op != OpPredicted { // a prediction is no copy
			for _, k := range rec.Keys {
				r.table.remove(k, op.packed)
			}
		}
	}
	if reached > r.revision {
		r.revision = reached
	}
	r.mu.Unlock()
	r.setStatus(func(s *LocalContextStatus) { s.LastApplied = time.Now() })
}
