package kvatlas

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// rpcConnections is the server's kvatlas_rpc_connections gauge (GET /metrics).
func rpcConnections(t *testing.T, s *testServer) string {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(s.dataDir, "http.addr"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^kvatlas_rpc_connections (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no kvatlas_rpc_connections in the metrics")
	}
	return string(m[1])
}

// With Options.Connections the calls take the connections to a member in turn; a lost
// one is dialled again by the call whose turn it is, the others go on.
func TestConnectionsTakeTurns(t *testing.T) {
	s := startServer(t)
	// Without the routing table's fetches, which would take turns too.
	c := dialT(t, Options{Endpoints: []string{s.rpc}, Connections: 3, DisableDirectoryRouting: true})
	ctx := testCtx(t)
	for i := 0; i < 8; i++ {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	calls := func() []uint64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		var out []uint64
		for _, cn := range c.conns[s.rpc].conns {
			if cn == nil {
				out = append(out, 0)
				continue
			}
			cn.mu.Lock()
			out = append(out, cn.nextID)
			cn.mu.Unlock()
		}
		return out
	}
	if got := calls(); len(got) != 3 || got[0] != 3 || got[1] != 3 || got[2] != 3 {
		t.Errorf("calls per connection after Dial's ping and 8 more: %v, want [3 3 3]", got)
	}
	deadline := time.Now().Add(startupBound) // the gauge follows the accepts
	for n := rpcConnections(t, s); n != "3"; n = rpcConnections(t, s) {
		if time.Now().After(deadline) {
			t.Fatalf("the server has %s binary protocol connections, want 3", n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	c.mu.Lock()
	lost := c.conns[s.rpc].conns[1]
	c.mu.Unlock()
	lost.fail(newError(CodeUnavailable, "closed by the test"))
	for i := 0; i < 6; i++ {
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("ping %d after losing one connection: %v", i, err)
		}
	}
	c.mu.Lock()
	again := c.conns[s.rpc].conns[1]
	c.mu.Unlock()
	if again == lost || !again.alive() {
		t.Errorf("the lost connection was not dialled again")
	}

	for _, n := range []int{-1, maxConnections + 1} {
		if _, err := Dial(ctx, Options{Endpoints: []string{s.rpc}, Connections: n}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Connections %d: %v", n, err)
		}
	}
}
