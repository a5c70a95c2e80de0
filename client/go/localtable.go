package kvatlas

// localTable holds the copies of one replicated context as the change feed describes them,
// and answers the server's prefix lookup over them (the server's Index::Lookup and the C++
// LocalTable, common/internal/prefix_match.h).
//
// Layout (the C++ LocalTable's): one 16-byte record per block (key, first copy, head of a
// chain of further copies in a pool of 8-byte copies), numbered in the order blocks were
// created, and a map from key to record. A copy is (holder, tier) packed into 32 bits
// (tier in the top 2 bits, the holder's interned id below 2^29). A lookup looks for each
// block first in the record after its parent's, so a chain stored by one feed record is
// read as consecutive records rather than a random map probe per block. Records of
// removed blocks are holes until holes outnumber half the live blocks, then the records
// are compacted (renumbered in order). Not safe for concurrent use: LocalIndex guards it.
type localTable struct {
	blocks    []localBlock
	index     map[uint64]uint32 // key -> record
	pool      []localCopy
	freeCopy  uint32 // head of the pool's free list
	holes     int
	copies    uint64
	locations map[uint64][]localLocation // SHARED-tier descriptors of the few that have one
}

type localBlock struct {
	key   uint64
	first uint32 // packed copy; noCopy marks a hole
	more  uint32 // first further copy in the pool, or noCopy
}

type localCopy struct {
	packed uint32
	next   uint32 // next further copy of the same block; also the free list's link
}

type localLocation struct {
	packed   uint32
	location string
}

const (
	noCopy = ^uint32(0)
	// Holes below which the records are never compacted.
	minHolesToCompact = 1024
)

func newLocalTable(sizeHint int) *localTable {
	return &localTable{index: make(map[uint64]uint32, sizeHint), freeCopy: noCopy,
		locations: map[uint64][]localLocation{}}
}

func packCopy(holder uint32, tier Tier) uint32 { return uint32(tier)<<30 | holder }
func holderOf(packed uint32) uint32            { return packed & (1<<30 - 1) }
func tierOf(packed uint32) Tier                { return Tier(packed >> 30) }

func (t *localTable) blockCount() uint64 { return uint64(len(t.index)) }

// memoryBytes is what the records, the pool and the map hold (a map entry as 20 bytes:
// its key, value and share of Go's buckets), and the locations.
func (t *localTable) memoryBytes() uint64 {
	n := uint64(cap(t.blocks))*16 + uint64(cap(t.pool))*8 + uint64(len(t.index))*20
	for _, list := range t.locations {
		n += 48
		for _, l := range list {
			n += 24 + uint64(len(l.location))
		}
	}
	return n
}

func (t *localTable) newCopy(packed, next uint32) uint32 {
	c := t.freeCopy
	if c != noCopy {
		t.freeCopy = t.pool[c].next
		t.pool[c] = localCopy{packed, next}
		return c
	}
	t.pool = append(t.pool, localCopy{packed, next})
	return uint32(len(t.pool) - 1)
}

func (t *localTable) freeCopyAt(c uint32) {
	t.pool[c] = localCopy{noCopy, t.freeCopy}
	t.freeCopy = c
}

// add records the copy; a copy already present keeps its location unless one is given.
func (t *localTable) add(key uint64, packed uint32, location string) {
	if id, ok := t.index[key]; !ok {
		t.index[key] = uint32(len(t.blocks))
		t.blocks = append(t.blocks, localBlock{key: key, first: packed, more: noCopy})
		t.copies++
	} else {
		b := &t.blocks[id]
		present := b.first == packed
		for c := b.more; c != noCopy && !present; c = t.pool[c].next {
			present = t.pool[c].packed == packed
		}
		if !present {
			b.more = t.newCopy(packed, b.more)
			t.copies++
		}
	}
	if location == "" {
		return
	}
	list := t.locations[key]
	for i := range list {
		if list[i].packed == packed {
			list[i].location = location
			return
		}
	}
	t.locations[key] = append(list, localLocation{packed, location})
}

