// Commands: the only way state changes. Every write (REST ingest today; ZMQ ingest and the
// raft log later) becomes a CommandBatch applied by the StateMachine, so that a replicated
// log can sit in front of it without touching the index or storage code.
// Commands are plain values; encoding is in command_codec.h (docs/storage.md §Commands).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kvatlas/common/fleet_load.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/types.h"
#include "server/model/registration.h"
#include "server/model/replica_digest.h"

namespace kvatlas::server {

// How the `hashes` of a StoreCommand are to be read.
enum class KeyMode : uint8_t {
  // hashes[i] are block keys (standard rolling sequence hashes) already.
  kSequence = 0,
  // hashes[i] are standard *local* block hashes (XXH3 of one block's tokens); the applier
  // chains them from `parent` to get block keys. Used when the publisher sent token_ids:
  // the parent's block key is only known to the state machine (through the alias of the
  // parent's engine hash), so chaining has to happen at apply time to be deterministic.
  kLocal = 1,
  // hashes[i] are engine hashes of blocks this holder stored before (in any tier): each is
  // resolved through the holder's alias (or as a block key) and the block gets a copy in
  // this command's tier. Hashes that resolve to nothing are skipped: without tokens their
  // block key is unknown. Used for engine offload events (BlockStored without token_ids).
  kAlias = 2,
};

// A holder stores consecutive blocks of one chain in one tier.
struct StoreCommand {
  ContextKey context;
  HolderKey holder;
  Tier tier = Tier::kGpu;
  KeyMode mode = KeyMode::kSequence;
  // The block before hashes[0]: a block key, or an engine hash this holder published
  // (resolved through its alias). nullopt = hashes[0] is at the root (depth 0) or unknown.
  std::optional<uint64_t> parent;
  // Depth (position from block 0) of hashes[0]; for kSequence without it, depth is derived
  // from the parent block's depth + 1 when the parent is indexed, else 0.
  std::optional<uint32_t> base_depth;
  std::vector<uint64_t> hashes;
  // Empty, or one engine hash per block: the publisher's own hash, kept as an alias so that
  // removals naming it find the block. Equal to the key when the publisher is standard.
  std::vector<uint64_t> engine_hashes;
  // Empty, or one location descriptor per block (storage tiers: URI, object key, path+off).
  std::vector<std::string> locations;
  // false: each block is a new copy — one more reference for the holder in `tier` (what
  // an engine means when it caches a new physical block; a block stored twice needs two
  // removes). true: a report that the holder holds each block — one reference if it had
  // none, no change if it had some (vLLM's full report mode re-sends the blocks a request
  // reused; counting them as copies would keep them past their one eviction).
  // docs/engine-events.md §Report modes.
  bool report = false;

  friend bool operator==(const StoreCommand&, const StoreCommand&) = default;
};

// A holder evicted blocks. Each hash is an engine hash (resolved through the holder's alias)
// or a block key. tier nullopt = every tier of this holder.
struct RemoveCommand {
  ContextKey context;
  HolderKey holder;
  std::optional<Tier> tier;
  std::vector<uint64_t> hashes;

  friend bool operator==(const RemoveCommand&, const RemoveCommand&) = default;
};

// Drops a holder's entries, optionally only in one context and/or one tier.
struct ClearCommand {
  HolderKey holder;
  std::optional<ContextKey> context;
  std::optional<Tier> tier;
  // A holder-wide command's fan-out id (a clear without context; an unregistration): the
  // one nonzero id its sender gave every group's part of it (SplitByGroup), which each
  // group records for the holder (StateMachine::HolderWideIds; docs/scaling.md §Moves).
  // 0: none (a single group, or a clear in one context).
  uint64_t fanout = 0;

  friend bool operator==(const ClearCommand&, const ClearCommand&) = default;
};

// Follow a publisher (replacing the registration with the same Key()).
struct RegisterCommand {
  Registration registration;

  friend bool operator==(const RegisterCommand&, const RegisterCommand&) = default;
};

// Stop following the publisher registered under Key() = "<instance>|<tenant>|<rank>": drops
// the registration, its stream position and every entry of its holder {instance, rank}
// (an unfollowed engine's cache can no longer be kept in sync). Unknown keys change nothing.
struct UnregisterCommand {
  std::string instance_id;
  std::string tenant_id;
  uint32_t dp_rank = 0;
  uint64_t fanout = 0;  // as ClearCommand::fanout

