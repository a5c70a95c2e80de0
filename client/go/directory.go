package kvatlas

import (
	"fmt"

	"kvatlas.dev/kvatlas/xxh3"
)

// The kDirectory answer (docs/protocol.md §kDirectory) and the placement directory it
// carries (docs/scaling.md §Directory encoding), decoded as strictly as the C++ decoders
// (common/src/protocol_directory.cc, common/src/placement_codec.cc): truncated or trailing
// bytes, values out of range and broken invariants are ErrCorruption.

const (
	directoryVersion     = 1
	maxGroupID           = 65535
	maxGroupMembers      = 15
	maxRangesPerContext  = 1024
	maxDirectoryServers  = 4096
	minGroupBytes        = 3 // id, accepting, member count
	minPlacedContextSize = 7
	minRangeBytes        = 9 // fixed64 start, varint group
	minServerBytes       = 9 // fixed64 id, address length
)

// directoryAnswer is what a client routes by: the cluster's group count, the placement
// directory and the servers' binary-protocol addresses.
type directoryAnswer struct {
	groups    uint32 // 1..maxGroupID; 1 = a single-group cluster
	directory placementDirectory
	servers   []serverAddress // ascending id
}

type serverAddress struct {
	id      uint64 // non-zero
	address string // "host:port" of its binary protocol
}

// placementDirectory is the part of the directory a client needs: the groups' records and
// the group each placed context starts in.
type placementDirectory struct {
	epoch  uint64
	groups []groupRecord // ascending id
	// Each placed context's group: the group of its first key range (a split context's
	// other ranges are not routed by this client).
	placed map[Context]uint32
}

// groupRecord is a group's descriptor. No members: every server holds the group.
type groupRecord struct {
	id        uint32
	accepting bool
	members   []string // server ids as decimal strings
}

func decodeDirectoryAnswer(p []byte) (directoryAnswer, error) {
	d := &decoder{b: p}
	var a directoryAnswer
	a.groups = d.varint32("groups")
	if d.err == nil && (a.groups == 0 || a.groups > maxGroupID) {
		d.fail("groups", fmt.Sprintf("%d is not in 1..%d", a.groups, maxGroupID))
	}
	inner := d.str("directory")
	if d.err == nil {
		dir, err := decodePlacementDirectory([]byte(inner))
		if err != nil {
			return directoryAnswer{}, err
		}
		a.directory = dir
	}
	n := d.count("servers", minServerBytes)
	if d.err == nil && n > maxDirectoryServers {
		d.fail("servers", fmt.Sprintf("%d servers (at most %d)", n, maxDirectoryServers))
	}
	for i := 0; i < n && d.err == nil; i++ {
		s := serverAddress{id: d.u64("servers.id"), address: d.str("servers.rpc_address")}
		switch {
		case d.err != nil:
		case s.id == 0 || s.address == "":
			d.fail("servers.id", "a server needs a non-zero id and an address")
		case len(a.servers) > 0 && a.servers[len(a.servers)-1].id >= s.id:
			d.fail("servers.id", "servers must be ascending by id, each once")
		default:
			a.servers = append(a.servers, s)
		}
	}
	return a, d.finish()
}

func decodePlacementDirectory(p []byte) (placementDirectory, error) {
	d := &decoder{b: p}
	if v := d.u8("directory.version"); d.err == nil && v != directoryVersion {
		d.fail("directory.version", fmt.Sprintf("%d is not a known version (%d)", v, directoryVersion))
	}
	dir := placementDirectory{epoch: d.varint("directory.epoch"), placed: map[Context]uint32{}}
	n := d.count("directory.groups", minGroupBytes)
	for i := 0; i < n && d.err == nil; i++ {
		g := readGroupRecord(d)
		if d.err == nil && len(dir.groups) > 0 && g.id <= dir.groups[len(dir.groups)-1].id {
			d.fail("directory.groups.id", "group ids are not ascending")
		}
		dir.groups = append(dir.groups, g)
	}
	n = d.count("directory.contexts", minPlacedContextSize)
	var last *Context
	for i := 0; i < n && d.err == nil; i++ {
		c := readContext(d)
		group := readPlacement(d, &dir, c)
		if d.err == nil && last != nil && !contextLess(*last, c) {
			d.fail("directory.contexts", "contexts are not ascending")
		}
		last = &c
		dir.placed[c] = group
	}
	if d.err == nil && d.off != len(d.b) {
		d.fail("directory", fmt.Sprintf("%d trailing bytes", len(d.b)-d.off))
	}
	if d.err != nil {
		return placementDirectory{}, d.err
	}
	return dir, nil
}

