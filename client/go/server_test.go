package kvatlas

// The test harness: real kvatlas-server processes (KVATLAS_SERVER_BIN) on free loopback
// ports, each with its own data directory, stopped when the test ends.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bound on waits for a server to come up or a cluster to elect (never a timed assertion).
const startupBound = 60 * time.Second

func serverBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("KVATLAS_SERVER_BIN")
	if bin == "" {
		t.Skip("KVATLAS_SERVER_BIN is not set (the kvatlas-server binary; ctest sets it)")
	}
	return bin
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type testServer struct {
	t       testing.TB
	cmd     *exec.Cmd
	dataDir string
	log     *lockedBuffer
	exited  chan struct{}
	rpc     string // the binary protocol's address
}

// startServer starts kvatlas-server with its listeners on free loopback ports and waits
// until it has written its rpc.addr file.
func startServer(t testing.TB, args ...string) *testServer {
	t.Helper()
	return startServerIn(t, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0", args...)
}

// startServerIn starts kvatlas-server on dataDir (e.g. again, after a stop) with its binary
// protocol on rpcListen.
func startServerIn(t testing.TB, dataDir, rpcListen string, args ...string) *testServer {
	t.Helper()
	_ = os.Remove(filepath.Join(dataDir, "rpc.addr"))
	full := append([]string{"--data-dir", dataDir, "--http-listen", "127.0.0.1:0",
		"--rpc-listen", rpcListen, "--log-level", "warning"}, args...)
	s := &testServer{t: t, dataDir: dataDir, log: &lockedBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(serverBinary(t), full...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.cmd.Path, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.stop)
	deadline := time.Now().Add(startupBound)
	for {
		if b, err := os.ReadFile(filepath.Join(dataDir, "rpc.addr")); err == nil && len(bytes.TrimSpace(b)) > 0 {
			s.rpc = strings.TrimSpace(string(b))
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("kvatlas-server %v exited while starting:\n%s", full, s.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("kvatlas-server did not write rpc.addr within %v:\n%s", startupBound, s.log.String())
		}
	}
}

func (s *testServer) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if s.t.Failed() {
		s.t.Logf("server log (%s):\n%s", s.dataDir, s.log.String())
	}
}

// freePorts returns n loopback ports that were free a moment ago (for raft addresses,
// which must be known before the servers start).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startCluster starts n voters (each with the flags extra too) and waits until every
// member names the same leader.
func startCluster(t *testing.T, n int, extra ...string) []*testServer {
	t.Helper()
	ports := freePorts(t, n)
	var peers []string
	for i, p := range ports {
		peers = append(peers, fmt.Sprintf("%d@127.0.0.1:%d", i+1, p))
	}
	var servers []*testServer
	for i := range ports {
		args := []string{"--id", fmt.Sprint(i + 1), "--peers", strings.Join(peers, ","),
			"--raft-election-timeout-ms", "500"}
		servers = append(servers, startServer(t, append(args, extra...)...))
	}
	deadline := time.Now().Add(startupBound)
	for {
		if leaderAgreed(servers) {
			return servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader agreed by %d servers within %v", n, startupBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leaderAgreed(servers []*testServer) bool {
	var leader uint64
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := clusterOf(ctx, s.rpc)
		cancel()
		if err != nil || st.LeaderID == 0 || (leader != 0 && st.LeaderID != leader) ||
			st.LeaderRPCAddress == nil {
			return false
		}
		leader = st.LeaderID
	}
	return true
}

func clusterOf(ctx context.Context, addr string) (*ClusterStatus, error) {
	c, err := Dial(ctx, Options{Endpoints: []string{addr}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Cluster(ctx)
}

func dialT(t *testing.T, opts Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, opts)
	if err != nil {
		t.Fatalf("Dial(%v): %v", opts.Endpoints, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
