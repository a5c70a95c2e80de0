package kvatlas

import (
	"errors"
	"syscall"
	"testing"
)

func refcountOf(t *testing.T, c *Client, key uint64) uint32 {
	t.Helper()
	loc, err := c.Locate(testCtx(t), key, &testContext)
	if err != nil || len(loc.Copies) != 1 {
		t.Fatalf("Locate(%d): %+v, %v", key, loc, err)
	}
	return loc.Copies[0].Refcount
}

func TestWriterNumbersBatches(t *testing.T) {
	s := startServer(t)
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	if _, err := NewWriter(c, "no spaces", 1, WriterOptions{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewWriter with a bad id: %v", err)
	}
	w, err := NewWriter(c, "go-writer-1", 1, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokens := seqTokens(4, 9)
	key := NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, 4)[0]
	for i := 0; i < 2; i++ {
		if _, err := w.Write(ctx, []Event{storedEvent("h", tokens)}); err != nil {
			t.Fatalf("Write #%d: %v", i+1, err)
		}
	}
	if w.NextSequence() != 3 || w.HasPending() {
		t.Errorf("after two batches: next %d, pending %v", w.NextSequence(), w.HasPending())
	}
	// A rejected batch was not applied: dropped, its sequence reused.
	bad := storedEvent("h", tokens)
	bad.Context.Model = ""
	if _, err := w.Write(ctx, []Event{bad}); !errors.Is(err, ErrInvalidArgument) || w.HasPending() || w.NextSequence() != 3 {
		t.Errorf("a rejected batch: %v, pending %v, next %d", err, w.HasPending(), w.NextSequence())
	}
	// The same id from sequence 1 again (a process that lost its position): the server
	// skips what it has applied already.
	again, _ := NewWriter(c, "go-writer-1", 1, WriterOptions{})
	if _, err := again.Write(ctx, []Event{storedEvent("h", tokens)}); err != nil {
		t.Fatal(err)
	}
	if got := refcountOf(t, c, key); got != 2 {
		t.Errorf("refcount %d, want 2 (two batches; the replay of sequence 1 skipped)", got)
	}
}

// A writer across a leader's death: the batch whose send fails is resent, with the same
// sequence, until the new leader acknowledges it, and is applied once.
func TestWriterAcrossFailover(t *testing.T) {
	servers := startCluster(t, 3)
	leader, followers := roles(t, servers)
	c := dialT(t, Options{Endpoints: []string{followers[0].rpc, followers[1].rpc}})
	w, err := NewWriter(c, "go-failover", 1, WriterOptions{RetryFor: startupBound})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := w.Write(ctx, []Event{storedEvent("h", seqTokens(4, 1))}); err != nil {
		t.Fatalf("Write before the failover: %v", err)
	}
	_ = leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.exited
	tokens := seqTokens(4, 500)
	ans, err := w.Write(ctx, []Event{storedEvent("h", tokens)})
	if err != nil {
		t.Fatalf("Write across the failover: %v", err)
	}
	if w.NextSequence() != 3 {
		t.Errorf("next sequence %d, want 3", w.NextSequence())
	}
	// Read on a surviving member once it has applied the write.
	if _, err := c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: tokens, MinRevision: ans.Revision}); err != nil {
		t.Fatal(err)
	}
	key := NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, 4)[0]
	if got := refcountOf(t, c, key); got != 1 {
		t.Errorf("refcount %d after the failover write, want 1", got)
	}
}
