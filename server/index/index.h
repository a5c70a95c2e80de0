// Index: the in-memory map from (context, block key) to the holders and tiers that hold the
// block. It serves every lookup and is the single decider of state changes: Apply() turns a
// command into mutations that storage mirrors (docs/architecture.md §Index).
//
// Thread-safety: none inside. One writer (the applier thread) calls Apply/Load*; readers
// call the const methods. The owner (StateMachine) serialises them with a shared_mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/internal/prefix_match.h"
#include "common/internal/split_lookup.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/model/command.h"
#include "server/model/mutation.h"
#include "server/model/record_loader.h"

namespace kvatlas::server {

struct IndexOptions {
  // Entries (block × holder × tier) one context may hold. Past it, the oldest blocks of that
  // context (by first indexing, FIFO) are evicted whole, with all their entries, until the
  // context is back under the cap. Bounds memory against publishers that never remove.
  uint64_t max_entries_per_context = 16'000'000;
  // Longest chain a lookup walks; keys past it are ignored.
  uint32_t max_lookup_blocks = 8192;
  // Keep the replica digest (ReplicaDigest) on every change. Off only to measure what it
  // costs (bench/index_bench.cc); a server always keeps it.
  bool replica_digest = true;
};

struct LookupOptions {
  // Report only this instance id (all dp ranks); empty = every holder.
  std::string instance_id;
  // Include per-block locations of SHARED-tier matches.
  bool include_locations = true;
};

using BlockLocation = BlockCopy;

struct HolderInfo {
  uint32_t id = 0;
  HolderKey holder;
  uint64_t entries = 0;
  uint64_t entries_by_tier[kNumTiers] = {};
};

struct ContextInfo {
  uint32_t id = 0;
  ContextKey context;
  uint64_t blocks = 0;
  uint64_t entries = 0;
  uint64_t evicted_blocks = 0;  // since start
};

struct IndexStats {
  uint64_t contexts = 0;
  uint64_t holders = 0;
  uint64_t blocks = 0;
  uint64_t entries = 0;
  uint64_t aliases = 0;
  uint64_t locations = 0;
  uint64_t evicted_blocks = 0;  // since start
  uint64_t memory_bytes = 0;    // bytes held by the index's own tables and pools
};

// What applying one Store or Remove command found, for the accounting of what publishers
// mean by their stores (docs/engine-events.md §Report modes).
struct CommandTally {
  uint32_t stored_blocks = 0;  // blocks a store placed (a copy or a report)
  // Of those, blocks the holder already held in the store's tier: another copy when the
  // store adds copies, a re-report (no change) when it is a report.
  uint32_t held_stores = 0;
  uint32_t removed_hashes = 0;  // hashes a remove named
  // Of those, hashes that found a copy of the holder (in the remove's tier, or any).
  uint32_t found_removes = 0;
};

// The parts of the index that grow, for growth made ahead (Index::SparesWanted): three hash
// tables and the two record pools.
enum class IndexPart : uint8_t { kForward, kAliases, kHot, kBlocks, kEntries };

// A part whose next growth (to `capacity` slots or records) is near.
struct SpareNeed {
  IndexPart part = IndexPart::kForward;
  size_t capacity = 0;
};

// One part's next growth made off the writer thread (Index::MakeSpare): a table's empty
// slots, or a pool's next chunk with its pages faulted in. Opaque and move-only.
class IndexSpare {
 public:
  IndexSpare();
  ~IndexSpare();
  IndexSpare(IndexSpare&&) noexcept;
  IndexSpare& operator=(IndexSpare&&) noexcept;

 private:
  friend class Index;
  struct Body;
  std::unique_ptr<Body> body_;
};

// Slot capacities of the index's hash tables (tests, growth figures).
struct TableCapacities {
  uint64_t forward = 0;
  uint64_t aliases = 0;
  uint64_t hot = 0;
};

class Index final : public RecordLoader {
 public:
  explicit Index(IndexOptions options = {});
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;
  Index(Index&&) noexcept;
  Index& operator=(Index&&) noexcept;

  const IndexOptions& options() const { return options_; }

  // Applies one command. Appends what changed to `out` (may be null). Never fails on a
  // well-formed command: unknown holders, keys and aliases are no-ops, not errors.
  // `seed` is the standard hasher seed, for KeyMode::kLocal chaining. Returns what a Store
  // or Remove found (zeros for other commands).
  CommandTally Apply(const Command& command, uint64_t seed, MutationList* out);

  // A holder-wide clear (ClearCommand without context; in one tier or all) that leaves the
  // holder's copies in the `spared` contexts alone: how a group keeps holder-wide commands
  // off a context it is importing or fenced in a move, or skips one for a moved context
  // (docs/scaling.md §Moves). Unknown holders and contexts are no-ops.
  void ClearHolderExcept(const HolderKey& holder, std::optional<Tier> tier,
                         std::span<const ContextKey> spared, MutationList* out);