  friend bool operator==(const UnregisterCommand&, const UnregisterCommand&) = default;
};

// A cluster member's client-facing addresses (registration.h ServerAddresses), replicated so
// that every server can name the leader's REST and binary-protocol endpoints (GET
// /v1/cluster, follower forwarding, not-leader answers). Replaces what was recorded for
// `server_id`. Submitted by the leader, for itself or on a member's behalf (POST
// /v1/cluster/announce); addresses are "HOST:PORT".
struct AnnounceCommand {
  uint64_t server_id = 0;
  std::string http_address;
  std::string rpc_address;

  friend bool operator==(const AnnounceCommand&, const AnnounceCommand&) = default;
};

// Drops the recorded addresses of `server_id` (a server removed from the cluster). Unknown
// ids change nothing.
struct ForgetServerCommand {
  uint64_t server_id = 0;

  friend bool operator==(const ForgetServerCommand&, const ForgetServerCommand&) = default;
};

// The leader found `holder` silent for its lease TTL (docs/leases.md): drops every entry of
// the holder, in every context and tier (change feed op "holder-expired"). Skipped, on every
// replica alike, when an event naming the holder (a Store, Remove or Clear command) was
// applied after `last_activity_revision` — the holder came back while the expiry was in
// flight — or when the holder is a registered publisher's {instance_id, dp_rank} (exempt).
// `last_activity_revision` is the revision of the holder's last event as the leader saw it,
// or, when the leader saw none since it loaded its state, the revision it loaded at.
struct ExpireHolderCommand {
  HolderKey holder;
  Revision last_activity_revision = 0;

  friend bool operator==(const ExpireHolderCommand&, const ExpireHolderCommand&) = default;
};

// A replica audit point (docs/replication.md §Replica audits), proposed by the leader
// every audit_interval_ms: changes no state. Every replica that applies it records its
// replica digest there, and compares the digest it recorded at the previous audit point,
// `checked_index` (0: none to check, e.g. the first audit of a restarted leader), with the
// leader's there, `checked_digest`: equal, the replica's state is the leader's; different,
// it diverged and stops serving reads. `digest_scheme` (>= 1) is the leader's
// kReplicaDigestScheme, the elements its digests are made of: a replica of another scheme
// compares nothing (its audit is unchecked), since equal states give it other digests.
struct AuditCommand {
  Revision checked_index = 0;
  uint64_t checked_digest = 0;
  uint32_t digest_scheme = kReplicaDigestScheme;  // batch version 7; decoded from 6 as 1

  friend bool operator==(const AuditCommand&, const AuditCommand&) = default;
};

// A router replica's in-flight load (docs/routing.md §Shared load): replaces the previous
// report of `report.router_id` in every replica's FleetLoadTable, counting until
// accepted_at_ms + report.ttl_ms (ms since the Unix epoch, stamped by the leader that
// accepted it; a replica compares with its own clock, so a log replayed later counts no
// stale report). Leased state: kept in memory only, never in storage or snapshots, and
// not part of the replica digest.
struct LoadReportCommand {
  LoadReport report;
  uint64_t accepted_at_ms = 0;

  friend bool operator==(const LoadReportCommand&, const LoadReportCommand&) = default;
};

// A route sent a request to `holder`, which publishes no KV events (docs/routing.md
// §Approximate mode): its blocks `hashes` (block keys, from block 0) in `context` are
// predicted there in every replica's PredictedTable, from accepted_at_ms (ms since the Unix
// epoch, stamped by the leader) until accepted_at_ms + ttl_ms on each replica's clock, so a
// log replayed later brings back no stale prediction. Leased state: kept in memory only,
// never in storage or snapshots, and not part of the replica digest.
struct PredictCommand {
  ContextKey context;
  HolderKey holder;
  uint32_t ttl_ms = 0;
  uint64_t accepted_at_ms = 0;
  std::vector<uint64_t> hashes;

