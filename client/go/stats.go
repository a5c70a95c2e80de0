package kvatlas

import (
	"context"
	"encoding/json"
	"fmt"
)

// Stats is the server's statistics, the JSON document of GET /v1/stats (docs/api.md):
// the fields a client commonly needs, typed, and the whole document in Raw.
type Stats struct {
	Revision      uint64          `json:"revision"`
	HashSeed      uint64          `json:"hash_seed"`
	UptimeSeconds float64         `json:"uptime_seconds"`
	Index         IndexStats      `json:"index"`
	Cluster       *ClusterStatus  `json:"cluster"`
	Raw           json.RawMessage `json:"-"`
}

// IndexStats are the block index's counts.
type IndexStats struct {
	Blocks      uint64 `json:"blocks"`
	Entries     uint64 `json:"entries"`
	Contexts    uint64 `json:"contexts"`
	Holders     uint64 `json:"holders"`
	MemoryBytes uint64 `json:"memory_bytes"`
}

// ClusterStatus is the replication state as the answering member sees it (GET
// /v1/cluster, docs/replication.md). Fields the server reports as null are nil.
type ClusterStatus struct {
	ID                uint64          `json:"id"`
	State             string          `json:"state"` // leader, follower, candidate, ...
	Term              uint64          `json:"term"`
	LeaderID          uint64          `json:"leader_id"` // 0 = unknown
	LeaderRPCAddress  *string         `json:"leader_rpc_address"`
	LeaderHTTPAddress *string         `json:"leader_http_address"`
	CommitIndex       uint64          `json:"commit_index"`
	AppliedIndex      uint64          `json:"applied_index"`
	LastIndex         uint64          `json:"last_index"`
	Revision          uint64          `json:"revision"`
	Members           []ClusterMember `json:"members"`
}

// ClusterMember is one member of the configuration. Reachable and LastContactMs are
// filled on the leader for the other members.
type ClusterMember struct {
	ID            uint64  `json:"id"`
	Role          string  `json:"role"`  // voter, learner
	State         *string `json:"state"` // leader, follower, unreachable, ...; nil = unknown
	RPCAddress    *string `json:"rpc_address"`
	HTTPAddress   *string `json:"http_address"`
	RaftAddress   *string `json:"raft_address"`
	AppliedIndex  *uint64 `json:"applied_index"`
	MatchIndex    *uint64 `json:"match_index"`
	LagEntries    *uint64 `json:"lag_entries"`
	Reachable     *bool   `json:"reachable"`
	LastContactMs *uint64 `json:"last_contact_ms"`
}

// StatsJSON returns the statistics document as the server sent it.
func (c *Client) StatsJSON(ctx context.Context) (string, error) {
	p, err := c.read(ctx, typeStats, nil)
	if err != nil {
		return "", err
	}
	return decodeStatsAnswer(p)
}

// Stats returns the server's statistics.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	doc, err := c.StatsJSON(ctx)
	if err != nil {
		return nil, err
	}
	var s Stats
	if err := json.Unmarshal([]byte(doc), &s); err != nil {
		return nil, newError(CodeCorruption, fmt.Sprintf("stats answer: %v", err))
	}
	s.Raw = json.RawMessage(doc)
	return &s, nil
}

// Cluster returns the cluster's status as the answering member sees it (the "cluster"
// section of its statistics).
func (c *Client) Cluster(ctx context.Context) (*ClusterStatus, error) {
	s, err := c.Stats(ctx)
	if err != nil {
		return nil, err
	}
	if s.Cluster == nil {
		return nil, newError(CodeUnavailable, "the server reports no cluster status")
	}
	return s.Cluster, nil
}
