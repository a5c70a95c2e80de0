// The raft cluster as clients see it: who leads and where, the members with their announced
// addresses, and membership changes (add, remove, transfer leadership, announce a member's
// client-facing addresses). A change returns once raft has committed it (up to
// options.apply_timeout); on a follower it fails with kNotLeader. Safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "server/model/command.h"
#include "server/model/registration.h"
#include "server/service/services.h"

namespace kvatlas::server {

// The leader as this server knows it: raft's view of who leads, and the replicated
// addresses it announced. id 0 = unknown; an address is nullopt until announced.
struct LeaderAddresses {
  uint64_t id = 0;
  std::optional<std::string> http_address;
  std::optional<std::string> rpc_address;
};
[[nodiscard]] LeaderAddresses FindLeader(const Services& services);
// The servers the directory records as holding `group`'s replicas (RecordedMembers), this
// server left out, each with its announced addresses; a member that has not announced its
// HTTP address is left out too, and `why` (when not null) says so — or, when none is
// recorded, that none is.
[[nodiscard]] std::vector<LeaderAddresses> AnnouncedMembers(const Services& services, GroupId group,
                                                            std::string* why = nullptr);
// The leader to name in a not-leader answer: FindLeader, but unknown (id 0) when that is this
// server. A request refused with kNotLeader here knows better than the status, which names
// this server for up to one refresh (50 ms) after it lost leadership (a resumed old leader).
[[nodiscard]] LeaderAddresses FindLeaderForRedirect(const Services& services);

// kUnavailable when this server runs without replication (no cluster to show or change).
[[nodiscard]] Status RequireCluster(const Services& services);

// Raft's status and every member's known addresses (this server's own included before it
// has announced them), with the applied revision.
struct ClusterView {
  ClusterStatus status;
  std::map<uint64_t, ServerAddresses> addresses;
  Revision revision = 0;
  AuditStatus audit;  // this server's replica audits (replica_audit_service.h)
};
[[nodiscard]] Result<ClusterView> ViewCluster(const Services& services);
// The document of GET /v1/cluster (docs/api.md §Cluster), also the "cluster" section of
// GET /v1/stats and the binary kStats answer.
[[nodiscard]] nlohmann::json ClusterViewJson(const ClusterView& view);

// Adds server `id` as a voter (a spare first, promoted once caught up). When the promotion
// fails and the server never answered, the spare is removed again and the error says so
// (kUnavailable); one that answered stays a spare, and adding it again promotes it. Waits
// up to apply_timeout + 10 s (libraft's promotion gives up after 5 s without progress).
[[nodiscard]] Status AddMember(const Services& services, uint64_t id, std::string raft_address);
// Removes the member, then drops its announced addresses (a replicated command).
[[nodiscard]] Status RemoveMember(const Services& services, uint64_t id);
// id 0: any up-to-date voter. Returns the leader after the transfer as this server knows it
// within 2 s of the transfer (0 when it does not know yet).
[[nodiscard]] Result<uint64_t> TransferLeadership(const Services& services, uint64_t id);

// Marks member `id` as draining, or no longer (DrainCommand; docs/operations.md §Draining a
// server): a draining server leads no group once the mirrors have handed them over. Returns
// the revision that records it (the applied one when it already is). kNotFound when `id`
// is not a member, kFailedPrecondition when it has not announced its addresses (the drain
// is kept with them) or, to drain, when the cluster has one server; kNotLeader on a
// follower.
[[nodiscard]] Result<Revision> SetDraining(const Services& services, uint64_t id, bool draining);

// Whether server `id` is in raft's current configuration (false without replication).
[[nodiscard]] bool IsMember(const Services& services, uint64_t id);

// A call only the servers of the cluster make to each other (`what`, e.g. "POST
// /v1/cluster/announce"): kUnauthenticated unless `announcer` (the verified sender of a
// signed internal call, forwarding.h) is set; the refusal is counted and logged, naming
// `remote`.
[[nodiscard]] Status RequireInternalCall(const Services& services,
                                         std::optional<uint64_t> announcer, std::string_view remote,
                                         std::string_view what);

// Submits a round of approximate-mode predictions that follower `sender` forwarded
// (PredictCommands, docs/routing.md §Approximate mode), with this server's TTL and clock,
// without waiting for them to apply. kNotLeader on a follower; kFailedPrecondition when
// this server records no predictions; kResourceExhausted when the applier takes no more.
[[nodiscard]] Status SubmitForwardedPredictions(const Services& services, uint64_t sender,
                                                CommandBatch batch);

// The group count and replication factor a server runs. A cluster's servers must agree:
// group 1's leader places every group's replicas by its own (docs/scaling.md §Replicas on
// some servers), and every server routes by the same count.
struct ClusterShape {
  uint64_t groups = 1;
  uint64_t replicas = 0;
  friend bool operator==(const ClusterShape&, const ClusterShape&) = default;
};
[[nodiscard]] ClusterShape ShapeOf(const Services& services);
// Ok when server `id`'s `shape` is this server's; else kFailedPrecondition naming both (the
// only refusal of an announcement with that code, so the announcer tells it apart).
[[nodiscard]] Status CheckClusterShape(const Services& services, uint64_t id,
                                       const ClusterShape& shape);

// Records member `id`'s client-facing addresses, as announced by `announcer` (servers
// announce themselves to the leader at start). A member announces only its own:
// kPermissionDenied (counted and logged, naming `remote`) when `announcer` is another
// server. kNotFound when `id` is not a member. kFailedPrecondition when `shape`, the
// announcer's (absent from servers of builds before it was sent), is not this server's:
// nothing is recorded, so the announcer is not forwarded to. Addresses already recorded as
// these are answered with the current revision, without a log entry.
[[nodiscard]] Result<Revision> AnnounceMember(const Services& services, uint64_t announcer,
                                              std::string_view remote, uint64_t id,
                                              ServerAddresses addresses,
                                              std::optional<ClusterShape> shape);

}  // namespace kvatlas::server