  // Applies an ExpireHolderCommand for each of `holders` at once (cause kExpired), with one
  // pass over the block records for all their inline copies instead of one pass each (a
  // pass is ~100 ms at 50M blocks), leaving their copies in the `spared` contexts alone (as
  // ClearHolderExcept). Returns how many of them had entries.
  size_t ExpireHolders(std::span<const HolderKey> holders, MutationList* out,
                       std::span<const ContextKey> spared = {});

  // Deletes every block of `context` with all its copies (cause kCleared): a move's last
  // step in the group the context left, or an abandoned import in the one it was going to
  // (docs/scaling.md §Moves). The context itself stays (HasContext). Unknown: a no-op.
  void DropContext(const ContextKey& context, MutationList* out);

  // RecordLoader (server/model/record_loader.h): boot-time loading from storage, in the
  // order that interface states. New blocks get stamps after the largest loaded one.
  Status LoadContext(uint32_t id, const ContextKey& key) override;
  Status LoadHolder(uint32_t id, const HolderKey& key) override;
  Status LoadBlock(uint32_t context, BlockKey key, uint32_t depth, uint64_t stamp) override;
  Status LoadEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier, uint32_t refcount,
                   uint64_t engine_hash, std::string location) override;

  // Prefix lookup of a chain of block keys in `context`. An unknown context answers no
  // matches. Stops at the first key that no holder has.
  LookupResult Lookup(const ContextKey& context, std::span<const BlockKey> keys,
                      const LookupOptions& options = {}) const;

  // Every copy of each key at `positions` (indices into `keys`) in `context`: a group's part
  // of the lookup of a context split over several groups (common/internal/split_lookup.h).
  // Unknown keys or context: no copies.
  GroupCopies CopiesAt(const ContextKey& context, std::span<const BlockKey> keys,
                       std::span<const uint32_t> positions) const;

  // Every copy of `key`, in `context` or (when null) in every context.
  std::vector<BlockLocation> Locate(BlockKey key, const ContextKey* context = nullptr) const;
  // Each of `keys` in `context` with every copy it has (none: a block this index does not
  // hold), in the order of `keys`: what a move sends to replace them in the group it goes
  // to (ReplaceCopiesCommand). O(keys + their copies).
  std::vector<MovedBlock> CopiesOf(const ContextKey& context, std::span<const BlockKey> keys) const;

  // Every copy in `context` (none for an unknown context): blocks in creation order, each
  // block's copies in chain order; `visit(key, copy)` gets copies whose `context` is left
  // empty (it is `context`). For GET /v1/snapshot; runs under the caller's read lock.
  void ForEachCopy(const ContextKey& context,
                   const std::function<void(BlockKey, const BlockCopy&)>& visit) const;
  std::vector<HolderInfo> Holders() const;
  std::vector<ContextInfo> Contexts() const;
  // Whether `context` was ever written here (a context, once created, stays).
  bool HasContext(const ContextKey& context) const;
  IndexStats Stats() const;

  // A digest of the logical content (contexts, holders, blocks, entries), independent of
  // memory layout and insertion history: equal state ⇒ equal digest. For tests and, later,
  // replica comparison.
  uint64_t StateDigest() const;

  // The replica digest of the contexts, holders and entries (server/model/
  // replica_digest.h), kept up to date on every change (and at every Load*): O(1). Zero
  // when options().replica_digest is off.
  uint64_t ReplicaDigest() const;
  // The same, recomputed from scratch: O(the index). Equals ReplicaDigest() (tests).
  uint64_t RecomputeReplicaDigest() const;

  TableCapacities table_capacities() const;

  // Growth made ahead: first touches of fresh memory are slow on VMs. A table's growth
  // writes every slot of a buffer twice its size (flat_table.h §Spares); a pool's next
  // chunk faults in a huge page at every 2 MiB of new records (pool.h). The tables past 3/4
  // load (growth comes at 7/8) and the pools with less than half a chunk of room, that hold
  // no spare for their next growth: O(1).
  std::vector<SpareNeed> SparesWanted() const;
  // Makes `need`'s spare (a table's emptied slots, a pool's faulted-in chunk): O(its size),
  // on any thread, as it touches no index. Throws std::bad_alloc.
  static IndexSpare MakeSpare(const SpareNeed& need);
  // Keeps `spare` for its part's next growth (a table's, a pool's next chunk); one that no longer
  // fits, or that another spare already covers, is dropped. O(1); the writer only, but beside
  // readers (they never look at spares).
  void ProvideSpare(IndexSpare spare);

 private:
  class Impl;
  // A ReplaceCopiesCommand, as the Stores and Removes it takes (index_replace.cc).
  void ApplyReplace(const ReplaceCopiesCommand& c, uint64_t seed, MutationList* out);

  IndexOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvatlas::server
