package kvatlas

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// WriterOptions tune a Writer; zero fields take the defaults.
type WriterOptions struct {
	// How long one Write keeps resending a batch whose outcome is unknown. Default 10 s.
	RetryFor time.Duration
	// Deadline of one send. Default 2 s.
	CallTimeout time.Duration
	// Pause between sends, doubling up to BackoffMax. Defaults 10 ms and 500 ms.
	BackoffMin, BackoffMax time.Duration
}

// Writer ingests exactly once through a Client (docs/api.md §Idempotent writes), as the
// C++ kvatlas::Writer does: it names itself, numbers its batches 1, 2, 3... and keeps one
// batch in flight. When a batch's outcome is unknown (connection lost, deadline, server
// busy, leader changing, a context just placed on another group) it resends the same
// batch with the same sequence until the server acknowledges it; the server applies each
// (id, sequence) at most once, so a batch is applied exactly once however often it was
// sent.
//
// A batch not acknowledged within RetryFor stays pending: the next Write first resends it
// (its outcome must be settled before a higher sequence may be sent, or a late first copy
// would be taken for a duplicate). A batch the server rejects (invalid_argument,
// payload_too_large, permission_denied, ...) was not applied and is dropped.
// Safe for concurrent use; calls are serialized.
type Writer struct {
	client *Client
	id     string
	opts   WriterOptions

	mu      sync.Mutex
	next    uint64 // the sequence of the pending batch, or of the next new one
	pending []Event
	hasPend bool // pending holds a batch (possibly empty) whose outcome is unsettled
}

// NewWriter returns a writer named id (1-128 bytes of [A-Za-z0-9._:-]). A writer id that
// outlives the process (stored by the caller) continues at the sequence after the last
// one acknowledged; a fresh id (e.g. host + pid + start time) starts at 1.
func NewWriter(client *Client, id string, nextSequence uint64, opts WriterOptions) (*Writer, error) {
	if !validWriterID(id) {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("writer_id: %q must be 1-%d bytes of [A-Za-z0-9._:-]", id, maxWriterIDBytes))
	}
	if nextSequence == 0 {
		nextSequence = 1
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 10 * time.Second
	}
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 2 * time.Second
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 10 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = 500 * time.Millisecond
	}
	return &Writer{client: client, id: id, opts: opts, next: nextSequence}, nil
}

// ID is the writer's id.
func (w *Writer) ID() string { return w.id }

// NextSequence is the sequence the next new batch will carry (or the pending one carries).
func (w *Writer) NextSequence() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// HasPending says whether a batch's outcome is still unsettled.
func (w *Writer) HasPending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hasPend
}

// Write sends events as the next batch (after settling a pending one) and returns the
// server's answer, or the last error once RetryFor has passed or ctx ended (the batch then
// stays pending).
func (w *Writer) Write(ctx context.Context, events []Event) (*IngestAnswer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hasPend {
		if _, err := w.sendPendingLocked(ctx); err != nil && w.hasPend {
			return nil, fmt.Errorf("an earlier batch of writer %s (sequence %d) is still unsettled: %w", w.id, w.next, err)
		}
	}
	w.pending, w.hasPend = events, true
	return w.sendPendingLocked(ctx)
}

// Settle resends the pending batch, if any, until it is acknowledged or RetryFor passed.
func (w *Writer) Settle(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.hasPend {
		return nil
	}
	_, err := w.sendPendingLocked(ctx)
	return err
}

// outcomeUnknown: after these the batch may or may not have been applied, or was refused
// for now: resending the same (id, sequence) is both safe and needed.
func outcomeUnknown(c Code) bool {
	return c == CodeUnavailable || c == CodeDeadlineExceeded || c == CodeResourceExhausted ||
		c == CodeNotLeader || c == CodeWrongGroup
}

func (w *Writer) sendPendingLocked(ctx context.Context) (*IngestAnswer, error) {
	giveUp := time.Now().Add(w.opts.RetryFor)
	backoff := w.opts.BackoffMin
	for {
		callCtx, cancel := context.WithTimeout(ctx, w.opts.CallTimeout)
		a, err := w.client.IngestOnce(callCtx, WriterPosition{ID: w.id, Sequence: w.next}, w.pending)
		cancel()
		if err == nil {
			w.pending, w.hasPend = nil, false
			w.next++
			return a, nil
		}
		if !outcomeUnknown(CodeOf(err)) {
			w.pending, w.hasPend = nil, false // rejected: not applied, the sequence is free
			return nil, err
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(giveUp) {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		if backoff *= 2; backoff > w.opts.BackoffMax {
			backoff = w.opts.BackoffMax
		}
	}
}
