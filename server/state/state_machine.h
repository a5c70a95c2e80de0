// StateMachine: the one place where commands change state. It owns the Index and applies
// CommandBatches to it at consecutive revisions, writing the resulting mutations to Storage
// atomically with the revision. The replicated log feeds it (without one, the Applier).
//
// Thread-safety: the writing side (Apply, ApplyEntry, Recover, CaptureState, Restore) from
// one thread at a time, never concurrently (under raft: entries on the raft-apply thread,
// captures and restores on the raft loop once raft-apply is idle); Read() from any thread.
// Readers see whole applied groups (log entries) only, at their revision: a shared_mutex
// around the index, held by the writing side for a group's whole in-memory apply, which
// publishes the revision before releasing it. So a read's revision is exact (docs/api.md
// §Conventions), at the cost of lookups waiting up to one group's apply. The index's hash
// tables grow a few slots per insert (flat_table.h), so no batch rehashes millions of slots
// at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/internal/predicted_table.h"
#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "server/index/index.h"
#include "server/index/spare_maker.h"
#include "server/model/command.h"
#include "server/state/recovery_progress.h"
#include "server/state/replica_audit.h"
#include "server/state/replicated_log.h"
#include "server/state/stream_tally.h"
#include "server/storage/storage.h"

namespace kvatlas::server {

struct StateMachineOptions {
  IndexOptions index;
  uint64_t hash_seed = kDefaultHashSeed;
  // The PredictedTable's cap (docs/routing.md §Approximate mode); 0 keeps no predictions.
  size_t predicted_max_entries = kDefaultMaxPredictedEntries;
};

// Counts of what applying did, for metrics.
struct ApplyCounters {
  uint64_t stored_commands = 0;
  uint64_t removed_commands = 0;
  uint64_t cleared_commands = 0;
  uint64_t entries_added = 0;
  uint64_t entries_removed = 0;
  uint64_t entries_evicted = 0;
  // Stream batches skipped because their sequence was already applied.
  uint64_t duplicate_batches = 0;
  // Stream batches skipped because their stream's registration is gone.
  uint64_t orphan_batches = 0;
  // Batches refused as a whole because they name a context this group disowned
  // (DisownContextCommand): applied nothing, recorded no stream position.
  uint64_t wrong_group_batches = 0;
  // ExpireHolderCommands that dropped a holder's entries, and those skipped by the race
  // guard or the registered-publisher exemption (docs/leases.md).
  uint64_t holders_expired = 0;
  uint64_t expiries_skipped = 0;
  // The index's write lock, held by the applying thread once per applied group (log
  // entry): lookups wait for it. A long hold is a large group, or that thread being
  // preempted while holding it (docs/architecture.md §Threading model).
  uint64_t write_lock_holds = 0;
  uint64_t write_lock_holds_over_1ms = 0;
  uint64_t write_lock_held_ns = 0;
  uint64_t write_lock_hold_max_ns = 0;  // since start
  // Every batch's StreamTally added up (stream_tally.h), positioned or not.
  StreamTally tally;
};

// The last applied event (Store, Remove or Clear command) naming one holder: its revision
// and when this server applied it (steady clock). In memory only: after Recover/Restore the
// map starts empty (StateMachine::activity_since()). The revision is the same on every
// replica; the time is this server's and serves only its own lease checks.
struct HolderActivity {
  Revision revision = 0;
  std::chrono::steady_clock::time_point applied_at;
};
using HolderActivityMap = std::unordered_map<HolderKey, HolderActivity, HolderKeyHash>;

// Told, on the writing side's thread (class StateMachine), about every applied group and
// every wholesale replacement of the state: the change feed (server/feed/). Calls must be
// quick and must not call back into the StateMachine.
class ApplyObserver {
 public:
  virtual ~ApplyObserver() = default;
  // After a group is applied and written to storage: what it changed. `revision` is the
  // group's last revision (with a replicated log, the one revision of all its batches).
  virtual void OnApplied(Revision revision, const MutationList& mutations) = 0;
  // After Recover() and after Restore() replaced the state: `index` is the whole new state
  // at `revision`, readable during the call only (under the state's write lock).
  virtual void OnReset(Revision revision, const Index& index) = 0;
};

class StateMachine final : public LogStateMachine {
 public:
  // `storage` may be null: an in-memory state machine (tests, benchmarks).
  StateMachine(StateMachineOptions options, Storage* storage);

  // Checks the hash seed and rebuilds the index from storage. Call once, before Apply.
  [[nodiscard]] Status Recover();

