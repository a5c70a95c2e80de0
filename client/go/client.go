// Package kvatlas is a pure-Go client of kvatlas's binary protocol (docs/protocol.md,
// docs/go.md): lookups, routing decisions, ingests with exactly-once writers, statistics,
// the cluster's status, context snapshots and watches of the change feed, over pipelined
// connections to any member of a cluster, with not_leader answers followed to the leader
// and each context's reads sent to a server that holds its raft group (routing by the
// directory); and the block hashes of kvatlas (BlockHasher) and of vLLM (VllmBlockHasher).
//
// A Client is safe for concurrent use by any number of goroutines; their calls share the
// connection (or Options.Connections, in turn), each under its own request id, at most
// Options.MaxInFlight unanswered per connection.
package kvatlas

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// Options configure Dial.
type Options struct {
	// Members to connect to, "host:port" or "[v6]:port" of their binary protocol
	// (--rpc-listen), tried in order: list the preferred member first.
	Endpoints []string
	// The access token (docs/security.md), presented as each connection's first frame.
	// Empty = none (a server with access control on then refuses every call with
	// ErrUnauthenticated).
	Token string
	// TLS for servers with rpc in tls_listeners; nil = plaintext. ServerName, when empty,
	// is the endpoint's host. Certificates (mutual TLS) go in the config as usual.
	TLS *tls.Config
	// Bound on one connect attempt (TCP, TLS handshake, token), per endpoint. Default 1 s.
	ConnectTimeout time.Duration
	// Deadline of a call whose context has none. Default 5 s.
	DefaultTimeout time.Duration
	// Requests sent and not yet answered per connection; further calls wait (under their
	// context) for a slot. Default 1024, the server's default rpc_max_in_flight.
	MaxInFlight int
	// Connections per member (at most 64); calls take them in turn. Default 1. More than
	// one spreads a busy client's calls over as many of the server's I/O threads and
	// socket buffers (and MaxInFlight applies to each).
	Connections int
	// Largest request payload sent (at most 256 MiB, the protocol's limit); a larger request
	// fails with ErrPayloadTooLarge without being sent, since the server would close the
	// connection (failing the other calls on it). Match the server's rpc_max_frame_bytes.
	// Default 16 MiB, its default.
	MaxRequestBytes int
	// After every endpoint failed to connect, calls fail with ErrUnavailable without a new
	// attempt for this long; it doubles on each failed round up to ReconnectBackoffMax, so
	// that a client hammering a dead cluster costs nothing. Defaults 20 ms and 1 s. A
	// connection lost while open is retried at once by the next call.
	ReconnectBackoffMin, ReconnectBackoffMax time.Duration
	// Turns routing by the directory off. By default the client fetches the cluster's
	// routing table (kDirectory: the groups, the servers each lives on, the servers'
	// addresses) at Dial, every 5 s and after a wrong_group answer, and sends each context's
	// reads (lookups, routes, a context's locate, snapshots, watches) to a server that holds
	// the context's raft group, saving the second hop a server without it makes
	// (docs/go.md §Routing by the directory). Linearizable reads and writes are never
	// routed. A single-group cluster, one whose every server holds every group, and an
	// older server (kDirectory unknown) route nothing.
	DisableDirectoryRouting bool
}

// Client is a connection to a kvatlas cluster. See the package documentation.
type Client struct {
	opts Options

	dialMu sync.Mutex // one dial at a time, so that concurrent calls share it
	mu     sync.Mutex
	conns  map[string]*memberConns // connections by address (endpoints and leaders)
	active string                  // the endpoint reads use
	leader string                  // the leader writes go to, once one acknowledged a write
	closed bool
	// After a round in which no endpoint accepted: no new round before backoffUntil.
	backoff      time.Duration
	backoffUntil time.Time
	backoffErr   *Error

	router *router // nil with Options.DisableDirectoryRouting
}

// memberConns are the connections to one member, taken in turn.
type memberConns struct {
	conns []*conn // Options.Connections slots; nil = not dialled yet
	next  int     // the slot the next call takes
}

// alive is an open connection of m other than slot skip (-1: any), or nil.
func (m *memberConns) alive(skip int) *conn {
	for i, cn := range m.conns {
		if i != skip && cn != nil && cn.alive() {
			return cn
		}
	}
	return nil
}

const (
	maxConnections    = 64
	maxLeaderHops     = 3
	noLeaderRetryWait = 25 * time.Millisecond
)

