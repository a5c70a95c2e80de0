package kvatlas

import (
	"context"
	"fmt"
	"sync"
)

// The change feed over the binary protocol (docs/feed.md, docs/protocol.md §Streams):
// Snapshot lists a context at one revision, Watch follows every change after a revision.

// FeedOp is what a feed record did to its copies.
type FeedOp uint8

const (
	OpStored        FeedOp = 0
	OpRemoved       FeedOp = 1
	OpCleared       FeedOp = 2
	OpEvicted       FeedOp = 3
	OpHolderExpired FeedOp = 4
	// OpPredicted (approximate mode, docs/feed.md §Predicted records): the holder was sent
	// these blocks and is guessed to hold them until ExpiresAtMs. Only to watches started
	// with WatchOptions.Predicted.
	OpPredicted FeedOp = 5
)

func (o FeedOp) String() string {
	switch o {
	case OpStored:
		return "stored"
	case OpRemoved:
		return "removed"
	case OpCleared:
		return "cleared"
	case OpEvicted:
		return "evicted"
	case OpHolderExpired:
		return "holder-expired"
	case OpPredicted:
		return "predicted"
	}
	return "op(?)"
}

// FeedRecord is one operation on a run of block keys of one holder in one tier of one
// context, at one revision.
type FeedRecord struct {
	Revision  uint64
	Op        FeedOp
	Context   Context
	Holder    Holder
	Tier      Tier
	Keys      []uint64
	Locations []string // stored: empty, or one per key ("" for a key without)
	// OpPredicted only (0 otherwise): when the prediction ends, ms since the Unix epoch on
	// the publishing server's clock. A predicted record's Tier is TierGPU and means nothing.
	ExpiresAtMs uint64
}

// FeedFilter narrows a watch; a nil field matches anything.
type FeedFilter struct {
	Tenant, Model, LoRA *string
	BlockSize           *uint32
	Salt, BackendID     *string
	DPRank              *uint32
	Tier                *Tier
}

// ContextFilter is the filter of one context's records (what a replica of it watches).
func ContextFilter(c Context) FeedFilter {
	tenant := c.Tenant
	if tenant == "" {
		tenant = "default"
	}
	bs := c.BlockSize
	return FeedFilter{Tenant: &tenant, Model: &c.Model, LoRA: &c.LoRA, BlockSize: &bs, Salt: &c.Salt}
}

func putOptString(e *encoder, s *string) {
	e.flag(s != nil)
	if s != nil {
		e.str(*s)
	}
}

func putOptVarint(e *encoder, v *uint32) {
	e.flag(v != nil)
	if v != nil {
		e.varint(uint64(*v))
	}
}

// The start request's options trailer (docs/protocol.md §kWatch): a u8 of option bits,
// written only when one is on, so that a watch without options is the bytes every server
// reads.
const watchOptionPredicted uint8 = 0x01

func encodeWatchStart(from *uint64, f *FeedFilter, predicted bool) []byte {
	e := &encoder{}
	e.u8(0)
	e.flag(from != nil)
	if from != nil {
		e.u64(*from)
	}
	putOptString(e, f.Tenant)
	putOptString(e, f.Model)
	putOptString(e, f.LoRA)
	putOptVarint(e, f.BlockSize)
	putOptString(e, f.Salt)
	putOptString(e, f.BackendID)
	putOptVarint(e, f.DPRank)
	e.flag(f.Tier != nil)
	if f.Tier != nil {
		e.u8(uint8(*f.Tier))
	}
	if predicted {
		e.u8(watchOptionPredicted)
	}
	return e.b
}

var watchCancelPayload = []byte{1}

type watchBatch struct {
	final   bool
	through uint64
	records []FeedRecord
}

