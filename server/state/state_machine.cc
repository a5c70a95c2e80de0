#include "server/state/state_machine.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/internal/log.h"
#include "server/model/command_codec.h"
#include "server/model/replica_digest.h"

namespace kvatlas::server {

namespace {

// Slots of StateMachine::counters_.
enum CounterSlot : int {
  kStoredCommands = 0,
  kRemovedCommands,
  kClearedCommands,
  kEntriesAdded,
  kEntriesRemoved,
  kEntriesEvicted,
  kDuplicateBatches,
  kOrphanBatches,
  kHoldersExpired,
  kExpiriesSkipped,
  kWriteLockHolds,
  kWriteLockHoldsOver1ms,
  kWriteLockHeldNanos,
  kWriteLockHoldMaxNanos,
  kWrongGroupBatches,
  kCounterSlots,
};

// The holder an event names: Store, Remove and Clear are a holder's own events; the other
// commands are not (an ExpireHolderCommand is the leader's, and an unregistration's clear
// is applied apart from the loop that calls this).
const HolderKey* EventHolder(const Command& command) {
  if (const auto* store = std::get_if<StoreCommand>(&command)) return &store->holder;
  if (const auto* remove = std::get_if<RemoveCommand>(&command)) return &remove->holder;
  if (const auto* clear = std::get_if<ClearCommand>(&command)) return &clear->holder;
  return nullptr;
}

// Hands records on to `index` and counts the entries into `progress`, checking every
// kCheckEvery entries whether it asks to stop (then kCancelled ends the storage scan).
class CountingLoader final : public RecordLoader {
 public:
  CountingLoader(RecordLoader* index, RecoveryProgress* progress)
      : index_(index), progress_(progress) {}
  ~CountingLoader() override { progress_->Add(uncounted_); }

  Status LoadContext(uint32_t id, const ContextKey& key) override {
    return index_->LoadContext(id, key);
  }
  Status LoadHolder(uint32_t id, const HolderKey& key) override {
    return index_->LoadHolder(id, key);
  }
  Status LoadBlock(uint32_t context, BlockKey key, uint32_t depth, uint64_t stamp) override {
    return index_->LoadBlock(context, key, depth, stamp);
  }
  Status LoadEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier, uint32_t refcount,
                   uint64_t engine_hash, std::string location) override {
    if (++uncounted_ == kCheckEvery) {
      progress_->Add(uncounted_);
      uncounted_ = 0;
      KVATLAS_RETURN_IF_ERROR(progress_->CheckStop("loading the state from storage"));
    }
    return index_->LoadEntry(context, key, holder, tier, refcount, engine_hash,
                             std::move(location));
  }

 private:
  // About a millisecond of loading: a stop waits no longer than that.
  static constexpr uint64_t kCheckEvery = 4096;
  RecordLoader* index_;
  RecoveryProgress* progress_;
  uint64_t uncounted_ = 0;
};

}  // namespace

Status StateMachine::LoadIndex() {
  RecoveryProgress* progress = progress_.load(std::memory_order_acquire);
  if (progress == nullptr) return storage_->LoadInto(&index_);
  KVATLAS_RETURN_IF_ERROR(progress->CheckStop("loading the state from storage"));
  CountingLoader loader(&index_, progress);
  return storage_->LoadInto(&loader);
}

StateMachine::StateMachine(StateMachineOptions options, Storage* storage)
    : options_(options),
      storage_(storage),
      hasher_(options.hash_seed),
      index_(options.index),
      predicted_(options.predicted_max_entries) {}

size_t StateMachine::PredictLocally(const PredictCommand& c, std::vector<BlockKey>* recorded) {
  const auto accepted =
      PredictedTable::Clock::time_point(std::chrono::milliseconds(c.accepted_at_ms));
  return predicted_.Record(c.context, c.holder, c.hashes, accepted,
                           accepted + std::chrono::milliseconds(c.ttl_ms),
                           PredictedTable::Clock::now(), recorded);
}

void StateMachine::ApplyPredict(const PredictCommand& c) {
  if (observer_ == nullptr) {
    (void)PredictLocally(c);
    return;
  }
  auto record = std::make_shared<FeedRecord>();
  if (PredictLocally(c, &record->keys) == 0) return;
  record->op = FeedOp::kPredicted;
  record->context = c.context;
  record->holder = c.holder;
  record->expires_at_ms = c.accepted_at_ms + c.ttl_ms;
  Mutation m;
  m.kind = MutationKind::kPredicted;
  m.predicted = std::move(record);
  scratch_.push_back(std::move(m));
}