  // Applies `batches` in order at revisions applied_revision()+1 … +n and writes them to
  // storage in one atomic write. Returns the revision of the last batch. A storage failure
  // is returned as kIOError; the memory index then is ahead of disk, so the caller must stop
  // serving writes (the server exits; restart rebuilds from disk).
  [[nodiscard]] Result<Revision> Apply(std::span<const CommandBatch* const> batches);

  // LogStateMachine: decodes a log entry (command_codec.h EncodeLogEntry) and applies all
  // of its batches at revision `index`; entries at or below applied_revision() are skipped
  // (a restarted server replays the log from its last snapshot). kCorruption for an entry
  // that does not decode, kIOError when storage fails: either way the server must stop.
  [[nodiscard]] Status ApplyEntry(uint64_t index, std::string_view entry) override;
  // As ApplyEntry, for already decoded batches.
  [[nodiscard]] Status ApplyAt(Revision index, std::span<const CommandBatch* const> batches);
  // A storage capture (Storage::CaptureAll); writing side only (class comment).
  [[nodiscard]] Result<std::unique_ptr<Capture>> CaptureState() override;
  // Replaces storage with the snapshot and rebuilds the index and registry from it, unless
  // the state is already at or past the snapshot's applied index. Writing side only.
  [[nodiscard]] Status Restore(std::string_view snapshot) override;

  // Empties the state and its storage (Storage::Clear): applied revision 0, as a server
  // that never held the group, for a replica this server no longer holds (docs/scaling.md
  // §Dropping a copy). The observer is reset to the empty state (its watchers are cut).
  // Writing side only, with nothing applying (its raft log stopped: RaftLog::Reopen).
  [[nodiscard]] Status DropReplica();

  // True once a storage write failed: the memory state is ahead of disk, so the server
  // must stop taking writes (its restart rebuilds from disk and replays the log).
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  Revision applied_revision() const { return applied_.load(std::memory_order_acquire); }
  // Whether the state holds anything: a context, a holder, a registration, a stream position
  // or a disowned context (the directory and the members' addresses aside). Any thread
  // (read lock); O(contexts + holders).
  bool HoldsAnything() const;
  uint64_t hash_seed() const { return options_.hash_seed; }
  const BlockHasher& hasher() const { return hasher_; }

  // Runs f(const Index&, Revision) under the read lock and returns its result. The index
  // holds exactly the batches at or below the revision: every one of them, none after
  // (ApplyBatches applies a group under one hold of the write lock).
  template <typename F>
  auto Read(F&& f) const {
    std::shared_lock lock(mu_);
    return f(static_cast<const Index&>(index_), applied_.load(std::memory_order_relaxed));
  }

  // Runs f(const Registry&, Revision) under the read lock and returns its result.
  template <typename F>
  auto ReadRegistry(F&& f) const {
    std::shared_lock lock(mu_);
    return f(static_cast<const Registry&>(registry_), applied_.load(std::memory_order_relaxed));
  }

  // Runs f(const Index&, const Registry&, const HolderActivityMap&, Revision applied,
  // Revision activity_since) under the read lock and returns its result: what the lease
  // checks (lease_tracker.h) read together. The activity map holds every holder named by an
  // event applied after `activity_since` (the revision the state was recovered or restored
  // at); events at or before it are unknown here.
  template <typename F>
  auto ReadActivity(F&& f) const {
    std::shared_lock lock(mu_);
    return f(static_cast<const Index&>(index_), static_cast<const Registry&>(registry_),
             static_cast<const HolderActivityMap&>(activity_),
             applied_.load(std::memory_order_relaxed), activity_since_);
  }

  // The announced addresses of every cluster member (AnnounceCommand), a copy taken under
  // the read lock. Any thread.
  std::map<uint64_t, ServerAddresses> ServerAddressMap() const;
  // One member's announced addresses; nullopt when it has announced none. Any thread.
  std::optional<ServerAddresses> AddressesOf(uint64_t server_id) const;
  // The members marked draining (DrainCommand), ascending. Any thread.
  std::vector<uint64_t> DrainingServers() const;

  // The placement directory (Registry::directory; group 1's, empty elsewhere) as last
  // applied: an immutable copy replaced on every change, so routing reads it without the
  // state's lock. Any thread.
  std::shared_ptr<const PlacementDirectory> directory() const;
  // Whether this group disowned `context` (DisownContextCommand), and when. Any thread.
  std::optional<DisownedContext> Disowned(const ContextKey& context) const;
  // Whether this group disowned any context: the writes' path checks it before asking
  // Disowned. Any thread, lock-free.
  bool has_disowned() const { return has_disowned_.load(std::memory_order_acquire); }
  // The fan-out ids of the last kHolderWideKept holder-wide commands applied for `holder`
  // (Registry::holder_wide), oldest first. Any thread.
  std::vector<uint64_t> HolderWideIds(const HolderKey& holder) const;

