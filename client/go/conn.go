package kvatlas

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	headerBytes     = 20
	protocolVersion = 1
	flagResponse    = 1
	// The protocol's hard limit on a payload (docs/protocol.md §Limits).
	maxPayloadBytes = 256 << 20
	// A write that cannot make progress for this long breaks the connection (the server
	// closes a connection whose writes are stuck for 30 s too).
	writeTimeout = 30 * time.Second
)

type frame struct {
	typ     uint8
	status  uint16
	id      uint64
	payload []byte
}

func appendFrame(b []byte, typ uint8, id uint64, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(16+len(payload)))
	b = append(b, protocolVersion, typ, 0, 0, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, id)
	return append(b, payload...)
}

// readFrame reads one frame; a stream that cannot be resynchronised is an error.
func readFrame(r io.Reader, hdr *[headerBytes]byte) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	length := binary.LittleEndian.Uint32(hdr[0:])
	if hdr[4] != protocolVersion {
		return frame{}, fmt.Errorf("frame version %d (this client speaks %d)", hdr[4], protocolVersion)
	}
	if length < 16 || length-16 > maxPayloadBytes {
		return frame{}, fmt.Errorf("frame length %d out of range", length)
	}
	f := frame{typ: hdr[5], status: binary.LittleEndian.Uint16(hdr[8:]),
		id: binary.LittleEndian.Uint64(hdr[12:]), payload: make([]byte, length-16)}
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return frame{}, err
	}
	return f, nil
}

// conn is one connection: calls are pipelined over it (each under its own request id;
// answers are matched by id, in any order), at most cap(slots) of them unanswered.
type conn struct {
	addr     string
	maxBytes int // largest request payload
	nc       net.Conn
	auth     AuthInfo
	slots    chan struct{} // one token per request sent and not answered

	// The write side: frames are appended to wbuf, and the caller that finds no flush in
	// progress writes the buffer (with what others append meanwhile) until it is empty, so
	// that concurrent calls share system calls.
	wmu      sync.Mutex
	wbuf     []byte
	wspare   []byte
	flushing bool

	mu      sync.Mutex
	pending map[uint64]*pendingCall
	nextID  uint64
	err     *Error // why the connection ended; set before done is closed
	done    chan struct{}

	// Called on the reader goroutine for every wrong_group answer (the server holds no
	// replica of the group: the client's routing table is stale); must not block. nil = none.
	onWrongGroup func()
}

// dialConn connects to addr (TLS when tlsConfig is non-nil) and presents token (if any)
// as the connection's first frame, waiting for its answer so that a refused token fails
// here, with the server's reason. onWrongGroup (may be nil) becomes the conn's hook.
func dialConn(ctx context.Context, addr string, o *Options, onWrongGroup func()) (*conn, error) {
	d := net.Dialer{Timeout: o.ConnectTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, wrapError(CodeUnavailable, fmt.Sprintf("connect to %s: %v", addr, err), err)
	}
	if o.TLS != nil {
		cfg := o.TLS.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, wrapError(CodeUnavailable, fmt.Sprintf("TLS handshake with %s failed: %v", addr, err), err)
		}
		nc = tc
	}
	c := &conn{addr: addr, maxBytes: o.MaxRequestBytes, nc: nc, slots: make(chan struct{}, o.MaxInFlight),
		pending: map[uint64]*pendingCall{}, done: make(chan struct{}), onWrongGroup: onWrongGroup}
	br := bufio.NewReaderSize(nc, 64<<10)
	if o.Token != "" {
		if err := c.authenticate(ctx, br, o); err != nil {
			nc.Close()
			return nil, err
		}
	} else {
		c.auth = AuthInfo{Role: RoleAdmin, Name: "anonymous"}
	}
	go c.readLoop(br)
	return c, nil
}

