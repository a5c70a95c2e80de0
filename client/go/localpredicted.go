package kvatlas

import (
	"math"
	"sort"
)

// predictedTable is a LocalIndex's predictions of one context (LocalIndexOptions.
// Predictions, docs/feed.md §Predicted records): the server's PredictedTable
// (common/internal/predicted_table.h) as the C++ LocalIndex applies it
// (client/src/local_predictions.cc). The server publishes only what its own table
// recorded — its live-stream rule and its cap applied there — so the replica records every
// predicted record it gets, each key until the record's expires_at_ms on this process's
// clock, and drops a holder's predictions on that holder's stored, removed and cleared
// records (the server's NoteEvent, without its live mark: Forget).
//
// Memory is bounded twice, as the server's: entries end with their TTL, and past
// maxEntries (block, holder) entries new ones are dropped and counted. Ended entries leave
// through a queue in order of expiry, popped when a prediction is recorded (at most
// predictedExpireBudget per recording); reads skip ended entries meanwhile. Times are ns
// since the Unix epoch. Not safe for concurrent use: LocalIndex guards it.
type predictedTable struct {
	maxEntries int
	buckets    map[Holder]*predictedBucket
	// One element per recorded or renewed entry, from head on; a renewed entry's older
	// elements are skipped when they reach the front.
	queue []predictedExpiry
	head  int
	stats predictedStats
}

// predictedBucket is one holder's predictions: key -> end. Named by pointer in the queue,
// so that an element of a dropped bucket is recognised (no longer in buckets).
type predictedBucket struct {
	holder Holder
	blocks map[uint64]int64
}

type predictedExpiry struct {
	at     int64
	bucket *predictedBucket
	key    uint64
}

type predictedStats struct {
	entries  int    // (block, holder) entries kept, ended ones not yet swept included
	recorded uint64 // entries added or renewed
	expired  uint64 // entries swept after their end
	dropped  uint64 // entries not recorded because the table was full
	replaced uint64 // entries dropped because their holder sent events
}

const (
	// The default LocalIndexOptions.MaxPredictedEntries (the server's
	// kDefaultMaxPredictedEntries).
	defaultMaxPredictedEntries = 1_000_000
	// Queue elements one recording pops at most (the server's kExpireBudget).
	predictedExpireBudget = 16_384
)

func newPredictedTable(maxEntries int) *predictedTable {
	return &predictedTable{maxEntries: maxEntries, buckets: map[Holder]*predictedBucket{}}
}

// predictedEnd is expires_at_ms in ns since the Unix epoch (far ends saturate).
func predictedEnd(expiresAtMs uint64) int64 {
	if expiresAtMs > math.MaxInt64/1_000_000 {
		return math.MaxInt64
	}
	return int64(expiresAtMs) * 1_000_000
}

// apply is a feed record's effect at now: a predicted record is recorded until its
// expires_at_ms; a stored, removed or cleared record drops its holder's predictions
// (its events say what it holds); others change nothing.
func (t *predictedTable) apply(r *FeedRecord, now int64) {
	switch r.Op {
	case OpPredicted:
		t.record(r.Holder, r.Keys, predictedEnd(r.ExpiresAtMs), now)
	case OpStored, OpRemoved, OpCleared:
		t.forget(r.Holder)
	}
}

// record records keys as predicted on holder until end (a key predicted again has its end
// moved later, never earlier); nothing when the prediction ended already. The entries
// recorded (added or renewed).
func (t *predictedTable) record(holder Holder, keys []uint64, end, now int64) int {
	if len(keys) == 0 || end <= now {
		return 0
	}
	t.expire(now)
	b := t.buckets[holder]
	if b == nil {
		b = &predictedBucket{holder: holder, blocks: map[uint64]int64{}}
		t.buckets[holder] = b
	}
	recorded := 0
	for _, key := range keys {
		if old, ok := b.blocks[key]; ok {
			if old >= end {
				continue // already predicted as long
			}
		} else if t.stats.entries >= t.maxEntries {
			t.stats.dropped++
			continue
		} else {
			t.stats.entries++
		}
		b.blocks[key] = end
		t.queue = append(t.queue, predictedExpiry{end, b, key})
		recorded++
	}
	t.stats.recorded += uint64(recorded)
	if len(b.blocks) == 0 {
		delete(t.buckets, holder)
	}
	if len(t.queue)-t.head > 2*t.stats.entries+1024 {
		t.compactQueue()
	}
	return recorded
}

// forget drops holder's predictions, counting them as replaced.
func (t *predictedTable) forget(holder Holder) {
	if b := t.buckets[holder]; b != nil {
		t.stats.entries -= len(b.blocks)
		t.stats.replaced += uint64(len(b.blocks))
		delete(t.buckets, holder)
	}
}

// expire drops the entries ended at now from the front of the queue (in order of end
// while every prediction has one TTL), at most predictedExpireBudget elements.
func (t *predictedTable) expire(now int64) {
	for popped := 0; popped < predictedExpireBudget && t.head < len(t.queue) && t.queue[t.head].at <= now; popped++ {
		e := t.queue[t.head]
		t.queue[t.head] = predictedExpiry{}
		t.head++
		if t.buckets[e.bucket.holder] != e.bucket {
			continue // replaced by events, or ended already
		}
		end, ok := e.bucket.blocks[e.key]
		if !ok || end > now {
			continue // renewed: a later element ends it
		}
		delete(e.bucket.blocks, e.key)
		t.stats.entries--
		t.stats.expired++
		if len(e.bucket.blocks) == 0 {
			delete(t.buckets, e.bucket.holder)
		}
	}
	if t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	} else if t.head > 1024 && t.head*2 > len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		clearExpiries(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
}

// compactQueue keeps each entry's element of its current end, in queue order: O(queue),
// amortized over the renewals that made the queue twice the entries.
func (t *predictedTable) compactQueue() {
	kept := t.queue[:0]
	for _, e := range t.queue[t.head:] {
		if t.buckets[e.bucket.holder] != e.bucket {
			continue
		}
		if end, ok := e.bucket.blocks[e.key]; ok && end == e.at {
			kept = append(kept, e)
		}
	}
	clearExpiries(t.queue[len(kept):])
	t.queue, t.head = kept, 0
}

func clearExpiries(s []predictedExpiry) {
	for i := range s {
		s[i] = predictedExpiry{}
	}
}

// prefixes are the predicted prefixes of keys at now (LookupAnswer.Predicted): one per
// holder with blocks > 0, by backend id then rank; only instance's when it is not empty.
func (t *predictedTable) prefixes(keys []uint64, instance string, now int64) []PredictedPrefix {
	if len(keys) == 0 || t.stats.entries == 0 {
		return nil
	}
	var out []PredictedPrefix
	for h, b := range t.buckets {
		if instance != "" && h.BackendID != instance {
			continue
		}
		n := uint32(0)
		for _, key := range keys {
			if end, ok := b.blocks[key]; !ok || end <= now {
				break
			}
			n++
		}
		if n > 0 {
			out = append(out, PredictedPrefix{InstanceID: h.BackendID, DPRank: h.DPRank, Blocks: n})
		}
	}
	less := func(i, j int) bool {
		if out[i].InstanceID != out[j].InstanceID {
			return out[i].InstanceID < out[j].InstanceID
		}
		return out[i].DPRank < out[j].DPRank
	}
	if len(out) > 16 {
		sort.Slice(out, less)
	} else {
		insertionSort(len(out), less, func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}
