package kvatlas

// Routing by the directory against scripted servers written here: which server answers
// which call, a wrong_group answer that refreshes the table, members that cannot be
// reached. Against real servers: replicas_server_test.go.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedServer accepts any number of connections and answers each request in order:
// pings itself, the rest with answer (swappable). It counts the requests by type.
type scriptedServer struct {
	tag uint64 // the revision its answers carry, naming the server that answered
	l   net.Listener

	mu     sync.Mutex
	answer func(s *scriptedServer, req frame) (status uint16, payload []byte)
	calls  map[uint8]int
	conns  []net.Conn
}

func startScripted(t *testing.T, tag uint64, answer func(*scriptedServer, frame) (uint16, []byte)) *scriptedServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptedServer{tag: tag, l: l, answer: answer, calls: map[uint8]int{}}
	t.Cleanup(s.stop)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, nc)
			s.mu.Unlock()
			go s.serve(nc)
		}
	}()
	return s
}

func (s *scriptedServer) addr() string { return s.l.Addr().String() }

func (s *scriptedServer) serve(nc net.Conn) {
	br := bufio.NewReader(nc)
	var hdr [headerBytes]byte
	for {
		req, err := readFrame(br, &hdr)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.calls[req.typ]++
		answer := s.answer
		s.mu.Unlock()
		status, payload := uint16(0), []byte(nil)
		if req.typ != typePing {
			status, payload = answer(s, req)
		}
		b := appendFrame(nil, req.typ, req.id, payload)
		b[6] = flagResponse
		b[8], b[9] = byte(status), byte(status>>8)
		if _, err := nc.Write(b); err != nil {
			return
		}
	}
}

// stop closes the listener and every connection (the server is gone).
func (s *scriptedServer) stop() {
	s.l.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		nc.Close()
	}
}

func (s *scriptedServer) count(typ uint8) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[typ]
}