  friend bool operator==(const PredictCommand&, const PredictCommand&) = default;
};

// Marks a cluster member as draining, or no longer (docs/operations.md §Draining a server):
// a draining server is nobody's preferred leader, so every group's leadership moves off it
// (server/service/group_service.h PreferredLeader) while it keeps serving as a follower.
// Sets the flag of the member's recorded addresses (ServerAddresses::draining); a server
// with no recorded addresses changes nothing. An AnnounceCommand, which a server sends
// once as it starts, replaces the record and so ends its drain.
struct DrainCommand {
  uint64_t server_id = 0;
  bool draining = false;

  friend bool operator==(const DrainCommand&, const DrainCommand&) = default;
};

// Places a context that was never placed wholly on `group` in the placement directory
// (PlacementDirectory::Assign; docs/scaling.md §The directory). Submitted to group 1 only,
// whose state holds the directory. A group the directory does not list yet is added first
// (every server hosts it: no members named). A context placed already, or a group that does
// not take new contexts, changes nothing: the submitter reads the directory to learn where
// the context lives.
struct PlaceContextCommand {
  ContextKey context;
  GroupId group = kNoGroup;

  friend bool operator==(const PlaceContextCommand&, const PlaceContextCommand&) = default;
};

// Whether the directory may place new contexts on `group` (the group's snapshot nears its
// bound: docs/scaling.md §Policy). Group 1 only. A group the directory does not list yet is
// added first; a value equal to the recorded one changes nothing (no new epoch).
struct SetGroupAcceptingCommand {
  GroupId group = kNoGroup;
  bool accepting = true;

  friend bool operator==(const SetGroupAcceptingCommand&,
                         const SetGroupAcceptingCommand&) = default;
};

// Applied in a context's home group before the directory places it elsewhere: the group
// records that the context is not its own (Registry::disowned, at this revision and with
// `epoch`, the directory epoch the placement will have at least), and from then on refuses
// — as a whole, recording no stream position — every batch that names it, so a server
// routing with an older directory cannot write it here. Changes nothing when the group
// holds the context (Index::HasContext: it stays here) or disowned it already.
struct DisownContextCommand {
  ContextKey context;
  Epoch epoch = 0;

  friend bool operator==(const DisownContextCommand&, const DisownContextCommand&) = default;
};

// Records the servers that hold a group's replicas in the placement directory
// (GroupDescriptor::members; docs/scaling.md §Replicas on some servers): `members`, server
// ids ascending, 1..kMaxGroupMembers of them, are voters of the group's raft configuration
// that its leader keeps. Group 1 only. A group the directory does not list yet is added
// first (taking new contexts); members equal to the recorded ones change nothing (no new
// epoch). Servers answer for a group from their own replica only while its record names
// them, so the leader records a member it is about to remove first without it.
struct SetGroupMembersCommand {
  GroupId group = kNoGroup;
  std::vector<uint64_t> members;

  friend bool operator==(const SetGroupMembersCommand&, const SetGroupMembersCommand&) = default;
};

// One copy of a block as a move carries it (ReplaceCopiesCommand): what Index::Locate
// reports of it, without the context and the block's depth.
struct HeldCopy {
  HolderKey holder;
  Tier tier = Tier::kGpu;
  uint32_t refcount = 1;  // >= 1
  uint64_t engine_hash = 0;
  std::string location;  // empty: none

  friend bool operator==(const HeldCopy&, const HeldCopy&) = default;
};

// A block and every copy it has in the group a move reads it from; no copies: it has none
// there (it is gone).
struct MovedBlock {
  uint64_t key = 0;
  uint32_t depth = 0;
  std::vector<HeldCopy> copies;
  // The block went away there and was made again: it is made anew here too (all its copies
  // removed first), so it takes the same place in the context's eviction order.
  bool anew = false;