func decodeWatchBatch(p []byte) (watchBatch, error) {
	d := &decoder{b: p}
	var b watchBatch
	switch d.u8("marker") {
	case 0:
	case 1:
		b.final = true
	default:
		d.fail("marker", "not a stream marker (0 or 1)")
	}
	b.through = d.u64("through")
	if !b.final {
		if n := d.count("records", 20); n > 0 {
			b.records = make([]FeedRecord, n)
			for i := range b.records {
				r := &b.records[i]
				r.Revision = d.u64("records.revision")
				op := d.u8("records.op")
				if op > uint8(OpPredicted) {
					d.fail("records.op", fmt.Sprintf("%d is not an op (0-5)", op))
				}
				r.Op = FeedOp(op)
				r.Context = readContext(d)
				r.Holder = readHolder(d)
				r.Tier = readTier(d, "records.tier")
				if k := d.count("records.keys", 8); k > 0 {
					r.Keys = make([]uint64, k)
					for j := range r.Keys {
						r.Keys[j] = d.u64("records.keys")
					}
				}
				r.Locations = readStrings(d, "records.locations")
				if r.Op == OpPredicted && d.err == nil {
					if len(r.Locations) != 0 {
						d.fail("records.locations", "must be empty on a predicted record")
					}
					r.ExpiresAtMs = d.u64("records.expires_at_ms")
				}
			}
		}
	}
	return b, d.finish()
}

// WatchOptions start a watch.
type WatchOptions struct {
	// The records after this revision; nil = after the revision current when it starts.
	From   *uint64
	Filter FeedFilter
	// Also receive predicted records (OpPredicted, docs/feed.md §Predicted records): the
	// predictions the server applies after the watch starts. A server that predates them
	// refuses the watch (ErrInvalidArgument, "payload: 1 trailing bytes"). A Tier filter
	// matches no predicted record.
	Predicted bool
	// Block keys the stream may hold for Next; past it (Next is not called often enough)
	// the stream ends with ErrWatchCut and the server's watch is cancelled. Default
	// 1,000,000.
	MaxQueuedKeys int
}

// WatchStream is a watch of the change feed. Records come in revision order, each
// revision whole. The stream ends for good with one error, which Next returns once the
// records received before it were returned: ErrWatchCut (it fell behind: watch again
// from ResumeFrom), ErrUnavailable (the connection was lost or the server shut down),
// ErrCancelled (after Close), ErrCorruption (an undecodable frame). Safe for concurrent
// use.
type WatchStream struct {
	cn        *conn
	call      *pendingCall
	maxQueued int

	mu       sync.Mutex
	ready    []FeedRecord // complete revisions, not yet returned
	partial  []FeedRecord // records above the last through (a revision split over frames)
	gotFirst bool         // the server started the watch
	through  uint64       // last through received
	returned uint64       // ResumeFrom: the last through handed out by Next
	queued   int          // keys in ready and partial
	err      *Error       // the terminal error, once known
	signal   chan struct{}
	started  chan struct{} // closed at the first frame or the end
	cancel   sync.Once
}

// Watch starts a watch and returns once the server has started it (so every change
// applied after Watch returns is delivered). It fails with ErrCompacted (From is older
// than the server's window: Snapshot, then watch from its revision; the error's
// OldestRevision and CurrentRevision say the window), ErrInvalidArgument (a From in the
// future), ErrResourceExhausted (too many watches), ErrWrongGroup (the server holds no
// replica of the filter's group: watch again, by the routing table that answer refreshes),
// or the errors of every call. A watch holds one in-flight slot of its connection until it
// ends. A filter that names a model and a block size is sent to a member of its context's
// group (Options.DisableDirectoryRouting); others to the endpoints.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) (*WatchStream, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	var cn *conn
	var err error
	if of, ok := opts.Filter.groupContext(); ok {
		cn, err = c.connFor(ctx, of)
	} else {
		cn, err = c.endpointConn(ctx)
	}
	if err != nil {
		return nil, err
	}
	w := &WatchStream{cn: cn, maxQueued: opts.MaxQueuedKeys, signal: make(chan struct{}, 1),
		started: make(chan struct{})}
	if w.maxQueued <= 0 {
		w.maxQueued = 1_000_000
	}
	w.call = &pendingCall{onFrame: w.onFrame, onEnd: w.end}
	if _, err := cn.send(ctx, typeWatch, encodeWatchStart(opts.From, &opts.Filter, opts.Predicted), w.call); err != nil {
		return nil, err
	}
	select {
	case <-w.started:
	case <-ctx.Done():
		w.Close()
		return nil, ctxError(ctx, "waiting for the watch to start")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gotFirst {
		return nil, w.err
	}
	return w, nil
}