func readGroupRecord(d *decoder) groupRecord {
	g := groupRecord{id: d.varint32("directory.groups.id"), accepting: d.flag("directory.groups.accepting")}
	n := d.count("directory.groups.members", 1)
	if d.err == nil && n > maxGroupMembers {
		d.fail("directory.groups.members", fmt.Sprintf("%d members (at most %d)", n, maxGroupMembers))
	}
	seen := map[string]bool{}
	for i := 0; i < n && d.err == nil; i++ {
		m := d.str("directory.groups.members")
		if d.err == nil && (m == "" || seen[m]) {
			d.fail("directory.groups.members", fmt.Sprintf("member %q is empty or named twice", m))
		}
		seen[m] = true
		g.members = append(g.members, m)
	}
	if d.err == nil && (g.id == 0 || g.id > maxGroupID) {
		d.fail("directory.groups.id", fmt.Sprintf("%d is not in 1..%d", g.id, maxGroupID))
	}
	return g
}

// readPlacement reads a context's key ranges, checks them against the directory's groups
// and returns the first range's group.
func readPlacement(d *decoder, dir *placementDirectory, c Context) uint32 {
	n := d.count("directory.ranges", minRangeBytes)
	if d.err == nil && (n == 0 || n > maxRangesPerContext) {
		d.fail("directory.ranges", fmt.Sprintf("context %s/%d has %d ranges (1..%d)", c.Model, c.BlockSize, n, maxRangesPerContext))
	}
	var first, prevGroup uint32
	var prevStart uint64
	for i := 0; i < n && d.err == nil; i++ {
		start, group := d.u64("directory.ranges.start"), d.varint32("directory.ranges.group")
		switch {
		case d.err != nil:
		case !dir.hasGroup(group):
			d.fail("directory.ranges.group", fmt.Sprintf("context %s/%d is placed on unknown group %d", c.Model, c.BlockSize, group))
		case i == 0 && start != 0, i > 0 && start <= prevStart:
			d.fail("directory.ranges.start", fmt.Sprintf("context %s/%d has ranges out of order", c.Model, c.BlockSize))
		case i > 0 && group == prevGroup:
			d.fail("directory.ranges.group", fmt.Sprintf("context %s/%d has neighbour ranges on one group", c.Model, c.BlockSize))
		}
		if i == 0 {
			first = group
		}
		prevStart, prevGroup = start, group
	}
	return first
}

func (dir *placementDirectory) hasGroup(id uint32) bool {
	for _, g := range dir.groups {
		if g.id == id {
			return true
		}
	}
	return false
}

// contextLess is the directory's order of contexts (tenant, model, LoRA, block size, salt),
// bytewise as the C++ std::string comparison.
func contextLess(a, b Context) bool {
	switch {
	case a.Tenant != b.Tenant:
		return a.Tenant < b.Tenant
	case a.Model != b.Model:
		return a.Model < b.Model
	case a.LoRA != b.LoRA:
		return a.LoRA < b.LoRA
	case a.BlockSize != b.BlockSize:
		return a.BlockSize < b.BlockSize
	}
	return a.Salt < b.Salt
}

// homeGroup is the group of a context the directory does not place (HomeGroup,
// common/src/placement_codec.cc): 1 + XXH3-64 (seed 0) of its wire encoding with the LoRA
// and the salt left empty, modulo groups, so that a model's adapters and salts share its
// group. The tenant is taken as given: callers pass it as the server sees it ("default"
// for an empty one in requests).
func homeGroup(c Context, groups uint32) uint32 {
	if groups <= 1 {
		return 1
	}
	e := &encoder{b: make([]byte, 0, 16+len(c.Tenant)+len(c.Model))}
	putContext(e, Context{Tenant: c.Tenant, Model: c.Model, BlockSize: c.BlockSize})
	return uint32(1 + xxh3.Hash(e.b)%uint64(groups))
}

// groupOfContext is the group holding c (GroupOfContext): the directory's placement of it
// while that names one of the cluster's groups, else its home group.
func groupOfContext(dir *placementDirectory, c Context, groups uint32) uint32 {
	if groups <= 1 {
		return 1
	}
	if g, ok := dir.placed[c]; ok && g <= groups {
		return g
	}
	return homeGroup(c, groups)
}
