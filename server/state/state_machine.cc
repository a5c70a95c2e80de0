#include "server/state/state_machine.h"

#include <mutex>

namespace kvatlas::server {

namespace {

enum CounterSlot : int {
  kStoredCommands = 0,
  kRemovedCommands,
  kClearedCommands,
  kEntriesAdded,
  kEntriesRemoved,
  kEntriesEvicted,
};

}  // namespace

StateMachine::StateMachine(StateMachineOptions options, Storage* storage)
    : options_(options), storage_(storage), hasher_(options.hash_seed), index_(options.index) {}

Status StateMachine::Recover() {
  if (!storage_) return Status::Ok();
  KVATLAS_RETURN_IF_ERROR(storage_->CheckHashSeed(options_.hash_seed));
  KVATLAS_ASSIGN_OR_RETURN(Revision applied, storage_->AppliedIndex());
  std::unique_lock lock(mu_);
  KVATLAS_RETURN_IF_ERROR(storage_->LoadInto(&index_));
  applied_.store(applied, std::memory_order_release);
  return Status::Ok();
}

Result<Revision> StateMachine::Apply(std::span<const CommandBatch* const> batches) {
  scratch_.clear();
  Revision revision = applied_.load(std::memory_order_relaxed);
  {
    std::unique_lock lock(mu_);
    for (const CommandBatch* batch : batches) {
      ++revision;
      for (const Command& command : batch->commands) {
        index_.Apply(command, options_.hash_seed, &scratch_);
        const int slot = std::holds_alternative<StoreCommand>(command)    ? kStoredCommands
                         : std::holds_alternative<RemoveCommand>(command) ? kRemovedCommands
                                                                          : kClearedCommands;
        counters_[slot].fetch_add(1, std::memory_order_relaxed);
      }
    }
    applied_.store(revision, std::memory_order_release);
  }
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
    if (!s.ok()) return s.WithContext("writing revision " + std::to_string(revision));
  }
  return revision;
}

ApplyCounters StateMachine::counters() const {
  ApplyCounters c;
  c.stored_commands = counters_[kStoredCommands].load(std::memory_order_relaxed);
  c.removed_commands = counters_[kRemovedCommands].load(std::memory_order_relaxed);
  c.cleared_commands = counters_[kClearedCommands].load(std::memory_order_relaxed);
  c.entries_added = counters_[kEntriesAdded].load(std::memory_order_relaxed);
  c.entries_removed = counters_[kEntriesRemoved].load(std::memory_order_relaxed);
  c.entries_evicted = counters_[kEntriesEvicted].load(std::memory_order_relaxed);
  return c;
}

}  // namespace kvatlas::server