// remove drops the copy if present.
func (t *localTable) remove(key uint64, packed uint32) {
	id, ok := t.index[key]
	if !ok {
		return
	}
	b := &t.blocks[id]
	if b.first == packed {
		if b.more == noCopy {
			delete(t.index, key)
			b.first = noCopy // a hole until the next compaction
			t.holes++
		} else { // the first further copy moves inline
			c := b.more
			b.first, b.more = t.pool[c].packed, t.pool[c].next
			t.freeCopyAt(c)
		}
	} else {
		link := &b.more
		for *link != noCopy && t.pool[*link].packed != packed {
			link = &t.pool[*link].next
		}
		if *link == noCopy {
			return
		}
		c := *link
		*link = t.pool[c].next
		t.freeCopyAt(c)
	}
	t.copies--
	if list, ok := t.locations[key]; ok {
		kept := list[:0]
		for _, l := range list {
			if l.packed != packed {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(t.locations, key)
		} else {
			t.locations[key] = kept
		}
	}
	if t.holes >= minHolesToCompact && t.holes*2 > len(t.index) {
		t.compact()
	}
}

// compact renumbers the live records in order, dropping the holes.
func (t *localTable) compact() {
	live := make([]localBlock, 0, len(t.index))
	for _, b := range t.blocks {
		if b.first != noCopy {
			t.index[b.key] = uint32(len(live))
			live = append(live, b)
		}
	}
	t.blocks, t.holes = live, 0
}

func (t *localTable) locationOf(key uint64, packed uint32) string {
	for _, l := range t.locations[key] {
		if l.packed == packed {
			return l.location
		}
	}
	return ""
}

// A holder's prefixes during a walk (PrefixWalk::Run): blocks from block 0, cumulative
// per tier (gpu <= cpu <= disk), shared alone, and cpu and disk per medium alone.
type walkRun struct {
	holder                                    uint32
	gpu, cpu, disk, shared, cpuOnly, diskOnly uint32
	mask                                      uint8 // tiers seen at the current depth
}

const (
	gpuMask    = 1 << TierGPU
	cpuMask    = gpuMask | 1<<TierCPU
	diskMask   = cpuMask | 1<<TierDisk
	sharedMask = 1 << TierShared
)

// lookup is the server's prefix lookup over keys (at most maxBlocks of them): it stops
// at the first block nobody holds; a holder first seen below block 0 does not count. The
// walk is over every holder, as the server's lookup service walks it; instance (when not
// empty) only filters the answer's instances. holders maps interned ids to holders.
func (t *localTable) lookup(keys []uint64, instance string, includeLocations bool, maxBlocks uint32,
	holders []Holder, rev uint64, ctx Context) LookupAnswer {
	n := len(keys)
	if uint64(n) > uint64(maxBlocks) {
		n = int(maxBlocks)
	}
	var runsBuf [8]walkRun
	runs := runsBuf[:0]
	var copiesBuf [8]uint32
	found := 0
	next := noCopy // the record after the previous depth's
	for depth := 0; depth < n; depth++ {
		key := keys[depth]
		id := next
		if id >= uint32(len(t.blocks)) || t.blocks[id].key != key || t.blocks[id].first == noCopy {
			var ok bool
			if id, ok = t.index[key]; !ok {
				break
			}
		}
		next = id + 1
		b := &t.blocks[id]
		copies := append(copiesBuf[:0], b.first)
		for c := b.more; c != noCopy; c = t.pool[c].next {
			copies = append(copies, t.pool[c].packed)
		}
		for _, packed := range copies {
			h := holderOf(packed)
			i := 0
			for i < len(runs) && runs[i].holder != h {
				i++
			}
			if i == len(runs) {
				if depth != 0 {
					continue // first seen below block 0: cannot extend a prefix from it
				}
				runs = append(runs, walkRun{holder: h})
			}
			runs[i].mask |= 1 << tierOf(packed)
		}
		d := uint32(depth)
		extended := false
		for i := range runs {
			r := &runs[i]
			if r.gpu == d && r.mask&gpuMask != 0 {
				r.gpu++
			}
			if r.cpu == d && r.mask&cpuMask != 0 {
				r.cpu++
			}
			if r.disk == d && r.mask&diskMask != 0 {
				r.disk++
			}
			if r.shared == d && r.mask&sharedMask != 0 {
				r.shared++
			}
			if r.cpuOnly == d && r.mask&(1<<TierCPU) != 0 {
				r.cpuOnly++
			}
			if r.diskOnly == d && r.mask&(1<<TierDisk) != 0 {
				r.diskOnly++
			}
			r.mask = 0
			extended = extended || r.disk == d+1 || r.shared == d+1
		}
		if !extended {
			break
		}
		found++
	}
	return t.answer(keys[:found], runs, instance, includeLocations, holders, rev, ctx, uint32(n))
}

// answer shapes the walk's runs as the server's BuildLookupAnswer does: holders grouped
// into instances (max over their ranks; GPU/CPU/DISK matches only) ordered by longest
// match then id, shared backends by blocks then backend id and rank.
func (t *localTable) answer(chain []uint64, runs []walkRun, instance string, includeLocations bool,
	holders []Holder, rev uint64, ctx Context, queried uint32) LookupAnswer {
	a := LookupAnswer{Revision: rev, Context: ctx, BlocksQueried: queried, BlocksFound: uint32(len(chain))}
	var local []*walkRun
	for i := range runs {
		r := &runs[i]
		h := holders[r.holder]
		if r.shared > 0 {
			m := SharedMatch{BackendID: h.BackendID, DPRank: h.DPRank, Blocks: r.shared}
			if includeLocations {
				m.Locations = make([]string, r.shared)
				for j := range m.Locations {
					m.Locations[j] = t.locationOf(chain[j], packCopy(r.holder, TierShared))
				}
			}
			a.Shared = append(a.Shared, m)
		}
		if r.disk == 0 || (instance != "" && h.BackendID != instance) {
			continue
		}
		local = append(local, r)
	}
	insertionSort(len(local), func(i, j int) bool {
		hi, hj := holders[local[i].holder], holders[local[j].holder]
		if hi.BackendID != hj.BackendID {
			return hi.BackendID < hj.BackendID
		}
		return hi.DPRank < hj.DPRank
	}, func(i, j int) { local[i], local[j] = local[j], local[i] })
	for i := 0; i < len(local); {
		id := holders[local[i].holder].BackendID
		m := InstanceMatch{InstanceID: id}
		for ; i < len(local) && holders[local[i].holder].BackendID == id; i++ {
			r := local[i]
			b := TierBlocks{GPU: r.gpu, CPU: r.cpu, Disk: r.disk, CPUOnly: r.cpuOnly, DiskOnly: r.diskOnly}
			m.DPRanks = append(m.DPRanks, RankMatch{DPRank: holders[r.holder].DPRank, Blocks: b})
			m.Blocks.GPU = maxU32(m.Blocks.GPU, b.GPU)
			m.Blocks.CPU = maxU32(m.Blocks.CPU, b.CPU)
			m.Blocks.Disk = maxU32(m.Blocks.Disk, b.Disk)
			m.Blocks.CPUOnly = maxU32(m.Blocks.CPUOnly, b.CPUOnly)
			m.Blocks.DiskOnly = maxU32(m.Blocks.DiskOnly, b.DiskOnly)
		}
		a.Instances = append(a.Instances, m)
	}
	if instance != "" && len(a.Instances) == 0 {
		a.Instances = []InstanceMatch{{InstanceID: instance}}
	}
	insertionSort(len(a.Instances), func(i, j int) bool { return a.Instances[i].Blocks.Disk > a.Instances[j].Blocks.Disk },
		func(i, j int) { a.Instances[i], a.Instances[j] = a.Instances[j], a.Instances[i] })
	insertionSort(len(a.Shared), func(i, j int) bool {
		x, y := a.Shared[i], a.Shared[j]
		if x.Blocks != y.Blocks {
			return x.Blocks > y.Blocks
		}
		if x.BackendID != y.BackendID {
			return x.BackendID < y.BackendID
		}
		return x.DPRank < y.DPRank
	}, func(i, j int) { a.Shared[i], a.Shared[j] = a.Shared[j], a.Shared[i] })
	return a
}

// insertionSort sorts n elements stably: a lookup's few holders, without sort.Slice's
// reflection and allocation on the lookup's path.
func insertionSort(n int, less func(i, j int) bool, swap func(i, j int)) {
	for i := 1; i < n; i++ {
		for j := i; j > 0 && less(j, j-1); j-- {
			swap(j, j-1)
		}
	}
}

func maxU32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}