func (s *scriptedServer) setAnswer(answer func(*scriptedServer, frame) (uint16, []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = answer
}

// answerReads answers the reads a router routes, each with the server's tag as revision:
// a lookup (nothing found), a locate (no copies), a snapshot (one empty part) and a watch
// (started at the tag; its cancel ends it). Anything else is answered invalid_argument,
// as a server answers a type it does not know.
func answerReads(s *scriptedServer, req frame) (uint16, []byte) {
	e := &encoder{}
	switch req.typ {
	case typeLookup:
		e.u64(s.tag)
		putContext(e, readContext(&decoder{b: req.payload}))
		e.varint(0)
		e.varint(0)
		e.varint(0)
		e.varint(0)
	case typeLocate:
		e.u64(s.tag)
		e.varint(0)
	case typeSnapshot:
		e.u8(1)
		e.u64(s.tag)
		e.varint(0)
		putContext(e, readContext(&decoder{b: req.payload}))
		e.varint(0)
	case typeWatch:
		e.u8(req.payload[0]) // 0: started (more to come); 1: the cancel's final frame
		e.u64(s.tag)
		if req.payload[0] == 0 {
			e.varint(0)
		}
	default:
		return uint16(CodeInvalidArgument), []byte(fmt.Sprintf("unknown message type %d", req.typ))
	}
	return 0, e.b
}

// endpointAnswering answers kDirectory with directory() and reads as answerReads does.
func endpointAnswering(directory func() []byte) func(*scriptedServer, frame) (uint16, []byte) {
	return func(s *scriptedServer, req frame) (uint16, []byte) {
		if req.typ == typeDirectory {
			return 0, directory()
		}
		return answerReads(s, req)
	}
}

// refusing answers every read of the router wrong_group (after calling refused).
func refusing(refused func()) func(*scriptedServer, frame) (uint16, []byte) {
	return func(s *scriptedServer, req frame) (uint16, []byte) {
		refused()
		return uint16(CodeWrongGroup), []byte("this server holds no replica of the group")
	}
}

const routedGroups = 4

// modelIn is a model whose base context (block size 16) has group g of routedGroups as
// its home.
func modelIn(t *testing.T, g uint32) Context {
	t.Helper()
	for m := 0; m < 1000; m++ {
		c := Context{Tenant: "default", Model: fmt.Sprint("model-", m), BlockSize: 16}
		if homeGroup(c, routedGroups) == g {
			return c
		}
	}
	t.Fatalf("no model's home is group %d", g)
	return Context{}
}

// routedDirectory is the kDirectory answer of routedGroups groups where group 1 is on
// every server and group g on the servers membersOf[g] names, with servers (ids 1, 2, ...)
// at addrs, and placed contexts.
func routedDirectory(addrs []string, membersOf map[uint32][]string, placed []testPlaced) []byte {
	var groups []testGroup
	for g := uint32(1); g <= routedGroups; g++ {
		groups = append(groups, testGroup{id: g, accepting: true, members: membersOf[g]})
	}
	var servers []serverAddress
	for i, a := range addrs {
		servers = append(servers, serverAddress{id: uint64(i + 1), address: a})
	}
	return encodeTestDirectoryAnswer(routedGroups, encodeTestDirectory(1, groups, placed), servers)
}

func lookupTag(t *testing.T, c *Client, of Context) uint64 {
	t.Helper()
	a, err := c.Lookup(testCtx(t), LookupRequest{Context: of, Hashes: []uint64{1}})
	if err != nil {
		t.Fatalf("Lookup of %s: %v", of.Model, err)
	}
	return a.Revision
}

// A context of a group with members is answered by a member (its lookups, routes'
// lookups, locates, snapshots and watches), picked from the group's by the context; a
// context of a group every server holds, a locate in every context, a linearizable
// lookup and anything else by the endpoint. With routing off, everything by the endpoint.
func TestRoutesReadsToTheGroupsMembers(t *testing.T) {
	one := startScripted(t, 1, answerReads)
	two := startScripted(t, 2, answerReads)
	var endpoint *scriptedServer
	inThree, inTwo, inFour := modelIn(t, 3), modelIn(t, 2), modelIn(t, 4)
	// Placed by the directory on group 3, away from its home.
	placed := Context{Tenant: "default", Model: modelIn(t, 4).Model, LoRA: "a", BlockSize: 16}
	endpoint = startScripted(t, 100, endpointAnswering(func() []byte {
		return routedDirectory([]string{endpoint.addr(), one.addr(), two.addr()},
			map[uint32][]string{2: {"2", "3"}, 3: {"2"}},
			[]testPlaced{{context: placed, ranges: [][2]uint64{{0, 3}}}})
	}))
	c := dialT(t, Options{Endpoints: []string{endpoint.addr()}})
	ctx := testCtx(t)

	if tag := lookupTag(t, c, inThree); tag != 1 {
		t.Errorf("a lookup of group 3 (member: server 2) was answered by %d", tag)
	}
	noTenant := inThree
	noTenant.Tenant = "" // the server reads it as "default"
	if tag := lookupTag(t, c, noTenant); tag != 1 {
		t.Errorf("a lookup of group 3 without a tenant was answered by %d", tag)
	}
	if tag := lookupTag(t, c, placed); tag != 1 {
		t.Errorf("a lookup of a context placed on group 3 was answered by %d", tag)
	}
	if tag := lookupTag(t, c, inFour); tag != 100 {
		t.Errorf("a lookup of group 4 (every server) was answered by %d", tag)
	}
	// Group 2's contexts spread over its two members.
	answered := map[uint64]int{}
	for i := 0; i < 40; i++ {
		of := inTwo
		of.Salt = fmt.Sprint("salt-", i) // the same group, another context
		answered[lookupTag(t, c, of)]++
	}
	if answered[1] == 0 || answered[2] == 0 || answered[1]+answered[2] != 40 {
		t.Errorf("group 2's contexts were answered by %v; want both members, only them", answered)
	}

	if a, err := c.Locate(ctx, 7, &inThree); err != nil || a.Revision != 1 {
		t.Errorf("Locate in a context of group 3: %+v, %v", a, err)
	}
	if a, err := c.Locate(ctx, 7, nil); err != nil || a.Revision != 100 {
		t.Errorf("Locate in every context: %+v, %v", a, err)
	}
	if s, err := c.Snapshot(ctx, inThree); err != nil || s.Revision != 1 {
		t.Errorf("Snapshot of group 3: %+v, %v", s, err)
	}
	if w, err := c.Watch(ctx, WatchOptions{Filter: ContextFilter(inThree)}); err != nil {
		t.Errorf("Watch of group 3: %v", err)
	} else {
		if w.ResumeFrom() != 1 {
			t.Errorf("a watch of group 3 was started by %d", w.ResumeFrom())
		}
		w.Close()
	}
	linearizableBefore := endpoint.count(typeLookup)
	_, err := c.Lookup(ctx, LookupRequest{Context: inThree, Hashes: []uint64{1}, Linearizable: true})
	if err != nil || endpoint.count(typeLookup) != linearizableBefore+1 {
		t.Errorf("a linearizable lookup: %v; the endpoint got %d lookups, had %d",
			err, endpoint.count(typeLookup), linearizableBefore)
	}

	plain := dialT(t, Options{Endpoints: []string{endpoint.addr()}, DisableDirectoryRouting: true})
	if tag := lookupTag(t, plain, inThree); tag != 100 {
		t.Errorf("with routing off, a lookup of group 3 was answered by %d", tag)
	}
	if n := endpoint.count(typeDirectory); n != 1 {
		t.Errorf("the endpoint answered kDirectory %d times; want once (Dial of the routing client)", n)
	}
}

// A member that refuses a lookup wrong_group (the group moved) makes the client fetch the
// table again and send the lookup, once, to the member it names now. A snapshot refused
// so fails, and the next one, by the new table, is answered.
func TestWrongGroupRefreshesTheTable(t *testing.T) {
	var moved atomic.Bool
	old := startScripted(t, 1, refusing(func() { moved.Store(true) }))
	now := startScripted(t, 2, answerReads)
	var endpoint *scriptedServer
	inThree := modelIn(t, 3)
	endpoint = startScripted(t, 100, endpointAnswering(func() []byte {
		member := "2"
		if moved.Load() {
			member = "3"
		}
		return routedDirectory([]string{endpoint.addr(), old.addr(), now.addr()},
			map[uint32][]string{3: {member}}, nil)
	}))
	c := dialT(t, Options{Endpoints: []string{endpoint.addr()}})

	if tag := lookupTag(t, c, inThree); tag != 2 {
		t.Errorf("the lookup refused by the old member was answered by %d, want the new member", tag)
	}
	if old.count(typeLookup) != 1 || endpoint.count(typeDirectory) < 2 {
		t.Errorf("the old member got %d lookups (want 1); the endpoint %d kDirectory (want 2 or more)",
			old.count(typeLookup), endpoint.count(typeDirectory))
	}

	// Back to the old member, which refuses again: the snapshot fails wrong_group.
	moved.Store(false)
	if !c.router.awaitRefresh(testCtx(t)) {
		t.Fatal("no refresh")
	}
	_, err := c.Snapshot(testCtx(t), inThree)
	if !errors.Is(err, ErrWrongGroup) {
		t.Fatalf("a snapshot refused by the member: %v, want wrong_group", err)
	}
	// The refusal asked for a refresh (the server moved it on): the next snapshot goes by
	// the new table, without the caller doing anything but retrying.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.Snapshot(testCtx(t), inThree)
		if err == nil && s.Revision == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the refusal, the snapshot still fails: %+v, %v", s, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A member that cannot be reached (nothing listens at its address, or it went away after
// the client connected) leaves its group's reads on the endpoint.
func TestUnreachableMemberFallsBackToTheEndpoint(t *testing.T) {
	gone := startScripted(t, 1, answerReads)
	goneAddr := gone.addr()
	gone.stop()
	later := startScripted(t, 2, answerReads)
	var endpoint *scriptedServer
	inTwo, inThree := modelIn(t, 2), modelIn(t, 3)
	endpoint = startScripted(t, 100, endpointAnswering(func() []byte {
		return routedDirectory([]string{endpoint.addr(), goneAddr, later.addr()},
			map[uint32][]string{2: {"2"}, 3: {"3"}}, nil)
	}))
	c := dialT(t, Options{Endpoints: []string{endpoint.addr()}})

	if tag := lookupTag(t, c, inTwo); tag != 100 {
		t.Errorf("a lookup of a group whose member is unreachable was answered by %d", tag)
	}
	if tag := lookupTag(t, c, inThree); tag != 2 {
		t.Errorf("a lookup of a group whose member is up was answered by %d", tag)
	}
	later.stop()
	for deadline := time.Now().Add(10 * time.Second); c.hasOpen(later.addr()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the member's connection closed")
		}
	}
	if tag := lookupTag(t, c, inThree); tag != 100 {
		t.Errorf("a lookup of a group whose member went away was answered by %d", tag)
	}
}

// A server that does not know kDirectory (invalid_argument) routes nothing, and Dial
// works as before.
func TestOlderServerRoutesNothing(t *testing.T) {
	endpoint := startScripted(t, 100, answerReads) // kDirectory: invalid_argument
	c := dialT(t, Options{Endpoints: []string{endpoint.addr()}})
	if tag := lookupTag(t, c, modelIn(t, 3)); tag != 100 {
		t.Errorf("a lookup through an older server was answered by %d", tag)
	}
	if c.router.table.Load() != nil {
		t.Error("a table without an answer")
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}