func (w *WatchStream) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *WatchStream) markStarted() {
	select {
	case <-w.started:
	default:
		close(w.started)
	}
}

// onFrame runs on the connection's reader goroutine: it never blocks.
func (w *WatchStream) onFrame(f frame) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.wake()
	if w.err != nil {
		return
	}
	if f.status != 0 {
		w.err = decodeErrorPayload(CodeFromNumber(f.status), f.payload)
		w.markStarted()
		return
	}
	b, err := decodeWatchBatch(f.payload)
	if err != nil {
		w.err = CodeOf(err).asError(err)
		w.markStarted()
		w.sendCancel()
		return
	}
	first := !w.gotFirst
	w.gotFirst = true
	if b.final {
		w.err = newError(CodeCancelled, "the watch was cancelled")
		w.markStarted()
		return
	}
	keys := 0
	for _, r := range b.records {
		keys += len(r.Keys)
	}
	if w.queued+keys > w.maxQueued {
		// Not taken: what was received before stays for Next, then the cut.
		w.err = newError(CodeWatchCut, fmt.Sprintf("more than %d block keys waited for Next; watch again from ResumeFrom", w.maxQueued))
		w.markStarted()
		w.sendCancel()
		return
	}
	w.partial = append(w.partial, b.records...)
	w.queued += keys
	if b.through > w.through || first {
		w.through = b.through
		if first {
			w.returned = b.through
		}
		// Records up to through are complete revisions.
		n := 0
		for n < len(w.partial) && w.partial[n].Revision <= w.through {
			n++
		}
		w.ready = append(w.ready, w.partial[:n]...)
		w.partial = append([]FeedRecord(nil), w.partial[n:]...)
	}
	w.markStarted()
}

func (w *WatchStream) end(e *Error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = e
	}
	w.mu.Unlock()
	w.markStarted()
	w.wake()
}

// sendCancel asks the server to end the watch (its last frame frees the slot). Runs the
// write on its own goroutine: it is called with w.mu held, on the reader goroutine.
func (w *WatchStream) sendCancel() {
	w.cancel.Do(func() {
		id := w.call.id
		go func() { _ = w.cn.write(typeWatch, id, watchCancelPayload) }()
	})
}

// Next waits (under ctx) for records and returns every complete revision received since
// the last call, or the terminal error once they were all returned. An empty result with
// a nil error means revisions without matching records passed (ResumeFrom advanced). A ctx
// that ends returns its error (ErrDeadlineExceeded, ErrCancelled) and the stream goes on.
func (w *WatchStream) Next(ctx context.Context) ([]FeedRecord, error) {
	for {
		w.mu.Lock()
		if len(w.ready) > 0 || w.through > w.returned {
			out := w.ready
			w.ready = nil
			for _, r := range out {
				w.queued -= len(r.Keys)
			}
			w.returned = w.through
			w.mu.Unlock()
			return out, nil
		}
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return nil, err
		}
		w.mu.Unlock()
		select {
		case <-w.signal:
		case <-ctx.Done():
			return nil, ctxError(ctx, "waiting for watch records")
		}
	}
}

// ResumeFrom is the last revision fully returned by Next: a new watch from it misses
// nothing and repeats nothing.
func (w *WatchStream) ResumeFrom() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.returned
}

