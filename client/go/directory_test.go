package kvatlas

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"kvatlas.dev/kvatlas/xxh3"
)

// testGroup and testPlaced describe a placement directory for encodeTestDirectory, which
// writes what the C++ EncodePlacementDirectory writes (docs/scaling.md §Directory encoding).
type testGroup struct {
	id        uint32
	accepting bool
	members   []string
}

type testPlaced struct {
	context Context
	ranges  [][2]uint64 // start, group
}

func encodeTestDirectory(epoch uint64, groups []testGroup, placed []testPlaced) []byte {
	e := &encoder{}
	e.u8(directoryVersion)
	e.varint(epoch)
	e.varint(uint64(len(groups)))
	for _, g := range groups {
		e.varint(uint64(g.id))
		e.flag(g.accepting)
		putStrings(e, g.members)
	}
	e.varint(uint64(len(placed)))
	for _, p := range placed {
		putContext(e, p.context)
		e.varint(uint64(len(p.ranges)))
		for _, r := range p.ranges {
			e.u64(r[0])
			e.varint(r[1])
		}
	}
	return e.b
}

func encodeTestDirectoryAnswer(groups uint32, directory []byte, servers []serverAddress) []byte {
	e := &encoder{}
	e.varint(uint64(groups))
	e.bytes(directory)
	e.varint(uint64(len(servers)))
	for _, s := range servers {
		e.u64(s.id)
		e.str(s.address)
	}
	return e.b
}

// The example of docs/protocol.md §kDirectory, byte for byte; every truncation of it and a
// trailing byte are refused.
func TestDirectoryAnswerDocumentedBytes(t *testing.T) {
	p := unhex(t, "01 04 01 00 00 00 01 01 00 00 00 00 00 00 00 03 68 3a 31")
	a, err := decodeDirectoryAnswer(p)
	if err != nil {
		t.Fatal(err)
	}
	want := directoryAnswer{groups: 1, directory: placementDirectory{placed: map[Context]uint32{}},
		servers: []serverAddress{{id: 1, address: "h:1"}}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("decoded %+v, want %+v", a, want)
	}
	encoded := encodeTestDirectoryAnswer(1, encodeTestDirectory(0, nil, nil), want.servers)
	if hexSpaced(encoded) != hexSpaced(p) {
		t.Errorf("the test encoder writes %s, the document %s", hexSpaced(encoded), hexSpaced(p))
	}
	for n := 0; n < len(p); n++ {
		if _, err := decodeDirectoryAnswer(p[:n]); !errors.Is(err, ErrCorruption) {
			t.Errorf("the first %d bytes: %v, want corruption", n, err)
		}
	}
	if _, err := decodeDirectoryAnswer(append(append([]byte(nil), p...), 0)); !errors.Is(err, ErrCorruption) {
		t.Errorf("a trailing byte: %v, want corruption", err)
	}
}

var (
	adapterContext = Context{Tenant: "acme", Model: "llama", LoRA: "adapter-1", BlockSize: 16, Salt: "user-9"}
	baseContext    = Context{Tenant: "default", Model: "llama", BlockSize: 16}
)

func TestPlacementDirectoryDecodes(t *testing.T) {
	groups := []testGroup{{id: 1, accepting: true}, {id: 2, accepting: true, members: []string{"1", "3"}},
		{id: 5, members: []string{"2"}}}
	placed := []testPlaced{{context: adapterContext, ranges: [][2]uint64{{0, 5}, {1 << 63, 2}}},
		{context: baseContext, ranges: [][2]uint64{{0, 2}}}}
	servers := []serverAddress{{1, "a:1"}, {2, "b:2"}, {3, "c:3"}}
	a, err := decodeDirectoryAnswer(encodeTestDirectoryAnswer(8, encodeTestDirectory(7, groups, placed), servers))
	if err != nil {
		t.Fatal(err)
	}
	want := directoryAnswer{groups: 8, servers: servers, directory: placementDirectory{epoch: 7,
		groups: []groupRecord{{id: 1, accepting: true}, {id: 2, accepting: true, members: []string{"1", "3"}},
			{id: 5, members: []string{"2"}}},
		placed: map[Context]uint32{adapterContext: 5, baseContext: 2}}}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("decoded %+v\nwant %+v", a, want)
	}
	table := newRouteTable(&a)
	if !reflect.DeepEqual(table.members, map[uint32][]string{2: {"a:1", "c:3"}, 5: {"b:2"}}) {
		t.Errorf("members by group: %v", table.members)
	}
}