  // Called on the applying thread after every Apply that changed a registration (and not
  // at Recover). It must be quick and must not call back into the StateMachine: the ZMQ
  // ingest uses it to wake up and re-read the registry. Set before the first Apply.
  void SetRegistryListener(std::function<void()> listener) {
    registry_listener_ = std::move(listener);
  }
  // Set before Recover(); null = none. `observer` must outlive the StateMachine's use.
  void SetApplyObserver(ApplyObserver* observer) { observer_ = observer; }
  // While set (a server starting), Recover and Restore count the entries they load from
  // storage into `progress` and, once it asks them to stop, return kCancelled; the state
  // in memory is then partial and the StateMachine must not be used any more, while
  // storage is as it was (Restore: its replacement is atomic, so the snapshot's state).
  // Null = neither. Any thread; `progress` must outlive its use.
  void SetRecoveryProgress(RecoveryProgress* progress) {
    progress_.store(progress, std::memory_order_release);
  }

  ApplyCounters counters() const;

  // The replica digest of the whole replicated state (server/model/replica_digest.h): the
  // index's and the registry's, kept on every change. Any thread (read lock). O(1).
  uint64_t ReplicaDigest() const;
  // The same recomputed from the state: O(the state), under the read lock (tests).
  uint64_t RecomputeReplicaDigest() const;
  // What the AuditCommands applied so far found (replica_audit.h). Any thread.
  AuditStatus audit() const;
  // True while the last audit found this replica's state different from the leader's:
  // it must serve no reads (docs/replication.md §Replica audits). Any thread, lock-free.
  bool diverged() const { return diverged_.load(std::memory_order_acquire); }

  // The live load reports of the router fleet (LoadReportCommand), summed for routes. Any
  // thread (the table has its own lock).
  const FleetLoadTable& fleet_load() const { return fleet_load_; }
  // The blocks predicted on instances that publish no events (PredictCommand), for routes
  // and Conductor queries. Any thread (the table has its own lock).
  const PredictedTable& predicted() const { return predicted_; }
  // Records a prediction on this replica only: one the leader could not be given. Returns
  // the entries recorded; their keys are appended to `recorded` when it is set.
  size_t PredictLocally(const PredictCommand& c, std::vector<BlockKey>* recorded = nullptr);

  // What the stores and removes of stream `stream` (a StreamPosition::stream key) found
  // since this server started; zeros for a stream never seen. Any thread (read lock).
  StreamTally TallyOf(std::string_view stream) const;

  // Streams tallied apart; past it new streams count only in counters().tally.
  static constexpr size_t kMaxTalliedStreams = 4096;