Status StateMachine::Recover() {
  if (!storage_) {
    std::unique_lock lock(mu_);
    if (observer_) observer_->OnReset(applied_.load(std::memory_order_relaxed), index_);
    return Status::Ok();
  }
  KVATLAS_RETURN_IF_ERROR(storage_->CheckHashSeed(options_.hash_seed));
  KVATLAS_ASSIGN_OR_RETURN(Revision applied, storage_->AppliedIndex());
  std::unique_lock lock(mu_);
  KVATLAS_RETURN_IF_ERROR(LoadIndex());
  KVATLAS_RETURN_IF_ERROR(storage_->LoadRegistry(&registry_));
  registry_digest_ = options_.index.replica_digest ? RegistryDigest(registry_) : 0;
  PublishDirectory();
  applied_.store(applied, std::memory_order_release);
  activity_.clear();
  activity_since_ = applied;
  if (observer_) observer_->OnReset(applied, index_);
  return Status::Ok();
}

Result<Revision> StateMachine::Apply(std::span<const CommandBatch* const> batches) {
  Revision revision = applied_.load(std::memory_order_relaxed);
  if (batches.empty()) return revision;
  return ApplyBatches(batches, [&revision] { return ++revision; });
}

Status StateMachine::ApplyAt(Revision index, std::span<const CommandBatch* const> batches) {
  if (index <= applied_.load(std::memory_order_relaxed)) return Status::Ok();  // replayed
  return ApplyBatches(batches, [index] { return index; }).status();
}

Status StateMachine::ApplyEntry(uint64_t index, std::string_view entry) {
  if (index <= applied_.load(std::memory_order_relaxed)) return Status::Ok();  // replayed
  KVATLAS_ASSIGN_OR_RETURN(std::vector<CommandBatch> batches, DecodeLogEntry(entry));
  std::vector<const CommandBatch*> pointers;
  pointers.reserve(batches.size());
  for (const CommandBatch& batch : batches) pointers.push_back(&batch);
  return ApplyBatches(pointers, [index] { return index; }).status();
}

Result<std::unique_ptr<LogStateMachine::Capture>> StateMachine::CaptureState() {
  if (!storage_) return Status::FailedPrecondition("an in-memory state machine has no snapshots");
  // Adapts the storage capture: the snapshot is exactly the database's records.
  class StorageBacked final : public Capture {
   public:
    explicit StorageBacked(std::unique_ptr<Storage::Capture> capture)
        : capture_(std::move(capture)) {}
    Status SerializeInto(ChunkedBytes* out) override { return capture_->SerializeInto(out); }

   private:
    std::unique_ptr<Storage::Capture> capture_;
  };
  KVATLAS_ASSIGN_OR_RETURN(std::unique_ptr<Storage::Capture> capture, storage_->CaptureAll());
  return std::unique_ptr<Capture>(std::make_unique<StorageBacked>(std::move(capture)));
}

Status StateMachine::Restore(std::string_view snapshot) {
  if (!storage_) return Status::FailedPrecondition("an in-memory state machine has no snapshots");
  // The header only: walking every record of the snapshot raft restores at every start
  // (of the whole state) cost a second of the start with 10M entries, for nothing.
  KVATLAS_ASSIGN_OR_RETURN(Revision index, Storage::SnapshotHeaderAppliedIndex(snapshot));
  // The state is persistent: a snapshot that is not newer than it (the one raft restores
  // at every start) changes nothing.
  if (index <= applied_.load(std::memory_order_relaxed)) return Status::Ok();
  // Checks the whole snapshot before it replaces anything.
  KVATLAS_RETURN_IF_ERROR(storage_->ReplaceAll(snapshot));
  {
    std::unique_lock lock(mu_);
    index_ = Index(options_.index);
    registry_ = Registry{};
    KVATLAS_RETURN_IF_ERROR(LoadIndex());
    KVATLAS_RETURN_IF_ERROR(storage_->LoadRegistry(&registry_));
    registry_digest_ = options_.index.replica_digest ? RegistryDigest(registry_) : 0;
    PublishDirectory();
    applied_.store(index, std::memory_order_release);
    // What happened up to the snapshot is not known event by event.
    activity_.clear();
    activity_since_ = index;
    if (observer_) observer_->OnReset(index, index_);
  }
  if (registry_listener_) registry_listener_();
  return Status::Ok();
}

