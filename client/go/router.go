package kvatlas

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Routing by the directory (docs/go.md §Routing by the directory; the C++ GroupRouter,
// client/src/group_router.h). On a cluster whose raft groups live on some servers only
// (--replicas), a server that holds no replica of a context's group sends a lookup or a
// route of it on to a member (a second round trip) and refuses its snapshot, watch and
// locate wrong_group. The router sends each context's reads to a member of its group.
//
// The routing table is the kDirectory answer, fetched through the client's endpoints at
// Dial, every directoryRefresh, and soon after any wrong_group answer (at most one fetch
// per minRefreshGap). The members' connections are opened by the router's goroutine (and
// by Dial), never by a caller, and live in the client's pool (Client.conns) with the
// endpoints'. A call goes to one of its group's members whose connection is open, picked
// by the context so that contexts spread; with none open, or no table, to the endpoints,
// whose server sends it on. A missing, stale or unreachable table therefore costs a second
// hop, never a wrong answer: every server checks that it holds the group it answers for.

const (
	directoryRefresh = 5 * time.Second
	// A burst of wrong_group answers (every watch of a moved group at once) costs one
	// fetch, not one each.
	minRefreshGap = 50 * time.Millisecond
	// Members dialled at once by a refresh: a cluster of dead members costs about one
	// connect timeout, not one each.
	maxParallelDials = 16
)

// routeTable is what calls are routed by: built by a refresh, swapped whole.
type routeTable struct {
	groups    uint32
	directory placementDirectory
	// The binary-protocol addresses of each group's recorded members (those that announced
	// one). Groups without members (held by every server) are absent.
	members map[uint32][]string
}

func newRouteTable(a *directoryAnswer) *routeTable {
	addresses := make(map[uint64]string, len(a.servers))
	for _, s := range a.servers {
		addresses[s.id] = s.address
	}
	t := &routeTable{groups: a.groups, directory: a.directory, members: map[uint32][]string{}}
	for _, g := range a.directory.groups {
		var addrs []string
		for _, m := range g.members {
			id, err := strconv.ParseUint(m, 10, 64)
			if addr, ok := addresses[id]; err == nil && ok {
				addrs = append(addrs, addr)
			} // else not announced yet: not routed to
		}
		if len(addrs) > 0 {
			t.members[g.id] = addrs
		}
	}
	return t
}

// router keeps a client's routing table. Safe for concurrent use; refreshes run on one
// goroutine (Dial's first, then run's), one at a time.
type router struct {
	c     *Client
	every time.Duration
	table atomic.Pointer[routeTable] // nil until a fetch succeeds

	life   context.Context // ended by stop: ends a fetch or a dial in flight
	cancel context.CancelFunc
	asked  chan struct{} // one token: a refresh is asked

	mu        sync.Mutex
	started   uint64        // refreshes started
	finished  uint64        // refreshes ended (in the order they started)
	refreshed chan struct{} // closed and replaced when a refresh ends
	done      chan struct{} // closed when run returns; nil before start
}

func newRouter(c *Client) *router {
	life, cancel := context.WithCancel(context.Background())
	return &router{c: c, every: directoryRefresh, life: life, cancel: cancel,
		asked: make(chan struct{}, 1), refreshed: make(chan struct{})}
}

// start fetches the table (the fetch bounded as a connect is, so that a server that
// accepts and does not answer delays Dial no more than connecting to it could) and opens
// the members' connections, then refreshes in the background until stop. A failed fetch is
// no error: calls go to the endpoints until a later refresh succeeds (an older server
// answers kDirectory invalid_argument, and then nothing is routed).
func (r *router) start(ctx context.Context) {
	r.refresh(ctx, r.c.opts.ConnectTimeout)
	r.mu.Lock()
	r.done = make(chan struct{})
	r.mu.Unlock()
	go r.run()
}

// stop ends the refreshes and waits for the goroutine. Idempotent.
func (r *router) stop() {
	r.cancel()
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (r *router) run() {
	defer close(r.done)
	for r.wait(minRefreshGap, false) && r.wait(r.every, true) {
		r.refresh(r.life, r.c.opts.DefaultTimeout)
	}
}

// wait sleeps for d (or until a refresh is asked, with orAsked); false when the router
// stops first.
func (r *router) wait(d time.Duration, orAsked bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	var asked <-chan struct{}
	if orAsked {
		asked = r.asked
	}
	select {
	case <-r.life.Done():
		return false
	case <-t.C:
	case <-asked:
	}
	return true
}

// refreshSoon asks for a refresh (a wrong_group answer). Never blocks.
func (r *router) refreshSoon() {
	select {
	case r.asked <- struct{}{}:
	default: // already asked
	}
}

// awaitRefresh asks for a refresh and waits until one that started after the call has
// ended: true then, false when ctx ends or the router stops first.
func (r *router) awaitRefresh(ctx context.Context) bool {
	r.mu.Lock()
	target := r.started + 1
	r.mu.Unlock()
	r.refreshSoon()
	for {
		r.mu.Lock()
		ended, refreshed := r.finished >= target, r.refreshed
		r.mu.Unlock()
		if ended {
			return true
		}
		select {
		case <-refreshed:
		case <-ctx.Done():
			return false
		case <-r.life.Done():
			return false
		}
	}
}

// refresh fetches the table through the endpoints (within timeout), opens the connections
// of members that have none, and swaps the table in. A failed fetch keeps the table.
func (r *router) refresh(ctx context.Context, timeout time.Duration) {
	r.mu.Lock()
	r.started++
	r.mu.Unlock()
	defer r.ended()
	t, err := r.fetch(ctx, timeout)
	if err != nil {
		return
	}
	r.open(ctx, t)
	r.table.Store(t)
}

func (r *router) ended() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished++
	close(r.refreshed)
	r.refreshed = make(chan struct{})
}

func (r *router) fetch(ctx context.Context, timeout time.Duration) (*routeTable, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := r.c.read(ctx, typeDirectory, nil)
	if err != nil {
		return nil, err
	}
	a, err := decodeDirectoryAnswer(p)
	if err != nil {
		return nil, err
	}
	return newRouteTable(&a), nil
}

// open dials, in parallel, every member of t that has no open connection (each dial
// bounded by Options.ConnectTimeout). One that fails is dialled again at the next refresh.
func (r *router) open(ctx context.Context, t *routeTable) {
	seen := map[string]bool{}
	slots := make(chan struct{}, maxParallelDials)
	var wg sync.WaitGroup
	for _, addrs := range t.members {
		for _, addr := range addrs {
			if seen[addr] || r.c.hasOpen(addr) {
				continue
			}
			seen[addr] = true
			wg.Add(1)
			slots <- struct{}{}
			go func(addr string) {
				defer wg.Done()
				r.c.openIdle(ctx, addr)
				<-slots
			}(addr)
		}
	}
	wg.Wait()
}

// memberConn is an open connection to a member of of's group, picked by the context so
// that contexts spread over the members (the next one when its connection is down); nil
// when the table routes nothing there or no member's connection is open.
func (r *router) memberConn(ctx context.Context, of Context) *conn {
	t := r.table.Load()
	if t == nil || len(t.members) == 0 {
		return nil
	}
	members := t.members[groupOfContext(&t.directory, of, t.groups)]
	n := uint64(len(members))
	if n == 0 {
		return nil
	}
	first := spread(of) % n
	for i := uint64(0); i < n; i++ {
		addr := members[(first+i)%n]
		if !r.c.hasOpen(addr) {
			continue
		}
		if cn, err := r.c.connTo(ctx, addr); err == nil {
			return cn
		}
	}
	return nil
}

// spread is a stable mix of a context's fields (FNV-1a), to spread contexts over their
// group's members.
func spread(c Context) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, s := range [...]string{c.Tenant, c.Model, c.LoRA, c.Salt} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
		h = (h ^ 0xff) * prime // field separator: ("ab", "") differs from ("a", "b")
	}
	return (h ^ uint64(c.BlockSize)) * prime
}