 private:
  StateMachineOptions options_;
  Storage* storage_;
  BlockHasher hasher_;
  mutable std::shared_mutex mu_;
  // Applies `batches` at revisions next(1), next(2), ... under one hold of the write lock,
  // publishes the last as applied_revision() before releasing it, then writes them to
  // storage; returns the last revision.
  template <typename NextRevision>
  Result<Revision> ApplyBatches(std::span<const CommandBatch* const> batches, NextRevision next);
  // Applies one batch's commands (and its stream position) under the write lock, at
  // `revision`; `now` stamps the holder activity it records. Returns whether a
  // registration changed.
  void CountWriteLockHold(std::chrono::steady_clock::duration held);
  bool ApplyBatch(const CommandBatch& batch, Revision revision,
                  std::chrono::steady_clock::time_point now);
  // Adds a batch's tally to `stream`'s (none for "") and to the total. Under the write lock.
  void AddTally(std::string_view stream, const StreamTally& tally);
  // Notes an event naming `holder`; `last` is the holder noted last in the same batch
  // (nullptr at first), so a batch of one holder's events costs one map update.
  void NoteActivity(const HolderKey& holder, const HolderKey** last, Revision revision,
                    std::chrono::steady_clock::time_point now);
  // A run of ExpireHolderCommands (the alternatives of `expiries`), each checked by the race
  // guard, the due ones applied together (Index::ExpireHolders).
  void ApplyExpiries(std::span<const Command> expiries);
  void ApplyRegister(const RegisterCommand& c);
  void ApplyUnregister(const UnregisterCommand& c);
  void ApplyAnnounce(const AnnounceCommand& c);
  void ApplyForgetServer(const ForgetServerCommand& c);
  void ApplyDrain(const DrainCommand& c);
  // The directory's and disowned contexts' commands (state_machine_placement.cc). mu_ held.
  void ApplyPlaceContext(const PlaceContextCommand& c);
  void ApplySetGroupAccepting(const SetGroupAcceptingCommand& c);
  void ApplyDisownContext(const DisownContextCommand& c, Revision revision);
  void ApplySetGroupMembers(const SetGroupMembersCommand& c);
  // A move's commands in this group (state_machine_moves.cc). mu_ held.
  void ApplyFenceContext(const FenceContextCommand& c, Revision revision);
  void ApplyImportContext(const ImportContextCommand& c, Revision revision);
  void ApplyDropContext(const DropContextCommand& c);
  // The contexts holder-wide commands keep off: those this group imports and those it
  // disowned (fenced ones; the others it holds no copies of). mu_ held.
  std::vector<ContextKey> SparedContexts() const;
  // A holder-wide clear (every context; `tier` or all), kept off SparedContexts(). mu_ held.
  void ClearHolder(const HolderKey& holder, std::optional<Tier> tier);
  // Records a disowned context (DisownContextCommand, FenceContextCommand). mu_ held.
  void AddDisowned(const ContextKey& context, const DisownedContext& disowned);
  // Records a holder-wide command's fan-out id (0: none, nothing recorded; one recorded
  // already stays where it is) for `holder`, forgetting the oldest past kHolderWideKept.
  // mu_ held.
  void NoteHolderWide(const HolderKey& holder, uint64_t fanout);
  // Whether `batch` names a context of registry_.disowned (a store, remove, context clear
  // or prediction): then it is refused as a whole. mu_ held.
  bool NamesDisownedContext(const CommandBatch& batch) const;
  // Replaces the directory's element of the digest (`before`: the directory before a change),
  // adds its record to scratch_ and publishes a copy for directory(). mu_ held.
  void DirectoryChanged(const PlacementDirectory& before);
  // Publishes a copy of registry_.directory for directory(), and has_disowned(). mu_ held (or
  // no reader yet).
  void PublishDirectory();
  // Erases the position of stream `key` and of every placed stream of it
  // (PlacedStreamKey(key, ...); none for a placed key itself: the context's encoding is
  // self-delimiting), with their digest elements and delete mutations. mu_ held.
  void ErasePositionsOf(std::string_view key);
  void ApplyAudit(const AuditCommand& c, Revision revision);
  // Records `c` in predicted_ and, with an observer, adds what it recorded to scratch_ as a
  // kPredicted mutation (the feed's predicted record). mu_ held.
  void ApplyPredict(const PredictCommand& c);
  // registry_digest_ += sign × element, when the digest is kept.
  void DigestRegistry(uint64_t element, int sign);

  Index index_;
  // Makes the index's growth spares off this thread (spare_maker.h); ApplyBatches asks and
  // installs.
  SpareMaker spares_;
  Registry registry_;
  std::function<void()> registry_listener_;
  ApplyObserver* observer_ = nullptr;
  std::atomic<RecoveryProgress*> progress_{nullptr};
  // Loads storage's records into index_ (empty), through progress_ when set.
  Status LoadIndex();
  std::atomic<Revision> applied_{0};
  std::atomic<bool> failed_{false};
  MutationList scratch_;
  // Holder activity since activity_since_ (guarded by mu_). Deterministic apart from the
  // times: every replica that applied the same entries since the same point has the same
  // revisions, which is what ApplyExpiries' race guard reads.
  HolderActivityMap activity_;
  Revision activity_since_ = 0;
  std::atomic<uint64_t> counters_[15] = {};
  // By stream key (guarded by mu_); the total is in total_tally_ (guarded by mu_ too).
  std::unordered_map<std::string, StreamTally> tallies_;
  StreamTally total_tally_;
  // The registry's part of the replica digest (guarded by mu_).
  uint64_t registry_digest_ = 0;
  AuditTrail audit_;  // guarded by mu_
  // Leased, in memory only: never stored or snapshotted; a restarted server learns the
  // loads again from the reports routers keep sending (at least every ttl / 3).
  FleetLoadTable fleet_load_;
  // Leased, in memory only, like fleet_load_: predictions end with their TTL.
  PredictedTable predicted_;
  std::atomic<bool> diverged_{false};
  // !registry_.disowned.empty(), published by the writing side.
  std::atomic<bool> has_disowned_{false};
  // What directory() returns: a copy of registry_.directory made at every change (and at
  // Recover/Restore), never null. Atomic, so that routing never waits for an apply or for
  // another reader.
  std::atomic<std::shared_ptr<const PlacementDirectory>> published_directory_{
      std::make_shared<const PlacementDirectory>()};
};

}  // namespace kvatlas::server
