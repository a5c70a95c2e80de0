package kvatlas

import "sort"

// localTable holds the copies of one replicated context as the change feed describes them,
// and answers the server's prefix lookup over them (the server's Index::Lookup and the C++
// LocalTable, common/internal/prefix_match.h).
//
// Layout: a copy is (holder, tier) packed into 32 bits (tier in the top 2 bits, the
// holder's interned id below); most blocks have one copy, kept in `first` (12 bytes an
// entry in the map); the further copies of the few blocks that have several are in `more`.
// Not safe for concurrent use: LocalIndex guards it.
type localTable struct {
	first     map[uint64]uint32
	more      map[uint64][]uint32
	locations map[uint64][]localLocation // SHARED-tier descriptors of the few that have one
	copies    uint64
}

type localLocation struct {
	packed   uint32
	location string
}

func newLocalTable(sizeHint int) *localTable {
	return &localTable{first: make(map[uint64]uint32, sizeHint), more: map[uint64][]uint32{},
		locations: map[uint64][]localLocation{}}
}

func packCopy(holder uint32, tier Tier) uint32 { return uint32(tier)<<30 | holder }
func holderOf(packed uint32) uint32            { return packed & (1<<30 - 1) }
func tierOf(packed uint32) Tier                { return Tier(packed >> 30) }

// add records the copy; a copy already present keeps its location unless one is given.
func (t *localTable) add(key uint64, packed uint32, location string) {
	if f, ok := t.first[key]; !ok {
		t.first[key] = packed
		t.copies++
	} else if f != packed {
		present := false
		for _, c := range t.more[key] {
			present = present || c == packed
		}
		if !present {
			t.more[key] = append(t.more[key], packed)
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
	f, ok := t.first[key]
	if !ok {
		return
	}
	more := t.more[key]
	if f == packed {
		if len(more) == 0 {
			delete(t.first, key)
		} else { // the first further copy moves inline
			t.first[key] = more[0]
			t.setMore(key, more[1:])
		}
	} else {
		i := 0
		for i < len(more) && more[i] != packed {
			i++
		}
		if i == len(more) {
			return
		}
		t.setMore(key, append(more[:i:i], more[i+1:]...))
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
}

func (t *localTable) setMore(key uint64, more []uint32) {
	if len(more) == 0 {
		delete(t.more, key)
	} else {
		t.more[key] = more
	}
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
	for depth := 0; depth < n; depth++ {
		key := keys[depth]
		f, ok := t.first[key]
		if !ok {
			break
		}
		copies := append(copiesBuf[:0], f)
		if more, ok := t.more[key]; ok {
			copies = append(copies, more...)
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
	sort.Slice(local, func(i, j int) bool {
		hi, hj := holders[local[i].holder], holders[local[j].holder]
		if hi.BackendID != hj.BackendID {
			return hi.BackendID < hj.BackendID
		}
		return hi.DPRank < hj.DPRank
	})
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
	sort.SliceStable(a.Instances, func(i, j int) bool { return a.Instances[i].Blocks.Disk > a.Instances[j].Blocks.Disk })
	sort.Slice(a.Shared, func(i, j int) bool {
		x, y := a.Shared[i], a.Shared[j]
		if x.Blocks != y.Blocks {
			return x.Blocks > y.Blocks
		}
		if x.BackendID != y.BackendID {
			return x.BackendID < y.BackendID
		}
		return x.DPRank < y.DPRank
	})
	return a
}

func maxU32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}
