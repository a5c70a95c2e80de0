package kvatlas

import (
	"context"
	"errors"
	"testing"
	"time"
)

// nextRecords calls Next until it has records (bounded by the test's context).
func nextRecords(t *testing.T, w *WatchStream) []FeedRecord {
	t.Helper()
	ctx := testCtx(t)
	for {
		recs, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(recs) > 0 {
			return recs
		}
	}
}

// List, then watch from the snapshot's revision: the watch delivers exactly the later
// changes of the context, and a new watch from ResumeFrom repeats nothing.
func TestSnapshotThenWatch(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	if _, err := c.Ingest(ctx, []Event{storedEvent("a", seqTokens(8, 1))}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, testContext)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	keysA := NewBlockHasher(DefaultHashSeed).SequenceHashes(seqTokens(8, 1), 4)
	if snap.Revision == 0 || len(snap.Copies) != 2 || snap.Copies[0].Key != keysA[0] ||
		snap.Copies[1].Depth != 1 || snap.Copies[0].Holder.BackendID != "a" || snap.Context.Model != "llama" {
		t.Fatalf("snapshot: %+v", snap)
	}
	empty, err := c.Snapshot(ctx, Context{Model: "none", BlockSize: 4})
	if err != nil || len(empty.Copies) != 0 {
		t.Errorf("snapshot of an unknown context: %+v, %v", empty, err)
	}

	from := snap.Revision
	w, err := c.Watch(ctx, WatchOptions{From: &from, Filter: ContextFilter(testContext)})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	other := storedEvent("a", seqTokens(4, 50))
	other.Context.Model = "qwen"
	ans, err := c.Ingest(ctx, []Event{other, storedEvent("b", seqTokens(4, 1))})
	if err != nil {
		t.Fatal(err)
	}
	recs := nextRecords(t, w)
	if len(recs) != 1 || recs[0].Op != OpStored || recs[0].Holder.BackendID != "b" ||
		recs[0].Revision != ans.Revision || len(recs[0].Keys) != 1 || recs[0].Keys[0] != keysA[0] {
		t.Fatalf("watched records: %+v", recs)
	}
	if w.ResumeFrom() < ans.Revision {
		t.Errorf("ResumeFrom %d after revision %d", w.ResumeFrom(), ans.Revision)
	}
	resume := w.ResumeFrom()
	w.Close()
	if _, err := w.Next(ctx); !errors.Is(err, ErrCancelled) {
		t.Errorf("Next after Close: %v, want cancelled", err)
	}

	// Changes made while no watch was open come with the next watch from ResumeFrom.
	ans2, err := c.Ingest(ctx, []Event{{Type: EventRemoved, Context: testContext,
		Holder: Holder{BackendID: "b"}, SeqHashes: keysA[:1]}})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := c.Watch(ctx, WatchOptions{From: &resume, Filter: ContextFilter(testContext)})
	if err != nil {
		t.Fatalf("Watch from %d: %v", resume, err)
	}
	defer w2.Close()
	recs = nextRecords(t, w2)
	if len(recs) != 1 || recs[0].Op != OpRemoved || recs[0].Revision != ans2.Revision {
		t.Errorf("resumed watch: %+v", recs)
	}
}

func TestWatchErrors(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	future := uint64(1_000_000)
	if _, err := c.Watch(ctx, WatchOptions{From: &future}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Watch from the future: %v, want invalid_argument", err)
	}
	w, err := c.Watch(ctx, WatchOptions{})
	if err != nil {
		t.Fatalf("Watch from now: %v", err)
	}
	// A Next whose context ends leaves the stream open.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = w.Next(short)
	cancel()
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Errorf("Next with nothing to say: %v, want deadline_exceeded", err)
	}
	// A client-side bound on queued keys cuts the stream.
	small, err := c.Watch(ctx, WatchOptions{MaxQueuedKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ingest(ctx, []Event{storedEvent("a", seqTokens(16, 7))}); err != nil {
		t.Fatal(err)
	}
	for {
		recs, err := small.Next(ctx)
		if err != nil {
			if !errors.Is(err, ErrWatchCut) {
				t.Errorf("a stream over MaxQueuedKeys ended with %v, want watch_cut", err)
			}
			break
		}
		if len(recs) > 0 {
			t.Fatalf("a stream over MaxQueuedKeys returned %+v", recs)
		}
	}
	if got := nextRecords(t, w); len(got) != 1 || len(got[0].Keys) != 4 {
		t.Errorf("the other watch: %+v", got)
	}
	// The server shutting down ends the watch with unavailable.
	s.stop()
	for {
		_, err := w.Next(ctx)
		if err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("Next after the server stopped: %v, want unavailable", err)
			}
			break
		}
	}
}

// A followed watch goes on across a server restart: it watches again from where it
// stopped, and the records applied after the restart come through.
func TestFollowAcrossRestart(t *testing.T) {
	s := startServer(t)
	rpc := s.rpc
	c := dialT(t, Options{Endpoints: []string{rpc}})
	ctx := testCtx(t)
	f, err := c.Follow(ctx, WatchOptions{Filter: ContextFilter(testContext)})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	defer f.Close()
	if _, err := c.Ingest(ctx, []Event{storedEvent("a", seqTokens(4, 1))}); err != nil {
		t.Fatal(err)
	}
	if recs := nextFollowed(t, f); len(recs) != 1 || recs[0].Holder.BackendID != "a" {
		t.Fatalf("before the restart: %+v", recs)
	}
	s.stop()
	s2 := startServerIn(t, s.dataDir, rpc)
	// Another client writes, so that the follower's reconnect is not helped by this one.
	w := dialT(t, Options{Endpoints: []string{s2.rpc}})
	ans, err := w.Ingest(ctx, []Event{storedEvent("b", seqTokens(4, 1))})
	if err != nil {
		t.Fatal(err)
	}
	recs := nextFollowed(t, f)
	if len(recs) != 1 || recs[0].Holder.BackendID != "b" || recs[0].Revision != ans.Revision {
		t.Errorf("after the restart: %+v (revision %d expected)", recs, ans.Revision)
	}
	if f.Resubscriptions() < 1 {
		t.Errorf("the stream did not watch again (%d)", f.Resubscriptions())
	}
	f.Close()
	if _, err := f.Next(ctx); !errors.Is(err, ErrCancelled) {
		t.Errorf("Next after Close: %v", err)
	}
}

func nextFollowed(t *testing.T, f *FollowStream) []FeedRecord {
	t.Helper()
	ctx := testCtx(t)
	for {
		recs, err := f.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if len(recs) > 0 {
			return recs
		}
	}
}
