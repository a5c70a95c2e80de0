package kvatlas

// Routing by the directory against real servers: five of them, --groups 6 --replicas 3
// (docs/scaling.md §Replicas on some servers), as tests/fault/replicas_test.py's
// check_routed_client does with the C++ client.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	replicaGroups   = 6
	replicaReplicas = 3
	replicaBlock    = 4
)

// httpGet is the body of the server's GET path (an HTTP status other than 200 fails).
func httpGet(t *testing.T, s *testServer, path string) []byte {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(s.dataDir, "http.addr"))
	if err != nil {
		t.Fatal(err)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + strings.TrimSpace(string(addr)) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s (%v)", path, resp.StatusCode, body, err)
	}
	return body
}

// groupView is a group as GET /v1/groups shows it.
type groupView struct {
	ID         uint32   `json:"id"`
	Replicas   []uint64 `json:"replicas"`
	HostedHere bool     `json:"hosted_here"`
	LeaderID   uint64   `json:"leader_id"`
}

func groupsOf(t *testing.T, s *testServer) map[uint32]groupView {
	t.Helper()
	var body struct {
		Groups []groupView `json:"groups"`
	}
	if err := json.Unmarshal(httpGet(t, s, "/v1/groups"), &body); err != nil {
		t.Fatal(err)
	}
	out := map[uint32]groupView{}
	for _, g := range body.Groups {
		out[g.ID] = g
	}
	return out
}

// forwardedReads is the reads s sent on to another group's member
// (kvatlas_group_forwarded_reads_total, every group and outcome).
func forwardedReads(t *testing.T, s *testServer) int {
	t.Helper()
	total := 0
	re := regexp.MustCompile(`(?m)^kvatlas_group_forwarded_reads_total\{[^}]*\} (\S+)$`)
	for _, m := range re.FindAllSubmatch(httpGet(t, s, "/metrics"), -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		total += int(v)
	}
	return total
}

// placed says whether every server records every group g >= 2 on replicaReplicas servers,
// hosted where recorded, with a leader among them as its members see it.
func placed(t *testing.T, servers []*testServer) bool {
	for i, s := range servers {
		groups := groupsOf(t, s)
		if len(groups) != replicaGroups {
			return false
		}
		for g := uint32(2); g <= replicaGroups; g++ {
			v := groups[g]
			here := false
			for _, id := range v.Replicas {
				here = here || id == uint64(i+1)
			}
			if len(v.Replicas) != replicaReplicas || v.HostedHere != here || (here && v.LeaderID == 0) {
				return false
			}
		}
	}
	return true
}

// routesEveryGroup says whether c's table names replicaReplicas reachable members for
// every group g >= 2 (each server's address announced and recorded).
func routesEveryGroup(c *Client) bool {
	t := c.router.table.Load()
	if t == nil {
		return false
	}
	for g := uint32(2); g <= replicaGroups; g++ {
		if len(t.members[g]) != replicaReplicas {
			return false
		}
	}
	return true
}

