package kvatlas

import (
	"math/rand"
	"testing"
)

// The table against a plain model through random stores and removals, past the holes that
// make it compact its records: every block has exactly the model's copies, each key's
// record is found through the map, and a lookup of a chain stored in one piece walks it.
func TestLocalTableKeepsTheModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	table := newLocalTable(0)
	model := map[uint64]map[uint32]bool{}
	for round := 0; round < 40000; round++ {
		key := uint64(rng.Intn(3000)) + 1
		packed := packCopy(uint32(rng.Intn(4)), Tier(rng.Intn(4)))
		if rng.Intn(3) == 0 {
			table.add(key, packed, "")
			if model[key] == nil {
				model[key] = map[uint32]bool{}
			}
			model[key][packed] = true
		} else {
			table.remove(key, packed)
			delete(model[key], packed)
			if len(model[key]) == 0 {
				delete(model, key)
			}
		}
	}
	compacted := false
	for key := uint64(1); key <= 3000; key++ { // remove every copy of most blocks: holes
		if key%4 != 0 {
			for packed := range model[key] {
				table.remove(key, packed)
			}
			delete(model, key)
		}
		compacted = compacted || table.holes == 0
	}
	if !compacted {
		t.Errorf("the records were never compacted (%d holes)", table.holes)
	}
	var copies uint64
	for key, want := range model {
		id, ok := table.index[key]
		if !ok || table.blocks[id].key != key {
			t.Fatalf("block %d: record %d, %v", key, id, ok)
		}
		got := map[uint32]bool{table.blocks[id].first: true}
		for c := table.blocks[id].more; c != noCopy; c = table.pool[c].next {
			got[table.pool[c].packed] = true
		}
		if len(got) != len(want) {
			t.Fatalf("block %d: copies %v, want %v", key, got, want)
		}
		for p := range want {
			if !got[p] {
				t.Fatalf("block %d: copies %v, want %v", key, got, want)
			}
		}
		copies += uint64(len(want))
	}
	if uint64(len(table.index)) != uint64(len(model)) || table.copies != copies {
		t.Errorf("%d blocks and %d copies, want %d and %d", len(table.index), table.copies, len(model), copies)
	}
	chain := []uint64{1 << 40, 1<<40 + 1, 1<<40 + 2}
	for _, k := range chain {
		table.add(k, packCopy(0, TierGPU), "")
	}
	a := table.lookup(chain, "", false, 8192, []Holder{{BackendID: "h"}}, 1, testContext)
	if a.BlocksFound != 3 || len(a.Instances) != 1 || a.Instances[0].Blocks.GPU != 3 {
		t.Errorf("a chain stored in one piece: %+v", a)
	}
}