bool StateMachine::HoldsAnything() const {
  std::shared_lock lock(mu_);
  const IndexStats stats = index_.Stats();
  return stats.contexts > 0 || stats.holders > 0 || !registry_.registrations.empty() ||
         !registry_.positions.empty() || !registry_.disowned.empty() ||
         !registry_.holder_wide.empty() || !registry_.importing.empty();
}

Status StateMachine::DropReplica() {
  if (!storage_) return Status::FailedPrecondition("an in-memory state machine holds no replica");
  KVATLAS_RETURN_IF_ERROR(storage_->Clear());
  {
    std::unique_lock lock(mu_);
    index_ = Index(options_.index);
    registry_ = Registry{};
    registry_digest_ = options_.index.replica_digest ? RegistryDigest(registry_) : 0;
    PublishDirectory();
    applied_.store(0, std::memory_order_release);
    activity_.clear();
    activity_since_ = 0;
    tallies_.clear();
    if (observer_) observer_->OnReset(0, index_);
  }
  if (registry_listener_) registry_listener_();
  return Status::Ok();
}

template <typename NextRevision>
Result<Revision> StateMachine::ApplyBatches(std::span<const CommandBatch* const> batches,
                                            NextRevision next) {
  scratch_.clear();
  // Spares made since the last apply: the growths they are for are still ahead (the
  // tables were past 3/4 load, and grow at 7/8). Readers never look at spares.
  for (IndexSpare& spare : spares_.TakeReady()) index_.ProvideSpare(std::move(spare));
  Revision revision = applied_.load(std::memory_order_relaxed);
  bool registry_changed = false;
  {
    // One write lock for the whole group, and the revision published before it is released:
    // a read sees all of a group or none of it, at the revision it reports, never a part of
    // the next entry (whose batches share one revision under raft: no revision names a part
    // of it). Lookups therefore wait up to one group's in-memory apply (docs/architecture.md
    // §Threading model); the RocksDB write below is outside the lock.
    std::unique_lock lock(mu_);
    // One clock read per group: holder activity needs no finer time than that.
    const auto now = std::chrono::steady_clock::now();
    for (const CommandBatch* batch : batches) {
      // A skipped batch still takes its revision: revisions are log positions.
      revision = next();
      // A hash table that fills grows incrementally inside the inserts (flat_table.h), so no
      // batch holds the write lock for a whole table's rehash.
      registry_changed |= ApplyBatch(*batch, revision, now);
    }
    // An empty entry (a group of nothing) still advances the revision to its index.
    if (batches.empty()) revision = next();
    applied_.store(revision, std::memory_order_release);
    CountWriteLockHold(std::chrono::steady_clock::now() - now);
  }
  for (const SpareNeed& need : index_.SparesWanted()) spares_.Request(need);
  uint64_t added = 0, removed = 0, evicted = 0;
  for (const Mutation& m : scratch_) {
    if (m.kind == MutationKind::kPutEntry && m.refcount == 1 && m.cause == MutationCause::kStored) {
      ++added;
    } else if (m.kind == MutationKind::kDeleteEntry) {
      (m.cause == MutationCause::kEvicted ? evicted : removed) += 1;
    }
  }
  counters_[kEntriesAdded].fetch_add(added, std::memory_order_relaxed);
  counters_[kEntriesRemoved].fetch_add(removed, std::memory_order_relaxed);
  counters_[kEntriesEvicted].fetch_add(evicted, std::memory_order_relaxed);
  // Storage is written after readers may already see the change: acknowledgement waits for
  // this write, and a failure stops the server, whose restart rebuilds from disk.
  if (storage_) {
    Status s = storage_->Write(revision, scratch_);
    if (!s.ok()) {
      failed_.store(true, std::memory_order_release);
      return s.WithContext("writing revision " + std::to_string(revision));
    }
  }
  if (observer_) observer_->OnApplied(revision, scratch_);
  if (registry_changed && registry_listener_) registry_listener_();
  return revision;
}

