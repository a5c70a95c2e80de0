package kvatlas

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// roles finds the leader and the followers of a cluster whose members agree on a leader.
func roles(t *testing.T, servers []*testServer) (leader *testServer, followers []*testServer) {
	t.Helper()
	for _, s := range servers {
		st, err := clusterOf(testCtx(t), s.rpc)
		if err != nil {
			t.Fatalf("cluster status of %s: %v", s.rpc, err)
		}
		if st.State == "leader" {
			leader = s
		} else {
			followers = append(followers, s)
		}
	}
	if leader == nil {
		t.Fatal("no member says it is the leader")
	}
	return leader, followers
}

// A client that knows only a follower: writes follow the not_leader hint to the leader,
// which is then remembered; reads are answered by the follower.
func TestWritesFollowTheLeader(t *testing.T) {
	servers := startCluster(t, 3)
	leader, followers := roles(t, servers)
	c := dialT(t, Options{Endpoints: []string{followers[0].rpc}})
	ctx := testCtx(t)

	tokens := seqTokens(12, 5)
	ans, err := c.Ingest(ctx, []Event{storedEvent("e", tokens)})
	if err != nil {
		t.Fatalf("Ingest through a follower: %v", err)
	}
	c.mu.Lock()
	remembered, active := c.leader, c.active
	c.mu.Unlock()
	if remembered != leader.rpc || active != followers[0].rpc {
		t.Errorf("after the write: leader %q, active %q; want %q and %q", remembered, active, leader.rpc, followers[0].rpc)
	}
	if _, err := c.Heartbeat(ctx, []Holder{{BackendID: "e"}}); err != nil {
		t.Errorf("Heartbeat: %v", err)
	}
	// Read-your-writes on the follower: it answers once it has applied the ingest.
	a, err := c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: tokens, MinRevision: ans.Revision})
	if err != nil || a.BlocksFound != 3 || a.Revision < ans.Revision {
		t.Errorf("follower lookup at revision %d: %+v, %v", ans.Revision, a, err)
	}
	// A linearizable read is sent to the leader.
	a, err = c.Lookup(ctx, LookupRequest{Context: testContext, Tokens: tokens, Linearizable: true})
	if err != nil || a.BlocksFound != 3 {
		t.Errorf("linearizable lookup: %+v, %v", a, err)
	}
	cl, err := c.Cluster(ctx)
	if err != nil || len(cl.Members) != 3 || cl.State != "follower" || cl.LeaderRPCAddress == nil ||
		*cl.LeaderRPCAddress != leader.rpc {
		t.Errorf("Cluster from a follower: %+v, %v", cl, err)
	}
}

// When the remembered leader dies, the call on it fails (it may have been applied) and
// the leader is forgotten; later writes find the new leader through the endpoints,
// waiting out the election (not_leader without an address is resent).
func TestWritesFindANewLeader(t *testing.T) {
	servers := startCluster(t, 3)
	leader, followers := roles(t, servers)
	c := dialT(t, Options{Endpoints: []string{followers[0].rpc, followers[1].rpc}})
	if _, err := c.Ingest(testCtx(t), []Event{storedEvent("e", seqTokens(4, 1))}); err != nil {
		t.Fatalf("first Ingest: %v", err)
	}
	_ = leader.cmd.Process.Signal(syscall.SIGKILL)
	<-leader.exited

	deadline := time.Now().Add(startupBound)
	var errs []error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Ingest(ctx, []Event{storedEvent("e", seqTokens(4, 100))})
		cancel()
		if err == nil {
			break
		}
		errs = append(errs, err)
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNotLeader) {
			t.Fatalf("Ingest after the leader died: %v; want success, unavailable or not_leader", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write succeeded within %v after the leader died: %v", startupBound, errs[len(errs)-1])
		}
		// Until the followers notice, they name the dead leader, whose address refuses.
		time.Sleep(25 * time.Millisecond)
	}
	if len(errs) > 0 {
		t.Logf("writes failed %d times before one succeeded; first: %v; last: %v", len(errs), errs[0], errs[len(errs)-1])
	}
	if len(errs) > 0 && !errors.Is(errs[0], ErrUnavailable) {
		t.Errorf("the first write after the leader died failed with %v; want unavailable (the remembered leader is gone)", errs[0])
	}
	c.mu.Lock()
	remembered := c.leader
	c.mu.Unlock()
	if remembered == leader.rpc || remembered == "" {
		t.Errorf("remembered leader %q after the failover (the old one was %q)", remembered, leader.rpc)
	}
}