// Dial checks opts, connects to the first endpoint that accepts (presenting the token) and
// pings it, within ctx; then, unless Options.DisableDirectoryRouting, fetches the routing
// table and connects to the members it names (no error when that fails: nothing is routed
// until a later fetch succeeds). It fails with ErrInvalidArgument for bad options,
// ErrUnauthenticated when the server refuses the token or needs one, ErrUnavailable
// (naming each endpoint and why) when none accepts.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if len(opts.Endpoints) == 0 {
		return nil, newError(CodeInvalidArgument, "Options.Endpoints: at least one endpoint is needed")
	}
	for i, ep := range opts.Endpoints {
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" || port == "" {
			return nil, newError(CodeInvalidArgument, fmt.Sprintf("Options.Endpoints[%d]: %q is not HOST:PORT", i, ep))
		}
	}
	if len(opts.Token) > maxTokenBytes {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("Options.Token: %d bytes (at most %d)", len(opts.Token), maxTokenBytes))
	}
	if opts.Connections < 0 || opts.Connections > maxConnections {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("Options.Connections: %d is not in 0..%d", opts.Connections, maxConnections))
	}
	if opts.Connections == 0 {
		opts.Connections = 1
	}
	if opts.ConnectTimeout < 0 || opts.DefaultTimeout < 0 || opts.MaxInFlight < 0 ||
		opts.ReconnectBackoffMin < 0 || opts.ReconnectBackoffMax < 0 {
		return nil, newError(CodeInvalidArgument, "Options: durations and MaxInFlight must not be negative")
	}
	if opts.MaxRequestBytes < 0 || opts.MaxRequestBytes > maxPayloadBytes {
		return nil, newError(CodeInvalidArgument, fmt.Sprintf("Options.MaxRequestBytes: %d is not in 0..%d", opts.MaxRequestBytes, maxPayloadBytes))
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = 16 << 20
	}
	if opts.ReconnectBackoffMin == 0 {
		opts.ReconnectBackoffMin = 20 * time.Millisecond
	}
	if opts.ReconnectBackoffMax == 0 {
		opts.ReconnectBackoffMax = time.Second
	}
	if opts.ReconnectBackoffMax < opts.ReconnectBackoffMin {
		opts.ReconnectBackoffMax = opts.ReconnectBackoffMin
	}
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = time.Second
	}
	if opts.DefaultTimeout == 0 {
		opts.DefaultTimeout = 5 * time.Second
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 1024
	}
	opts.Endpoints = append([]string(nil), opts.Endpoints...)
	c := &Client{opts: opts, conns: map[string]*memberConns{}}
	if !opts.DisableDirectoryRouting {
		c.router = newRouter(c) // before the first connection, which takes its hook
	}
	// A round trip, so that a server that needs a token (and got none), or that does not
	// speak the protocol (a TLS server reached in plaintext), fails Dial, not the first call.
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if c.router != nil {
		c.router.start(ctx)
	}
	return c, nil
}

// Close closes the connections (calls still waiting fail with ErrUnavailable) and stops
// the routing table's refreshes. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*memberConns{}
	c.mu.Unlock()
	for _, m := range conns {
		for _, cn := range m.conns {
			if cn != nil {
				cn.fail(newError(CodeUnavailable, "the client was closed"))
			}
		}
	}
	if c.router != nil {
		c.router.stop()
	}
	return nil
}

// Auth is what the server of the active connection said about the token ("anonymous",
// admin, without one).
func (c *Client) Auth() AuthInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.conns[c.active]; m != nil {
		for _, cn := range m.conns {
			if cn != nil {
				return cn.auth
			}
		}
	}
	return AuthInfo{}
}

// withDeadline gives ctx the default deadline when it has none.
func (c *Client) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.opts.DefaultTimeout)
}

// connTo returns the next of addr's connections in turn (Options.Connections), dialling
// it if it is not open. When that dial fails, another open connection to addr serves.
func (c *Client) connTo(ctx context.Context, addr string) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, newError(CodeUnavailable, "the client was closed")
	}
	m := c.conns[addr]
	if m == nil {
		m = &memberConns{conns: make([]*conn, c.opts.Connections)}
		c.conns[addr] = m
	}
	slot := m.next
	m.next = (m.next + 1) % len(m.conns)
	if cn := m.conns[slot]; cn != nil && cn.alive() {
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()

	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	if cn := m.conns[slot]; cn != nil && cn.alive() { // dialled while this call waited
		c.mu.Unlock()
		return cn, nil
	}
	c.mu.Unlock()
	cn, err := dialConn(ctx, addr, &c.opts, c.wrongGroupHook())
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if other := m.alive(slot); other != nil && !c.closed {
			return other, nil
		}
		return nil, err
	}
	if c.closed {
		cn.fail(newError(CodeUnavailable, "the client was closed"))
		return nil, cn.err
	}
	if cur := m.conns[slot]; cur != nil && cur.alive() { // the router opened it meanwhile
		cn.fail(newError(CodeUnavailable, "a duplicate connection was closed"))
		return cur, nil
	}
	m.conns[slot] = cn
	return cn, nil
}