// Close ends the stream (Next returns ErrCancelled) and cancels the server's watch.
// Idempotent.
func (w *WatchStream) Close() {
	w.mu.Lock()
	if w.err == nil {
		w.err = newError(CodeCancelled, "the watch was closed")
		w.ready, w.partial = nil, nil
	}
	w.sendCancel()
	w.mu.Unlock()
	w.wake()
}

// SnapshotCopy is one copy of a snapshot's context.
type SnapshotCopy struct {
	Key        uint64
	Holder     Holder
	Tier       Tier
	Depth      uint32
	Refcount   uint32
	EngineHash uint64
	Location   string
}

// ContextSnapshot is every copy of one context at one revision.
type ContextSnapshot struct {
	Revision uint64
	Context  Context
	Copies   []SnapshotCopy // blocks in creation order
}

func encodeSnapshotRequest(c Context) []byte {
	e := &encoder{}
	putContext(e, c)
	return e.b
}

type snapshotPart struct {
	last     bool
	revision uint64
	part     uint32
	context  Context
	copies   []SnapshotCopy
}

func decodeSnapshotPart(p []byte) (snapshotPart, error) {
	d := &decoder{b: p}
	var s snapshotPart
	switch d.u8("marker") {
	case 0:
	case 1:
		s.last = true
	default:
		d.fail("marker", "not a stream marker (0 or 1)")
	}
	s.revision = d.u64("revision")
	s.part = d.varint32("part")
	s.context = readContext(d)
	if n := d.count("copies", 14); n > 0 {
		s.copies = make([]SnapshotCopy, n)
		for i := range s.copies {
			s.copies[i] = SnapshotCopy{Key: d.u64("copies.key"), Holder: readHolder(d),
				Tier: readTier(d, "copies.tier"), Depth: d.varint32("copies.depth"),
				Refcount: d.varint32("copies.refcount"), EngineHash: d.u64("copies.engine_hash"),
				Location: d.str("copies.location")}
		}
	}
	return s, d.finish()
}

// Snapshot lists every copy of a context at one revision (GET /v1/snapshot), received in
// parts; the deadline is that of the whole answer. List, then Watch from its Revision to
// miss no change. ErrResourceExhausted when the server streams its maximum of snapshots;
// ErrWrongGroup when it holds no replica of the context's group (list again, by the
// routing table that answer refreshes). Sent to a member of the context's group
// (Options.DisableDirectoryRouting).
func (c *Client) Snapshot(ctx context.Context, of Context) (*ContextSnapshot, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	cn, err := c.connFor(ctx, normalContext(of))
	if err != nil {
		return nil, err
	}
	type result struct {
		snap *ContextSnapshot
		err  error
	}
	done := make(chan result, 1)
	var once sync.Once
	finish := func(r result) { once.Do(func() { done <- r }) } // the first outcome counts
	snap := &ContextSnapshot{}
	next := uint32(0)
	p := &pendingCall{
		onFrame: func(f frame) {
			if f.status != 0 {
				finish(result{err: decodeErrorPayload(CodeFromNumber(f.status), f.payload)})
				return
			}
			part, err := decodeSnapshotPart(f.payload)
			if err == nil && part.part != next {
				err = newError(CodeCorruption, fmt.Sprintf("snapshot part %d after %d parts", part.part, next))
			}
			if err != nil {
				finish(result{err: err})
				if !part.last { // the rest of the stream cannot be trusted
					go cn.fail(CodeOf(err).asError(err))
				}
				return
			}
			next++
			snap.Revision, snap.Context = part.revision, part.context
			snap.Copies = append(snap.Copies, part.copies...)
			if part.last {
				finish(result{snap: snap})
			}
		},
		onEnd: func(e *Error) { finish(result{err: e}) },
	}
	if _, err := cn.send(ctx, typeSnapshot, encodeSnapshotRequest(of), p); err != nil {
		return nil, err
	}
	select {
	case r := <-done:
		return r.snap, r.err
	case <-ctx.Done():
		// The stream stays registered until its last part: the server ends it.
		return nil, ctxError(ctx, "waiting for the snapshot")
	}
}
