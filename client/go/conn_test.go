package kvatlas

// Transport tests against a fake server written here, for what a real server does not
// show deterministically: answers out of order, the in-flight bound, deadlines, the
// decoding of error payloads.

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeServer accepts one connection, answers Dial's ping, answers kDirectory as a server
// that predates it (invalid_argument: the client routes nothing) and hands every other
// request frame to handle, which writes answers with reply (from any goroutine).
type fakeServer struct {
	l    net.Listener
	wmu  sync.Mutex
	conn net.Conn
}

func startFake(t *testing.T, handle func(f *fakeServer, req frame)) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{l: l}
	t.Cleanup(func() {
		l.Close()
		fs.wmu.Lock()
		if fs.conn != nil {
			fs.conn.Close()
		}
		fs.wmu.Unlock()
	})
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		fs.wmu.Lock()
		fs.conn = nc
		fs.wmu.Unlock()
		br := bufio.NewReader(nc)
		var hdr [headerBytes]byte
		for first := true; ; first = false {
			f, err := readFrame(br, &hdr)
			if err != nil {
				return
			}
			if first && f.typ == typePing { // Dial's
				fs.reply(typePing, 0, f.id, nil)
				continue
			}
			if f.typ == typeDirectory {
				fs.reply(f.typ, uint16(CodeInvalidArgument), f.id, []byte("unknown message type 14"))
				continue
			}
			handle(fs, f)
		}
	}()
	return fs
}

func (fs *fakeServer) addr() string { return fs.l.Addr().String() }

func (fs *fakeServer) reply(typ uint8, status uint16, id uint64, payload []byte) {
	b := appendFrame(nil, typ, id, payload)
	b[6] = flagResponse
	b[8], b[9] = byte(status), byte(status>>8)
	fs.wmu.Lock()
	defer fs.wmu.Unlock()
	_, _ = fs.conn.Write(b)
}

func statsPayload(doc string) []byte {
	e := &encoder{}
	e.str(doc)
	return e.b
}

// The fake first holds every request unanswered: the client sends MaxInFlight of its 100
// calls and no more (the pause below only gives a client that ignored the bound the time
// to send more; a correct one cannot fail it). Then the fake answers in batches, each
// newest first: every call gets its own answer although they come back out of order.
func TestInFlightBoundAndOutOfOrderAnswers(t *testing.T) {
	const calls, maxInFlight = 100, 8
	var mu sync.Mutex
	var held []frame
	received, released := 0, false
	answer := func(f *fakeServer, batch []frame) {
		for i := len(batch) - 1; i >= 0; i-- {
			r := batch[i]
			// The stats document echoes the request id as its revision.
			f.reply(r.typ, 0, r.id, statsPayload(`{"revision":`+strconv.FormatUint(r.id, 10)+`}`))
		}
	}
	fs := startFake(t, func(f *fakeServer, req frame) {
		mu.Lock()
		held = append(held, req)
		received++
		var batch []frame
		if released && (len(held) == maxInFlight || received >= calls) {
			batch, held = held, nil
		}
		mu.Unlock()
		answer(f, batch)
	})
	// Without the routing table's fetches, which would take request ids too.
	c := dialT(t, Options{Endpoints: []string{fs.addr()}, MaxInFlight: maxInFlight,
		DisableDirectoryRouting: true})
	cn, err := c.endpointConn(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := cn.call(testCtx(t), typeStats, nil)
			if err == nil {
				_, err = decodeStatsAnswer(p)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return received
	}
	for deadline := time.Now().Add(10 * time.Second); count() < maxInFlight; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the fake received %d requests, want %d", count(), maxInFlight)
		}
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if received != maxInFlight {
		t.Errorf("%d requests were sent unanswered; MaxInFlight is %d", received, maxInFlight)
	}
	released = true
	batch := held
	held = nil
	mu.Unlock()
	answer(fs, batch)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Each answer went to its own call: the next call gets the answer to its own id.
	st, err := c.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != calls+2 { // request 1 was Dial's ping
		t.Errorf("the call after %d got the answer of request %d", calls, st.Revision)
	}
}