// openIdle opens one connection to addr unless one is open, for the router, which keeps
// its members' connections ready so that no call dials a member that may not answer.
// Without dialMu: a member that does not answer delays no caller's dial. The connection
// takes a slot that is not open (connTo never replaces an open one).
func (c *Client) openIdle(ctx context.Context, addr string) {
	if c.hasOpen(addr) {
		return
	}
	cn, err := dialConn(ctx, addr, &c.opts, c.wrongGroupHook())
	if err != nil {
		return // not routed to until a later refresh connects
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		m := c.conns[addr]
		if m == nil {
			m = &memberConns{conns: make([]*conn, c.opts.Connections)}
			c.conns[addr] = m
		}
		if m.alive(-1) == nil {
			for i, cur := range m.conns {
				if cur == nil || !cur.alive() {
					m.conns[i] = cn
					return
				}
			}
		}
	}
	cn.fail(newError(CodeUnavailable, "a duplicate connection was closed"))
}

// hasOpen says whether one of addr's connections is open.
func (c *Client) hasOpen(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.conns[addr]
	return m != nil && m.alive(-1) != nil
}

// wrongGroupHook is what a new connection calls on a wrong_group answer: a refresh of the
// routing table, when the client routes.
func (c *Client) wrongGroupHook() func() {
	if c.router == nil {
		return nil
	}
	return c.router.refreshSoon
}

// endpointConn returns the active endpoint's connection, or connects to the endpoints in
// order.
func (c *Client) endpointConn(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	active := c.active
	if m := c.conns[active]; m != nil && m.alive(-1) != nil {
		c.mu.Unlock()
		return c.connTo(ctx, active)
	}
	if wait := time.Until(c.backoffUntil); wait > 0 {
		e := c.backoffErr
		c.mu.Unlock()
		return nil, wrapError(CodeUnavailable, fmt.Sprintf("%s (no new attempt for %v)", e.Message, wait.Round(time.Millisecond)), e)
	}
	c.mu.Unlock()
	var reasons []string
	for _, ep := range c.opts.Endpoints {
		cn, err := c.connTo(ctx, ep)
		if err == nil {
			c.mu.Lock()
			c.active = ep
			c.backoff = 0
			c.mu.Unlock()
			return cn, nil
		}
		if CodeOf(err) == CodeUnauthenticated || ctx.Err() != nil {
			return nil, err
		}
		reasons = append(reasons, err.Error())
	}
	e := newError(CodeUnavailable, "no endpoint accepted a connection: "+strings.Join(reasons, "; "))
	c.mu.Lock()
	if c.backoff *= 2; c.backoff < c.opts.ReconnectBackoffMin {
		c.backoff = c.opts.ReconnectBackoffMin
	}
	if c.backoff > c.opts.ReconnectBackoffMax {
		c.backoff = c.opts.ReconnectBackoffMax
	}
	c.backoffUntil = time.Now().Add(c.backoff)
	c.backoffErr = e
	c.mu.Unlock()
	return nil, e
}

// read sends a request that any member answers. A connection lost before the answer fails
// the call with ErrUnavailable (as the C++ client does); the next call reconnects.
func (c *Client) read(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	cn, err := c.endpointConn(ctx)
	if err != nil {
		return nil, err
	}
	return cn.call(ctx, typ, payload)
}

// leaderCall sends a request that only the leader applies (ingest, heartbeat, a
// linearizable read), following not_leader answers (docs/protocol.md §Not leader): to the
// hinted leader's address, at most maxLeaderHops hops; an answer naming no address is
// sent again every 25 ms (to the remembered leader, else the endpoints) until the
// deadline. The member that answers is remembered for the next call; a remembered leader
// that cannot be reached is forgotten, and that call fails (it may have been applied).
func (c *Client) leaderCall(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	c.mu.Lock()
	target := c.leader
	c.mu.Unlock()
	hops := 0
	for {
		var cn *conn
		var err error
		if target != "" {
			cn, err = c.connTo(ctx, target)
		} else {
			cn, err = c.endpointConn(ctx)
		}
		var p []byte
		if err == nil {
			p, err = cn.call(ctx, typ, payload)
		}
		if err == nil {
			c.mu.Lock()
			c.leader = cn.addr
			c.mu.Unlock()
			return p, nil
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, err
		}
		switch e.Code {
		case CodeNotLeader:
			if e.LeaderAddress != "" {
				if hops++; hops > maxLeaderHops {
					return nil, err
				}
				target = e.LeaderAddress
				continue
			}
			if !e.leaderHint {
				return nil, err // an older server: no hint to follow
			}
			// An election, or a leader not announced yet: wait and send again.
			timer := time.NewTimer(noLeaderRetryWait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, wrapError(CodeNotLeader, "no leader was known within the call's deadline", ctx.Err())
			case <-timer.C:
			}
			c.mu.Lock()
			target = c.leader
			c.mu.Unlock()
		case CodeUnavailable:
			c.mu.Lock()
			if target != "" && c.leader == target {
				c.leader = ""
			}
			c.mu.Unlock()
			return nil, err
		default:
			return nil, err
		}
	}
}