// connFor is the connection for a read of context of: a member of its group when the
// client routes and one is reachable, else the endpoints'. of is as the server reads it
// (normalContext for requests).
func (c *Client) connFor(ctx context.Context, of Context) (*conn, error) {
	if c.router != nil {
		if cn := c.router.memberConn(ctx, of); cn != nil {
			return cn, nil
		}
	}
	return c.endpointConn(ctx)
}

// readIn sends a read of context of (a lookup, route or locate in a context), routed by
// connFor. One answered wrong_group (the table was stale, or the endpoints' server holds
// no replica) is sent again, once, by the table fetched after the refusal and within ctx:
// the server applied nothing.
func (c *Client) readIn(ctx context.Context, of Context, typ uint8, payload []byte) ([]byte, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	of = normalContext(of) // the server reads an empty tenant as "default"
	p, err := c.callIn(ctx, of, typ, payload)
	if c.router == nil || CodeOf(err) != CodeWrongGroup || !c.router.awaitRefresh(ctx) {
		return p, err
	}
	return c.callIn(ctx, of, typ, payload)
}

func (c *Client) callIn(ctx context.Context, of Context, typ uint8, payload []byte) ([]byte, error) {
	cn, err := c.connFor(ctx, of)
	if err != nil {
		return nil, err
	}
	return cn.call(ctx, typ, payload)
}

// groupContext is the context whose group a watch with filter f is sent to
// (FeedFilter::GroupContext, common/src/feed.cc): the context the filter names when it
// names LoRA and salt too, else the model's base context (an unset tenant is "default");
// false when the filter lacks a model or a block size (the watch spans groups).
func (f *FeedFilter) groupContext() (Context, bool) {
	if f.Model == nil || f.BlockSize == nil {
		return Context{}, false
	}
	c := Context{Tenant: "default", Model: *f.Model, BlockSize: *f.BlockSize}
	if f.Tenant != nil {
		c.Tenant = *f.Tenant
	}
	if f.LoRA != nil && f.Salt != nil {
		c.LoRA, c.Salt = *f.LoRA, *f.Salt
	}
	return c, true
}