  friend bool operator==(const MovedBlock&, const MovedBlock&) = default;
};

// Makes the copies of each listed block of `context` here exactly the listed ones — their
// holders, tiers, refcounts, engine hashes (the holders' aliases) and locations —, in list
// order: the catch-up step of a move (docs/scaling.md §Moves), which sends the blocks of a
// context that changed in the group it leaves since the copy, in batches with the move's
// writer position, so that a batch sent twice is applied once (applied twice, a block made
// anew would be made anew again). Carried out as the Stores and Removes that turn what this group
// holds into what is listed (Index::Apply): a block that keeps a copy keeps its place in the
// context's eviction order unless it is made anew, and a new one takes the next place. A holder and
// tier listed twice for one block: the first is taken.
struct ReplaceCopiesCommand {
  ContextKey context;
  std::vector<MovedBlock> blocks;

  friend bool operator==(const ReplaceCopiesCommand&, const ReplaceCopiesCommand&) = default;
};

// Step 4 of a move (docs/scaling.md §Moves), in the group the context leaves: as
// DisownContextCommand, also for a context the group holds — from this revision on the group
// refuses every batch that names the context — and the group keeps holder-wide commands (a
// holder's clear in every context, an unregistration, a lease expiry) off its copies, so
// that they stay as they were here at the fence. A context disowned already changes nothing.
struct FenceContextCommand {
  ContextKey context;
  Epoch epoch = 0;

  friend bool operator==(const FenceContextCommand&, const FenceContextCommand&) = default;
};

// Step 1 of a move, in the group the context goes to: the group records that it imports
// the context (Registry::importing, at this revision) and keeps holder-wide commands off its
// copies, which come from the group it leaves only (the copy, then ReplaceCopiesCommand).
// A context imported already, or one the group disowned, changes nothing.
struct ImportContextCommand {
  ContextKey context;

  friend bool operator==(const ImportContextCommand&, const ImportContextCommand&) = default;
};

// Deletes every copy of `context` here (Index::DropContext; change feed op "cleared") and
// ends its import, if any: a move's last step in the group the context left (which keeps
// refusing its writes), or an abandoned move's undoing in the group it was going to.
struct DropContextCommand {
  ContextKey context;

  friend bool operator==(const DropContextCommand&, const DropContextCommand&) = default;
};

// Store/Remove/Clear/ExpireHolder/ReplaceCopies change the Index; Register/Unregister/
// Announce/ForgetServer/Drain/PlaceContext/SetGroupAccepting/DisownContext/SetGroupMembers/
// FenceContext/ImportContext change the Registry; DropContext both; Audit changes nothing;
// LoadReport changes the FleetLoadTable; Predict changes the PredictedTable. The order of the
// alternatives is the command-batch wire tag minus one (docs/storage.md).
using Command = std::variant<StoreCommand, RemoveCommand, ClearCommand, RegisterCommand,
                             UnregisterCommand, AnnounceCommand, ForgetServerCommand,
                             ExpireHolderCommand, AuditCommand, LoadReportCommand, PredictCommand,
                             DrainCommand, PlaceContextCommand, SetGroupAcceptingCommand,
                             DisownContextCommand, SetGroupMembersCommand, ReplaceCopiesCommand,
                             FenceContextCommand, ImportContextCommand, DropContextCommand>;

// What one log entry carries: commands applied atomically, in order, at one revision.
struct CommandBatch {
  std::vector<Command> commands;
  // Set for batches that came from a publisher's stream: the batch is applied only if it
  // is new for that stream (registration.h StreamPosition).
  std::optional<StreamPosition> position;

  friend bool operator==(const CommandBatch&, const CommandBatch&) = default;
};

// The one context a command writes or predicts in (a store's, a removal's, a context's
// clear, a prediction's, a replacement's); null for a command naming none (a holder's clear in
// every context, the registry's commands). What placement routes and refuses by.
inline const ContextKey* NamedContext(const Command& command) {
  if (const auto* store = std::get_if<StoreCommand>(&command)) return &store->context;
  if (const auto* remove = std::get_if<RemoveCommand>(&command)) return &remove->context;
  if (const auto* clear = std::get_if<ClearCommand>(&command)) {
    return clear->context ? &*clear->context : nullptr;
  }
  if (const auto* predict = std::get_if<PredictCommand>(&command)) return &predict->context;
  if (const auto* replace = std::get_if<ReplaceCopiesCommand>(&command)) return &replace->context;
  return nullptr;
}

}  // namespace kvatlas::server
