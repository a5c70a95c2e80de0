package kvatlas

import (
	"context"
	"testing"
)

// Benchmarks against a real server (KVATLAS_SERVER_BIN): a 128-block prompt's lookup, one
// at a time (a round trip each) and from many goroutines (pipelined on one connection);
// and the hashing of that prompt.
//
//	go test -run '^$' -bench . -benchtime 3s

const benchBlocks = 128

func benchSetup(b *testing.B) (*Client, LookupRequest) {
	s := startServer(b)
	c, err := Dial(context.Background(), Options{Endpoints: []string{s.rpc}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	tokens := seqTokens(16*benchBlocks, 1)
	ctx16 := Context{Model: "bench", BlockSize: 16}
	ev := Event{Type: EventStored, Context: ctx16, Holder: Holder{BackendID: "e"},
		SeqHashes: NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, 16)}
	if _, err := c.Ingest(context.Background(), []Event{ev}); err != nil {
		b.Fatal(err)
	}
	return c, LookupRequest{Context: ctx16, Hashes: ev.SeqHashes}
}

func BenchmarkLookup128(b *testing.B) {
	c, req := benchSetup(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := c.Lookup(ctx, req)
		if err != nil || a.BlocksFound != benchBlocks {
			b.Fatalf("%+v, %v", a, err)
		}
	}
}

func BenchmarkLookup128Parallel(b *testing.B) {
	c, req := benchSetup(b)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := c.Lookup(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkHash128Blocks(b *testing.B) {
	tokens := seqTokens(16*benchBlocks, 1)
	h := NewBlockHasher(DefaultHashSeed)
	b.SetBytes(int64(4 * len(tokens)))
	for i := 0; i < b.N; i++ {
		_ = h.SequenceHashes(tokens, 16)
	}
}