// Ping is a round trip that touches no state.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.read(ctx, typePing, nil)
	return err
}

// Lookup finds the longest cached prefix per instance and tier (POST /v1/lookup).
// Linearizable lookups go to the leader.
func (c *Client) Lookup(ctx context.Context, r LookupRequest) (*LookupAnswer, error) {
	payload := encodeLookup(&r)
	var p []byte
	var err error
	if r.Linearizable {
		p, err = c.leaderCall(ctx, typeLookup, payload)
	} else {
		p, err = c.readIn(ctx, r.Context, typeLookup, payload)
	}
	return decoded(p, err, decodeLookupAnswer)
}

// Route ranks candidates by the common cost over the server's index (POST /v1/route,
// docs/routing.md), the pick first.
func (c *Client) Route(ctx context.Context, r RouteRequest) (*RouteAnswer, error) {
	payload := encodeRoute(&r)
	var p []byte
	var err error
	if r.Lookup.Linearizable {
		p, err = c.leaderCall(ctx, typeRoute, payload)
	} else {
		p, err = c.readIn(ctx, r.Lookup.Context, typeRoute, payload)
	}
	return decoded(p, err, decodeRouteAnswer)
}

// Locate lists every copy of one block key, in ctx's context when non-nil, else in every
// context (GET /v1/blocks/{key}).
func (c *Client) Locate(ctx context.Context, key uint64, in *Context) (*LocateAnswer, error) {
	var p []byte
	var err error
	if in != nil {
		p, err = c.readIn(ctx, *in, typeLocate, encodeLocate(key, in))
	} else {
		p, err = c.read(ctx, typeLocate, encodeLocate(key, nil))
	}
	return decoded(p, err, decodeLocateAnswer)
}

// Ingest applies a batch of events atomically on the leader (POST /v1/events), following
// not_leader answers. After a lost answer (ErrUnavailable, ErrDeadlineExceeded) the batch
// may or may not have been applied: use IngestOnce to resend safely.
func (c *Client) Ingest(ctx context.Context, events []Event) (*IngestAnswer, error) {
	return c.ingest(ctx, events, nil)
}

// IngestOnce applies the batch at most once per (w.ID, w.Sequence): resending it after a
// lost answer changes nothing if the first send was applied (docs/api.md §Idempotent
// writes). Give each batch of a writer the next sequence number.
func (c *Client) IngestOnce(ctx context.Context, w WriterPosition, events []Event) (*IngestAnswer, error) {
	return c.ingest(ctx, events, &w)
}

func (c *Client) ingest(ctx context.Context, events []Event, w *WriterPosition) (*IngestAnswer, error) {
	if err := checkEvents(events, w); err != nil {
		return nil, err
	}
	p, err := c.leaderCall(ctx, typeIngest, encodeIngest(events, w))
	return decoded(p, err, decodeIngestAnswer)
}

// Heartbeat keeps holders alive under holder leases (docs/leases.md), on the leader.
func (c *Client) Heartbeat(ctx context.Context, holders []Holder) (*HeartbeatAnswer, error) {
	for i, h := range holders {
		if h.BackendID == "" {
			return nil, newError(CodeInvalidArgument, fmt.Sprintf("holders[%d].backend_id: must be a non-empty string", i))
		}
	}
	p, err := c.leaderCall(ctx, typeHeartbeat, encodeHeartbeat(holders))
	return decoded(p, err, decodeHeartbeatAnswer)
}

// decoded is the answer a call returned, decoded: the call's error if it failed, else the
// decoder's.
func decoded[T any](p []byte, err error, decode func([]byte) (T, error)) (*T, error) {
	if err != nil {
		return nil, err
	}
	a, err := decode(p)
	if err != nil {
		return nil, err
	}
	return &a, nil
}