// Each broken invariant the C++ decoder refuses is refused (ErrCorruption, naming it).
func TestPlacementDirectoryRefusals(t *testing.T) {
	one := []testGroup{{id: 1}}
	two := []testGroup{{id: 1}, {id: 2}}
	ctx := func(model string) Context { return Context{Tenant: "default", Model: model, BlockSize: 16} }
	servers := []serverAddress{{1, "a:1"}}
	cases := []struct {
		name string
		p    []byte
	}{
		{"groups 0", encodeTestDirectoryAnswer(0, encodeTestDirectory(0, nil, nil), nil)},
		{"groups 65536", encodeTestDirectoryAnswer(65536, encodeTestDirectory(0, nil, nil), nil)},
		{"version 2", encodeTestDirectoryAnswer(1, append([]byte{2}, encodeTestDirectory(0, nil, nil)[1:]...), nil)},
		{"directory trailing byte", encodeTestDirectoryAnswer(1, append(encodeTestDirectory(0, nil, nil), 0), nil)},
		{"group id 0", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 0}}, nil), nil)},
		{"group id 65536", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 65536}}, nil), nil)},
		{"groups not ascending", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 2}, {id: 1}}, nil), nil)},
		{"group twice", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 2}, {id: 2}}, nil), nil)},
		{"empty member", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 1, members: []string{""}}}, nil), nil)},
		{"member twice", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 1, members: []string{"1", "1"}}}, nil), nil)},
		{"16 members", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, []testGroup{{id: 1, members: sixteen()}}, nil), nil)},
		{"no ranges", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, one, []testPlaced{{context: ctx("m")}}), nil)},
		{"unknown group", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, one, []testPlaced{{ctx("m"), [][2]uint64{{0, 3}}}}), nil)},
		{"first range not at 0", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, one, []testPlaced{{ctx("m"), [][2]uint64{{5, 1}}}}), nil)},
		{"ranges out of order", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, two, []testPlaced{{ctx("m"), [][2]uint64{{0, 1}, {9, 2}, {9, 1}}}}), nil)},
		{"neighbours on one group", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, two, []testPlaced{{ctx("m"), [][2]uint64{{0, 1}, {9, 1}}}}), nil)},
		{"contexts not ascending", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, one, []testPlaced{
			{ctx("n"), [][2]uint64{{0, 1}}}, {ctx("m"), [][2]uint64{{0, 1}}}}), nil)},
		{"context twice", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, one, []testPlaced{
			{ctx("m"), [][2]uint64{{0, 1}}}, {ctx("m"), [][2]uint64{{0, 1}}}}), nil)},
		{"server id 0", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, nil, nil), []serverAddress{{0, "a:1"}})},
		{"server without address", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, nil, nil), []serverAddress{{1, ""}})},
		{"servers not ascending", encodeTestDirectoryAnswer(1, encodeTestDirectory(0, nil, nil), []serverAddress{{2, "b:2"}, {1, "a:1"}})},
		{"answer trailing byte", append(encodeTestDirectoryAnswer(1, encodeTestDirectory(0, nil, nil), servers), 0)},
	}
	for _, c := range cases {
		_, err := decodeDirectoryAnswer(c.p)
		if !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: %v, want corruption", c.name, err)
		}
		t.Logf("%s: %v", c.name, err)
	}
}