func (c *conn) authenticate(ctx context.Context, br *bufio.Reader, o *Options) error {
	deadline := time.Now().Add(o.ConnectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.nc.SetDeadline(deadline)
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.nc.Write(appendFrame(nil, typeAuth, 0, encodeAuth(o.Token))); err != nil {
		return wrapError(CodeUnavailable, fmt.Sprintf("send token to %s: %v", c.addr, err), err)
	}
	var hdr [headerBytes]byte
	f, err := readFrame(br, &hdr)
	if err != nil {
		return wrapError(CodeUnavailable, fmt.Sprintf("read token answer from %s: %v", c.addr, err), err)
	}
	if f.status != 0 {
		e := decodeErrorPayload(CodeFromNumber(f.status), f.payload)
		e.Message = fmt.Sprintf("%s refused the token: %s", c.addr, e.Message)
		return e
	}
	c.auth, err = decodeAuthAnswer(f.payload)
	return err
}

func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// pendingCall is a request waiting for its answer: one frame (ch) for most types, several
// for the streams kWatch and kSnapshot (onFrame, called on the reader goroutine for each,
// must not block; onEnd is told when the connection ends first).
type pendingCall struct {
	id      uint64 // set by send before the call is registered
	ch      chan frame
	onFrame func(frame)
	onEnd   func(*Error)
}

// isFinal says whether f is its request's last frame: any frame of a unary call; of a
// stream, an error or a payload that does not start with the "more" marker (0x00).
func (p *pendingCall) isFinal(f frame) bool {
	return p.onFrame == nil || f.status != 0 || len(f.payload) == 0 || f.payload[0] != 0
}

// fail ends the connection (once) and fails every call waiting on it.
func (c *conn) fail(e *Error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = e
	streams := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, p := range streams {
		if p.onEnd != nil {
			p.onEnd(e)
		}
	}
}

func (c *conn) readLoop(br *bufio.Reader) {
	var hdr [headerBytes]byte
	var connErr *Error // an error frame with id 0: the server's reason for closing
	for {
		f, err := readFrame(br, &hdr)
		if err != nil {
			if connErr != nil {
				c.fail(connErr)
			} else {
				c.fail(wrapError(CodeUnavailable, fmt.Sprintf("connection to %s lost: %v", c.addr, err), err))
			}
			return
		}
		if f.status == uint16(CodeWrongGroup) && c.onWrongGroup != nil {
			c.onWrongGroup() // before the caller sees the answer, so a retry finds it asked
		}
		c.mu.Lock()
		p, ok := c.pending[f.id]
		final := ok && p.isFinal(f)
		if final {
			delete(c.pending, f.id)
		}
		c.mu.Unlock()
		if !ok {
			if f.id == 0 && f.status != 0 {
				connErr = decodeErrorPayload(CodeFromNumber(f.status), f.payload)
				connErr.Message = fmt.Sprintf("%s closed the connection: %s", c.addr, connErr.Message)
			}
			continue // a late answer to a call that gave up
		}
		if final {
			<-c.slots
		}
		if p.onFrame != nil {
			p.onFrame(f)
		} else {
			p.ch <- f // buffered: never blocks
		}
	}
}

// send registers p under a new request id (waiting for an in-flight slot) and writes the
// request. The slot is freed when the request's last frame arrives.
func (c *conn) send(ctx context.Context, typ uint8, payload []byte, p *pendingCall) (uint64, error) {
	if len(payload) > c.maxBytes {
		return 0, newError(CodePayloadTooLarge, fmt.Sprintf("request of %d bytes; the limit is %d (Options.MaxRequestBytes)", len(payload), c.maxBytes))
	}
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctxError(ctx, "waiting for an in-flight slot")
	case <-c.done:
		return 0, c.err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		<-c.slots
		return 0, c.err
	}
	c.nextID++
	id := c.nextID
	p.id = id
	c.pending[id] = p
	c.mu.Unlock()
	if err := c.write(typ, id, payload); err != nil {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
		<-c.slots
		return 0, err
	}
	return id, nil
}

// write queues one frame and writes the queue unless another caller is doing so (its
// frame is then written by that caller, or the connection fails). A write that fails
// breaks the connection: a partial frame cannot be taken back.
func (c *conn) write(typ uint8, id uint64, payload []byte) error {
	c.wmu.Lock()
	if !c.alive() {
		c.wmu.Unlock()
		return c.err
	}
	c.wbuf = appendFrame(c.wbuf, typ, id, payload)
	if c.flushing {
		c.wmu.Unlock()
		return nil
	}
	c.flushing = true
	for len(c.wbuf) > 0 {
		buf := c.wbuf
		c.wbuf = c.wspare[:0]
		c.wmu.Unlock()
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := c.nc.Write(buf)
		c.wmu.Lock()
		if cap(buf) <= 1<<20 { // keep small buffers for reuse
			c.wspare = buf[:0]
		} else {
			c.wspare = nil
		}
		if err != nil {
			c.flushing = false
			c.wbuf = nil
			c.wmu.Unlock()
			c.fail(wrapError(CodeUnavailable, fmt.Sprintf("send to %s: %v", c.addr, err), err))
			return c.err
		}
	}
	c.flushing = false
	c.wmu.Unlock()
	return nil
}

// call sends one request and waits for its answer, under ctx. An error answer is returned
// as *Error; a lost connection as unavailable; ctx's end as deadline_exceeded or
// cancelled (the server may still execute the request).
func (c *conn) call(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	p := &pendingCall{ch: make(chan frame, 1)}
	if _, err := c.send(ctx, typ, payload, p); err != nil {
		return nil, err
	}
	f, err := c.await(ctx, p)
	if err != nil {
		return nil, err
	}
	if f.status != 0 {
		return nil, decodeErrorPayload(CodeFromNumber(f.status), f.payload)
	}
	if f.typ != typ {
		return nil, newError(CodeCorruption, fmt.Sprintf("answer of type %d to a request of type %d", f.typ, typ))
	}
	return f.payload, nil
}

// await is p's answer, or ctx's end, or the connection's. An answer that arrived before the
// connection ended wins: a server that answers with an error and closes (a refused token)
// has the reader deliver the answer and then end the connection, often before this
// goroutine runs, and a select between the two ready cases would pick either.
func (c *conn) await(ctx context.Context, p *pendingCall) (frame, error) {
	select {
	case f := <-p.ch:
		return f, nil
	case <-ctx.Done():
		// The entry stays registered: its answer, when it comes, frees the slot.
		return frame{}, ctxError(ctx, "waiting for the answer")
	case <-c.done:
		select {
		case f := <-p.ch:
			return f, nil
		default:
			return frame{}, c.err
		}
	}
}

func ctxError(ctx context.Context, what string) *Error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return wrapError(CodeDeadlineExceeded, "deadline exceeded "+what, err)
	}
	return wrapError(CodeCancelled, "cancelled "+what, err)
}