// waitUntil polls ok every 50 ms (it asks servers over HTTP), up to startupBound.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(startupBound); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// A client dialed to one server only reads contexts of the groups that server holds no
// replica of from their members: lookups, a locate, a snapshot and a watch, with the
// server sending none of them on. A client with routing off pays the second hop for each
// lookup (the server counts it) and is refused the snapshot, the locate and the watch.
func TestRoutedClientReadsFromTheGroupsMembers(t *testing.T) {
	servers := startCluster(t, 5, "--groups", fmt.Sprint(replicaGroups),
		"--replicas", fmt.Sprint(replicaReplicas))
	waitUntil(t, "every group's replicas are recorded, each with a leader", func() bool { return placed(t, servers) })
	node := servers[0]
	var unheld []uint32
	for g, v := range groupsOf(t, node) {
		if g >= 2 && !v.HostedHere {
			unheld = append(unheld, g)
		}
	}
	if len(unheld) == 0 {
		t.Fatalf("server 1 holds every group: %v", groupsOf(t, node))
	}
	// One model per group server 1 does not hold, written through server 1.
	var contexts []Context
	for _, g := range unheld {
		for m := 0; ; m++ {
			c := Context{Tenant: "default", Model: fmt.Sprint("m", m), BlockSize: replicaBlock}
			if homeGroup(c, replicaGroups) == g {
				contexts = append(contexts, c)
				break
			}
		}
	}
	routed := dialT(t, Options{Endpoints: []string{node.rpc}})
	plain := dialT(t, Options{Endpoints: []string{node.rpc}, DisableDirectoryRouting: true})
	ctx := testCtx(t)
	tokens := seqTokens(2*replicaBlock, 500)
	for _, c := range contexts {
		ev := Event{Type: EventStored, Context: c, Holder: Holder{BackendID: "e"}, Tier: TierGPU, TokenIDs: tokens}
		if _, err := routed.Ingest(ctx, []Event{ev}); err != nil {
			t.Fatalf("Ingest of %s through server 1: %v", c.Model, err)
		}
	}
	found := func(c *Client, of Context) bool {
		a, err := c.Lookup(ctx, LookupRequest{Context: of, Tokens: tokens})
		return err == nil && a.BlocksFound == 2
	}
	// Every member has applied the writes (the routed client may ask any of them: each
	// server answers from its own replica when it holds one).
	var others []*Client
	for _, s := range servers[1:] {
		others = append(others, dialT(t, Options{Endpoints: []string{s.rpc}, DisableDirectoryRouting: true}))
	}
	waitUntil(t, "the writes are applied and the routing table names every group's members", func() bool {
		if !routesEveryGroup(routed) {
			routed.router.awaitRefresh(ctx)
			return false
		}
		for _, o := range others {
			for _, c := range contexts {
				if !found(o, c) {
					return false
				}
			}
		}
		return true
	})

	before := forwardedReads(t, node)
	for i := 0; i < 3; i++ {
		for _, c := range contexts {
			if !found(routed, c) {
				t.Fatalf("a routed lookup of %s through server 1 did not find the blocks", c.Model)
			}
		}
	}
	if n := forwardedReads(t, node); n != before {
		t.Errorf("server 1 sent %d routed lookups on to members; want none", n-before)
	}
	for _, c := range contexts {
		if !found(plain, c) {
			t.Fatalf("a lookup of %s through server 1 (not routed) did not find the blocks", c.Model)
		}
	}
	if n := forwardedReads(t, node); n != before+len(contexts) {
		t.Errorf("server 1 sent %d of %d lookups not routed on to members", n-before, len(contexts))
	}

	of := contexts[0]
	if s, err := routed.Snapshot(ctx, of); err != nil || len(s.Copies) != 2 {
		t.Errorf("a routed snapshot of %s: %+v, %v", of.Model, s, err)
	}
	if _, err := plain.Snapshot(ctx, of); !errors.Is(err, ErrWrongGroup) {
		t.Errorf("a snapshot of %s through server 1: %v, want wrong_group", of.Model, err)
	}
	key := NewBlockHasher(DefaultHashSeed).SequenceHashes(tokens, replicaBlock)[0]
	if a, err := routed.Locate(ctx, key, &of); err != nil || len(a.Copies) != 1 {
		t.Errorf("a routed locate in %s: %+v, %v", of.Model, a, err)
	}
	if _, err := plain.Locate(ctx, key, &of); !errors.Is(err, ErrWrongGroup) {
		t.Errorf("a locate in %s through server 1: %v, want wrong_group", of.Model, err)
	}
	if _, err := plain.Watch(ctx, WatchOptions{Filter: ContextFilter(of)}); !errors.Is(err, ErrWrongGroup) {
		t.Errorf("a watch of %s through server 1: %v, want wrong_group", of.Model, err)
	}
	w, err := routed.Watch(ctx, WatchOptions{Filter: ContextFilter(of)})
	if err != nil {
		t.Fatalf("a routed watch of %s: %v", of.Model, err)
	}
	defer w.Close()
	more := seqTokens(replicaBlock, 900)
	ev := Event{Type: EventStored, Context: of, Holder: Holder{BackendID: "e"}, Tier: TierGPU, TokenIDs: more}
	if _, err := routed.Ingest(ctx, []Event{ev}); err != nil {
		t.Fatalf("Ingest of %s: %v", of.Model, err)
	}
	if records := nextRecords(t, w); len(records) != 1 || records[0].Op != OpStored {
		t.Errorf("the routed watch of %s saw %+v", of.Model, records)
	}

	seed := DefaultHashSeed
	li, err := NewLocalIndex(ctx, routed, LocalIndexOptions{Contexts: []Context{of}, HashSeed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	if err := li.WaitSynced(ctx); err != nil {
		t.Fatalf("a LocalIndex of %s through server 1: %v", of.Model, err)
	}
	if a, err := li.Lookup(LookupRequest{Context: of, Tokens: tokens}); err != nil || a.BlocksFound != 2 {
		t.Errorf("the LocalIndex's lookup of %s: %+v, %v", of.Model, a, err)
	}
}