func sixteen() []string {
	var out []string
	for i := 1; i <= 16; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// As the C++ test (tests/unit/common/placement_test.cc): the home group is 1 + XXH3-64 of
// the context's encoding without LoRA and salt, modulo the groups.
func TestHomeGroup(t *testing.T) {
	if homeGroup(baseContext, 0) != 1 || homeGroup(baseContext, 1) != 1 {
		t.Errorf("one group: %d, %d", homeGroup(baseContext, 0), homeGroup(baseContext, 1))
	}
	bytes := []byte("\x07default\x05llama\x00\x10\x00")
	if got, want := homeGroup(baseContext, 1000), uint32(1+xxh3.Hash(bytes)%1000); got != want {
		t.Errorf("home of default/llama/16 of 1,000 groups: %d, want %d", got, want)
	}
	for _, groups := range []uint32{2, 3, 7, 64} {
		home := homeGroup(baseContext, groups)
		if home < 1 || home > groups {
			t.Errorf("home %d of %d groups", home, groups)
		}
		adapter, salted := baseContext, baseContext
		adapter.LoRA, salted.Salt = "adapter-1", "user-9"
		if homeGroup(adapter, groups) != home || homeGroup(salted, groups) != home {
			t.Errorf("%d groups: an adapter or a salt moved the context from its model's home", groups)
		}
	}
	var count [3]int
	for m := 0; m < 3000; m++ {
		count[homeGroup(Context{Tenant: "default", Model: fmt.Sprint("model-", m), BlockSize: 16}, 3)-1]++
	}
	for g, n := range count {
		if n <= 900 || n >= 1100 {
			t.Errorf("group %d is the home of %d of 3,000 models", g+1, n)
		}
	}
}

func TestGroupOfContext(t *testing.T) {
	adapter := Context{Tenant: "default", Model: "llama", LoRA: "adapter-1", BlockSize: 16}
	empty := placementDirectory{}
	if groupOfContext(&empty, adapter, 1) != 1 || groupOfContext(&empty, adapter, 8) != homeGroup(adapter, 8) {
		t.Errorf("an empty directory: not the home group")
	}
	elsewhere := homeGroup(adapter, 8)%8 + 1
	dir := placementDirectory{groups: []groupRecord{{id: elsewhere, accepting: true}},
		placed: map[Context]uint32{adapter: elsewhere}}
	if g := groupOfContext(&dir, adapter, 8); g != elsewhere {
		t.Errorf("a placed context: group %d, want %d", g, elsewhere)
	}
	if g := groupOfContext(&dir, baseContext, 8); g != homeGroup(baseContext, 8) {
		t.Errorf("a context not placed: group %d, want its home", g)
	}
	// A placement past the cluster's groups is not followed; one group is group 1.
	if g := groupOfContext(&dir, adapter, elsewhere-1); elsewhere > 1 && g != homeGroup(adapter, elsewhere-1) {
		t.Errorf("a placement past the groups: %d", g)
	}
	if groupOfContext(&dir, adapter, 1) != 1 {
		t.Errorf("one group: not group 1")
	}
}

// As FeedFilter::GroupContext (tests/unit/common/placement_test.cc).
func TestWatchGroupContext(t *testing.T) {
	if _, ok := (&FeedFilter{}).groupContext(); ok {
		t.Error("an empty filter names a context")
	}
	model := "llama"
	f := FeedFilter{Model: &model}
	if _, ok := f.groupContext(); ok {
		t.Error("a filter without a block size names a context")
	}
	bs := uint32(16)
	f.BlockSize = &bs
	if c, ok := f.groupContext(); !ok || c != baseContext {
		t.Errorf("model and block size: %+v, %v", c, ok)
	}
	f = ContextFilter(adapterContext)
	if c, ok := f.groupContext(); !ok || c != adapterContext {
		t.Errorf("a whole context: %+v, %v", c, ok)
	}
	f.Salt = nil // every salt of the adapter: its model's group
	if c, ok := f.groupContext(); !ok || c != (Context{Tenant: "acme", Model: "llama", BlockSize: 16}) {
		t.Errorf("LoRA without a salt: %+v, %v", c, ok)
	}
}