func TestDeadlineWithoutAnswer(t *testing.T) {
	fs := startFake(t, func(*fakeServer, frame) {}) // never answers
	c := dialT(t, Options{Endpoints: []string{fs.addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Ping(ctx)
	if !errors.Is(err, ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping without an answer: %v, want deadline_exceeded", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := c.Ping(cctx); !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with a cancelled context: %v, want cancelled", err)
	}
}

// The server's reason for closing (an error frame with id 0) is the error of the calls
// the close fails.
func TestConnectionErrorFrame(t *testing.T) {
	fs := startFake(t, func(f *fakeServer, req frame) {
		f.reply(typeError, uint16(CodeUnavailable), 0, []byte("too many connections"))
		f.conn.Close()
	})
	c := dialT(t, Options{Endpoints: []string{fs.addr()}})
	err := c.Ping(testCtx(t))
	if !errors.Is(err, ErrUnavailable) || !contains(err.Error(), "too many connections") {
		t.Errorf("Ping on a connection the server closed: %v", err)
	}
}

func TestErrorPayloadDecoding(t *testing.T) {
	e := decodeErrorPayload(CodeNotLeader, []byte("not the leader; the leader is server 2 (raft 10.0.0.2:7100)\nleader_id=2\nleader_rpc_address=10.0.0.2:7071"))
	if e.LeaderID != 2 || e.LeaderAddress != "10.0.0.2:7071" || !e.leaderHint ||
		e.Message != "not the leader; the leader is server 2 (raft 10.0.0.2:7100)" {
		t.Errorf("not_leader hint: %#v", e)
	}
	e = decodeErrorPayload(CodeNotLeader, []byte("no leader\nleader_id=0"))
	if e.LeaderID != 0 || e.LeaderAddress != "" || !e.leaderHint {
		t.Errorf("not_leader without a leader: %#v", e)
	}
	e = decodeErrorPayload(CodeNotLeader, []byte("old server"))
	if e.leaderHint || e.Message != "old server" {
		t.Errorf("not_leader of an older server: %#v", e)
	}
	e = decodeErrorPayload(CodeWatchCut, []byte("the watcher fell behind\nresume_from=40"))
	if e.ResumeFrom == nil || *e.ResumeFrom != 40 || e.Message != "the watcher fell behind" {
		t.Errorf("watch_cut: %#v", e)
	}
	if CodeFromNumber(250) != CodeInternal || CodeFromNumber(19) != CodePermissionDenied {
		t.Errorf("status numbers: 250 → %v, 19 → %v", CodeFromNumber(250), CodeFromNumber(19))
	}
	for n, name := range codeNames {
		if Code(n).String() != name {
			t.Errorf("code %d: %s", n, Code(n))
		}
	}
	var err error = &Error{Code: CodeNotFound, Message: "x"}
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) || err.Error() != "kvatlas: not_found: x" {
		t.Errorf("errors.Is / Error(): %v", err)
	}
}

// Frames as docs/protocol.md shows them, byte for byte.
func TestDocumentedBytes(t *testing.T) {
	b := appendFrame(nil, typeLookup, 0x0102030405060708, []byte("abc"))
	b[6] = flagResponse
	b[8] = 2
	want := "1300000001020100020000000807060504030201616263"
	if got := hexSpaced(b); got != want {
		t.Errorf("frame: %s, want %s", got, want)
	}
	w := &WriterPosition{ID: "w-1", Sequence: 300}
	p := encodeIngest(nil, w)
	if got := hexSpaced(p[1:]); got != "0103772d31ac02" { // after the event count 0
		t.Errorf("writer trailer: %s", got)
	}
	lk := encodeLookup(&LookupRequest{Context: Context{Tenant: "default", Model: "m", BlockSize: 2},
		Tokens: []uint32{1, 300}, Instance: "i", IncludeLocations: true, Linearizable: true, MinRevision: 300})
	if got := hexSpaced(lk); got != "0764656661756c74016d000200000201ac0201690103ac02" {
		t.Errorf("lookup: %s", got)
	}
}

func hexSpaced(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, x := range b {
		out = append(out, digits[x>>4], digits[x&15])
	}
	return string(out)
}

// An answer that arrived before its connection ended is the call's answer, not the lost
// connection: a server refusing a token answers with an error and closes, and the reader
// delivers both before the caller runs. (With both ready, a plain select picks either.)
func TestAnswerBeforeTheConnectionEndedWins(t *testing.T) {
	c := &conn{done: make(chan struct{}), err: newError(CodeUnavailable, "connection lost: EOF")}
	close(c.done)
	for i := 0; i < 1000; i++ {
		p := &pendingCall{ch: make(chan frame, 1)}
		p.ch <- frame{typ: typePing, status: 1, id: 7}
		f, err := c.await(context.Background(), p)
		if err != nil || f.id != 7 {
			t.Fatalf("call %d: %+v, %v; want the answer delivered before the end", i, f, err)
		}
	}
	// No answer: the connection's end.
	if _, err := c.await(context.Background(), &pendingCall{ch: make(chan frame, 1)}); err != c.err {
		t.Fatalf("no answer: %v, want %v", err, c.err)
	}
}
