package kvatlas

import (
	"context"
	"sync"
	"time"
)

// FollowStream is a watch that survives lost connections, server restarts and cuts: when
// its watch ends with ErrUnavailable or ErrWatchCut it watches again from ResumeFrom (on
// whichever endpoint accepts, backing off while none does), so Next misses nothing and
// repeats nothing. It ends for good with an error a new watch cannot fix: ErrCompacted
// (the server no longer has the records after ResumeFrom: list with Snapshot and follow
// from its revision), ErrCancelled after Close, or the refusal of a new watch
// (ErrPermissionDenied, ErrInvalidArgument, ...). Safe for concurrent use; Next calls are
// serialized.
type FollowStream struct {
	c    *Client
	opts WatchOptions

	next sync.Mutex // serializes Next

	mu       sync.Mutex // the fields below
	cur      *WatchStream
	resume   uint64
	resubs   int
	closed   bool
	closedCh chan struct{}
}

// Follow starts a watch as Watch does (returning its errors) and keeps it going.
func (c *Client) Follow(ctx context.Context, opts WatchOptions) (*FollowStream, error) {
	w, err := c.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &FollowStream{c: c, opts: opts, cur: w, resume: w.ResumeFrom(), closedCh: make(chan struct{})}, nil
}

// Next returns the next complete revisions (as WatchStream.Next), re-watching as needed. A
// ctx that ends returns its error and the stream goes on.
func (f *FollowStream) Next(ctx context.Context) ([]FeedRecord, error) {
	f.next.Lock()
	defer f.next.Unlock()
	backoff := f.c.opts.ReconnectBackoffMin
	for {
		f.mu.Lock()
		cur, closed, from := f.cur, f.closed, f.resume
		f.mu.Unlock()
		if closed {
			return nil, newError(CodeCancelled, "the follow stream was closed")
		}
		if cur == nil {
			opts := f.opts
			opts.From = &from
			w, err := f.c.Watch(ctx, opts)
			if err != nil {
				if ctx.Err() != nil || !CodeOf(err).Retryable() {
					return nil, err
				}
				if err := f.sleep(ctx, backoff); err != nil {
					return nil, err
				}
				if backoff *= 2; backoff > f.c.opts.ReconnectBackoffMax {
					backoff = f.c.opts.ReconnectBackoffMax
				}
				continue
			}
			f.mu.Lock()
			if f.closed {
				f.mu.Unlock()
				w.Close()
				continue
			}
			f.cur, cur = w, w
			f.resubs++
			f.mu.Unlock()
		}
		recs, err := cur.Next(ctx)
		f.mu.Lock()
		f.resume = cur.ResumeFrom()
		f.mu.Unlock()
		if err == nil {
			return recs, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if c := CodeOf(err); c != CodeUnavailable && c != CodeWatchCut {
			if c == CodeCancelled {
				continue // Close: reported at the top of the loop
			}
			return nil, err
		}
		cur.Close()
		f.mu.Lock()
		f.cur = nil
		f.mu.Unlock()
	}
}

func (f *FollowStream) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-f.closedCh:
		return newError(CodeCancelled, "the follow stream was closed")
	case <-ctx.Done():
		return ctxError(ctx, "waiting to watch again")
	}
}

// ResumeFrom is the last revision fully returned by Next.
func (f *FollowStream) ResumeFrom() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resume
}

// Resubscriptions is how many times the stream watched again (for monitoring and tests).
func (f *FollowStream) Resubscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resubs
}

// Close ends the stream (Next returns ErrCancelled) and cancels the server's watch.
// Idempotent.
func (f *FollowStream) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	close(f.closedCh)
	if f.cur != nil {
		f.cur.Close()
	}
}