bool StateMachine::ApplyBatch(const CommandBatch& batch, Revision revision,
                              std::chrono::steady_clock::time_point now) {
  // A batch naming a context this group disowned is refused whole, before its position is
  // looked at: it applies nothing and records no position, so that the same part, routed
  // again to the context's new group, is applied there (docs/scaling.md §Placed contexts).
  if (!registry_.disowned.empty() && NamesDisownedContext(batch)) {
    counters_[kWrongGroupBatches].fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // The stream a position belongs to: the key itself, or the stream of a placed context's
  // key (PlacedStreamKey), whose registration and tally are the stream's. Duplicates are
  // checked, and positions recorded, by the whole key.
  const std::string_view base =
      batch.position ? BaseStreamKey(batch.position->stream) : std::string_view();
  if (batch.position) {
    const StreamPosition& p = *batch.position;
    if (p.restart) {
      // The publisher's sequence starts again: a stream's restart forgets its placed
      // contexts' positions here too (a placed key's restart, its own only).
      ErasePositionsOf(p.stream);
    } else if (auto it = registry_.positions.find(p.stream);
               it != registry_.positions.end() && p.sequence <= it->second) {
      counters_[kDuplicateBatches].fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // A batch that was in flight when its publisher was unregistered must not bring the
    // holder's entries back.
    // (A stream key that holds a 0x1f itself, from before placed streams, is still found.)
    if (!IsListenerStream(base) && !IsWriterStream(base) &&
        !registry_.registrations.contains(base) &&
        (base.size() == p.stream.size() || !registry_.registrations.contains(p.stream))) {
      counters_[kOrphanBatches].fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  bool registry_changed = false;
  const HolderKey* last_holder = nullptr;
  BatchTally tally;
  for (size_t i = 0; i < batch.commands.size(); ++i) {
    const Command& command = batch.commands[i];
    if (!std::holds_alternative<RemoveCommand>(command)) tally.AddOther();
    if (std::holds_alternative<ExpireHolderCommand>(command)) {
      // A run of expiries (the lease checker proposes every due one in one batch) is
      // applied together: one pass over the index's block records for all of them.
      size_t end = i + 1;
      while (end < batch.commands.size() &&
             std::holds_alternative<ExpireHolderCommand>(batch.commands[end])) {
        ++end;
      }
      ApplyExpiries(std::span<const Command>(batch.commands).subspan(i, end - i));
      i = end - 1;
      continue;
    }
    if (const auto* reg = std::get_if<RegisterCommand>(&command)) {
      ApplyRegister(*reg);
      registry_changed = true;
      continue;
    }
    if (const auto* unreg = std::get_if<UnregisterCommand>(&command)) {
      NoteHolderWide(HolderKey{unreg->instance_id, unreg->dp_rank}, unreg->fanout);
      ApplyUnregister(*unreg);
      registry_changed = true;
      continue;
    }
    // Server addresses are not registrations: the registry listener (ZMQ) ignores them.
    if (const auto* announce = std::get_if<AnnounceCommand>(&command)) {
      ApplyAnnounce(*announce);
      continue;
    }
    if (const auto* forget = std::get_if<ForgetServerCommand>(&command)) {
      ApplyForgetServer(*forget);
      continue;
    }
    if (const auto* drain = std::get_if<DrainCommand>(&command)) {
      ApplyDrain(*drain);
      continue;
    }
    if (const auto* place = std::get_if<PlaceContextCommand>(&command)) {
      ApplyPlaceContext(*place);
      continue;
    }
    if (const auto* accepting = std::get_if<SetGroupAcceptingCommand>(&command)) {
      ApplySetGroupAccepting(*accepting);
      continue;
    }
    if (const auto* disown = std::get_if<DisownContextCommand>(&command)) {
      ApplyDisownContext(*disown, revision);
      continue;
    }
    if (const auto* members = std::get_if<SetGroupMembersCommand>(&command)) {
      ApplySetGroupMembers(*members);
      continue;
    }
    if (const auto* fence = std::get_if<FenceContextCommand>(&command)) {
      ApplyFenceContext(*fence, revision);
      continue;
    }
    if (const auto* import = std::get_if<ImportContextCommand>(&command)) {
      ApplyImportContext(*import, revision);
      continue;
    }
    if (const auto* drop = std::get_if<DropContextCommand>(&command)) {
      ApplyDropContext(*drop);
      continue;
    }
    if (const auto* audit = std::get_if<AuditCommand>(&command)) {
      ApplyAudit(*audit, revision);
      continue;
    }
    if (const auto* load = std::get_if<LoadReportCommand>(&command)) {
      // Leased soft state: a full table (kMaxLoadRouters) drops a new router's report.
      (void)fleet_load_.Replace(load->report, FleetLoadTable::Clock::time_point(
                                                  std::chrono::milliseconds(load->accepted_at_ms) +
                                                  std::chrono::milliseconds(load->report.ttl_ms)));
      continue;
    }
    if (const auto* predict = std::get_if<PredictCommand>(&command)) {
      // Soft state: a full table or a holder whose events flow records nothing. What it
      // recorded goes to the change feed's predicted records (docs/feed.md), at this revision.
      ApplyPredict(*predict);
      continue;
    }
    if (const HolderKey* holder = EventHolder(command)) {
      // Real events replace predictions (once per run of one holder's events).
      if (last_holder == nullptr || !(*last_holder == *holder)) {
        predicted_.NoteEvent(*holder, PredictedTable::Clock::now());
      }
      NoteActivity(*holder, &last_holder, revision, now);
    }
    CommandTally found;
    if (const auto* clear = std::get_if<ClearCommand>(&command); clear && !clear->context) {
      NoteHolderWide(clear->holder, clear->fanout);
      ClearHolder(clear->holder, clear->tier);
    } else {
      found = index_.Apply(command, options_.hash_seed, &scratch_);
    }
    if (const auto* remove = std::get_if<RemoveCommand>(&command)) {
      tally.AddRemove(*remove, found);
    } else if (std::holds_alternative<StoreCommand>(command)) {
      tally.AddStore(found);
    }
    const int slot = std::holds_alternative<StoreCommand>(command)    ? kStoredCommands
                     : std::holds_alternative<RemoveCommand>(command) ? kRemovedCommands
                                                                      : kClearedCommands;
    // A move's replacement of copies is not a publisher's command.
    if (!std::holds_alternative<ReplaceCopiesCommand>(command)) {
      counters_[slot].fetch_add(1, std::memory_order_relaxed);
    }
  }
  AddTally(base, tally.Finish());
  if (batch.position && !batch.position->restart) {
    const auto [it, added] = registry_.positions.try_emplace(batch.position->stream, 0);
    if (!added) DigestRegistry(StreamPositionElement(it->first, it->second), -1);
    it->second = batch.position->sequence;
    DigestRegistry(StreamPositionElement(it->first, it->second), +1);
    Mutation m;
    m.kind = MutationKind::kPutStreamPosition;
    m.location = batch.position->stream;
    m.stamp = batch.position->sequence;
    scratch_.push_back(std::move(m));
  }
  return registry_changed;
}

void StateMachine::AddTally(std::string_view stream, const StreamTally& tally) {
  if (tally == StreamTally{}) return;
  total_tally_ += tally;
  if (stream.empty()) return;
  auto it = tallies_.find(std::string(stream));
  if (it == tallies_.end()) {
    if (tallies_.size() >= kMaxTalliedStreams) return;
    it = tallies_.emplace(std::string(stream), StreamTally{}).first;
  }
  it->second += tally;
}

StreamTally StateMachine::TallyOf(std::string_view stream) const {
  std::shared_lock lock(mu_);
  auto it = tallies_.find(std::string(stream));
  return it == tallies_.end() ? StreamTally{} : it->second;
}

void StateMachine::NoteActivity(const HolderKey& holder, const HolderKey** last, Revision revision,
                                std::chrono::steady_clock::time_point now) {
  // A batch is usually one holder's (one stream, one request): one map update per batch,
  // not per command, on the hottest path of the server.
  if (*last != nullptr && **last == holder) return;
  *last = &holder;
  HolderActivity& activity = activity_[holder];
  activity.revision = revision;
  activity.applied_at = now;
}

void StateMachine::ApplyExpiries(std::span<const Command> expiries) {
  std::vector<HolderKey> due;
  due.reserve(expiries.size());
  for (const Command& command : expiries) {
    const auto& c = std::get<ExpireHolderCommand>(command);
    // Both checks read replicated state only (the activity map's revisions are derived
    // from the log), so every replica decides alike; docs/leases.md §Race guard has the
    // one case where a replica's history is too short to know.
    const auto activity = activity_.find(c.holder);
    const bool came_back =
        activity != activity_.end() && activity->second.revision > c.last_activity_revision;
    const bool registered = std::any_of(registry_.registrations.begin(),
                                        registry_.registrations.end(), [&c](const auto& entry) {
                                          return entry.second.instance_id == c.holder.id &&
                                                 entry.second.dp_rank == c.holder.dp_rank;
                                        });
    if (came_back || registered) {
      counters_[kExpiriesSkipped].fetch_add(1, std::memory_order_relaxed);
    } else {
      due.push_back(c.holder);
    }
  }
  if (due.empty()) return;
  const size_t expired = index_.ExpireHolders(due, &scratch_, SparedContexts());
  counters_[kHoldersExpired].fetch_add(expired, std::memory_order_relaxed);
}

void StateMachine::ApplyRegister(const RegisterCommand& c) {
  std::string key = c.registration.Key();
  if (auto it = registry_.registrations.find(key); it != registry_.registrations.end()) {
    DigestRegistry(RegistrationElement(key, it->second), -1);
  }
  DigestRegistry(RegistrationElement(key, c.registration), +1);
  Mutation m;
  m.kind = MutationKind::kPutRegistration;
  m.location = key;
  m.registration = std::make_shared<const Registration>(c.registration);
  scratch_.push_back(std::move(m));
  registry_.registrations.insert_or_assign(std::move(key), c.registration);
}

void StateMachine::ApplyUnregister(const UnregisterCommand& c) {
  const std::string key = Registration::RegistrationKey(c.instance_id, c.tenant_id, c.dp_rank);
  const auto registration = registry_.registrations.find(key);
  if (registration == registry_.registrations.end()) return;
  DigestRegistry(RegistrationElement(key, registration->second), -1);
  registry_.registrations.erase(registration);
  Mutation m;
  m.kind = MutationKind::kDeleteRegistration;
  m.location = key;
  scratch_.push_back(std::move(m));
  tallies_.erase(key);
  // The stream's position, and those of its placed contexts' parts.
  ErasePositionsOf(key);
  ClearHolder(HolderKey{c.instance_id, c.dp_rank}, std::nullopt);
  counters_[kClearedCommands].fetch_add(1, std::memory_order_relaxed);
}

void StateMachine::ApplyAnnounce(const AnnounceCommand& c) {
  ServerAddresses addresses{c.http_address, c.rpc_address};
  if (auto it = registry_.servers.find(c.server_id); it != registry_.servers.end()) {
    DigestRegistry(ServerAddressesElement(c.server_id, it->second), -1);
  }
  DigestRegistry(ServerAddressesElement(c.server_id, addresses), +1);
  Mutation m;
  m.kind = MutationKind::kPutServerAddresses;
  m.stamp = c.server_id;
  m.server_addresses = std::make_shared<const ServerAddresses>(addresses);
  scratch_.push_back(std::move(m));
  registry_.servers.insert_or_assign(c.server_id, std::move(addresses));
}

void StateMachine::ApplyForgetServer(const ForgetServerCommand& c) {
  const auto it = registry_.servers.find(c.server_id);
  if (it == registry_.servers.end()) return;
  DigestRegistry(ServerAddressesElement(c.server_id, it->second), -1);
  registry_.servers.erase(it);
  Mutation m;
  m.kind = MutationKind::kDeleteServerAddresses;
  m.stamp = c.server_id;
  scratch_.push_back(std::move(m));
}

void StateMachine::ApplyDrain(const DrainCommand& c) {
  const auto it = registry_.servers.find(c.server_id);
  if (it == registry_.servers.end() || it->second.draining == c.draining) return;
  DigestRegistry(ServerAddressesElement(c.server_id, it->second), -1);
  it->second.draining = c.draining;
  DigestRegistry(ServerAddressesElement(c.server_id, it->second), +1);
  Mutation m;
  m.kind = MutationKind::kPutServerAddresses;
  m.stamp = c.server_id;
  m.server_addresses = std::make_shared<const ServerAddresses>(it->second);
  scratch_.push_back(std::move(m));
}

void StateMachine::DigestRegistry(uint64_t element, int sign) {
  if (!options_.index.replica_digest) return;
  registry_digest_ += sign > 0 ? element : uint64_t{0} - element;
}

void StateMachine::ApplyAudit(const AuditCommand& c, Revision revision) {
  // The state here is the same on every replica: every command before this one in the log
  // is applied, none after it.
  const uint64_t digest = index_.ReplicaDigest() + registry_digest_;
  const uint32_t previous_scheme = audit_.status().leader_digest_scheme;
  const bool turned = audit_.Apply(c, revision, digest, std::chrono::system_clock::now());
  const AuditStatus& status = audit_.status();
  if (c.digest_scheme != status.digest_scheme && c.digest_scheme != previous_scheme) {
    LogWarning("replica audit at log index " + std::to_string(revision) + ": " +
               SchemeMismatchMessage(status));
  }
  const bool diverged = status.verdict == AuditVerdict::kDiverged;
  if (diverged_.exchange(diverged, std::memory_order_acq_rel) && !diverged) {
    LogWarning("replica audit at log index " + std::to_string(status.index) +
               ": this replica's digest equals the leader's again (" +
               ReplicaDigestHex(status.digest) + "); serving reads again");
  }
  if (turned) LogError("replica audit: " + DivergedMessage(status));
}

uint64_t StateMachine::ReplicaDigest() const {
  std::shared_lock lock(mu_);
  return index_.ReplicaDigest() + registry_digest_;
}

uint64_t StateMachine::RecomputeReplicaDigest() const {
  std::shared_lock lock(mu_);
  if (!options_.index.replica_digest) return 0;
  return index_.RecomputeReplicaDigest() + RegistryDigest(registry_);
}

AuditStatus StateMachine::audit() const {
  std::shared_lock lock(mu_);
  return audit_.status();
}

std::map<uint64_t, ServerAddresses> StateMachine::ServerAddressMap() const {
  std::shared_lock lock(mu_);
  return registry_.servers;
}

std::vector<uint64_t> StateMachine::DrainingServers() const {
  std::shared_lock lock(mu_);
  std::vector<uint64_t> draining;
  for (const auto& [id, addresses] : registry_.servers) {
    if (addresses.draining) draining.push_back(id);
  }
  return draining;
}

std::optional<ServerAddresses> StateMachine::AddressesOf(uint64_t server_id) const {
  std::shared_lock lock(mu_);
  auto it = registry_.servers.find(server_id);
  if (it == registry_.servers.end()) return std::nullopt;
  return it->second;
}

void StateMachine::CountWriteLockHold(std::chrono::steady_clock::duration held) {
  static_assert(sizeof(counters_) / sizeof(counters_[0]) == kCounterSlots);
  const auto nanos =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(held).count());
  counters_[kWriteLockHolds].fetch_add(1, std::memory_order_relaxed);
  if (nanos > 1'000'000) counters_[kWriteLockHoldsOver1ms].fetch_add(1, std::memory_order_relaxed);
  counters_[kWriteLockHeldNanos].fetch_add(nanos, std::memory_order_relaxed);
  // One writer: a plain compare and store keeps the maximum.
  if (nanos > counters_[kWriteLockHoldMaxNanos].load(std::memory_order_relaxed)) {
    counters_[kWriteLockHoldMaxNanos].store(nanos, std::memory_order_relaxed);
  }
}

ApplyCounters StateMachine::counters() const {
  ApplyCounters c;
  c.stored_commands = counters_[kStoredCommands].load(std::memory_order_relaxed);
  c.removed_commands = counters_[kRemovedCommands].load(std::memory_order_relaxed);
  c.cleared_commands = counters_[kClearedCommands].load(std::memory_order_relaxed);
  c.entries_added = counters_[kEntriesAdded].load(std::memory_order_relaxed);
  c.entries_removed = counters_[kEntriesRemoved].load(std::memory_order_relaxed);
  c.entries_evicted = counters_[kEntriesEvicted].load(std::memory_order_relaxed);
  c.duplicate_batches = counters_[kDuplicateBatches].load(std::memory_order_relaxed);
  c.orphan_batches = counters_[kOrphanBatches].load(std::memory_order_relaxed);
  c.wrong_group_batches = counters_[kWrongGroupBatches].load(std::memory_order_relaxed);
  c.holders_expired = counters_[kHoldersExpired].load(std::memory_order_relaxed);
  c.expiries_skipped = counters_[kExpiriesSkipped].load(std::memory_order_relaxed);
  c.write_lock_holds = counters_[kWriteLockHolds].load(std::memory_order_relaxed);
  c.write_lock_holds_over_1ms = counters_[kWriteLockHoldsOver1ms].load(std::memory_order_relaxed);
  c.write_lock_held_ns = counters_[kWriteLockHeldNanos].load(std::memory_order_relaxed);
  c.write_lock_hold_max_ns = counters_[kWriteLockHoldMaxNanos].load(std::memory_order_relaxed);
  std::shared_lock lock(mu_);
  c.tally = total_tally_;
  return c;
}

}  // namespace kvatlas::server
