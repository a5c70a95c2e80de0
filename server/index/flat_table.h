// FlatTable: an open-addressing hash table from a 64-bit key to a 32-bit value, built for the
// index's forward (block key → block) and alias (engine hash → block) maps.
//
// A slot keeps only a 32-bit tag of the (mixed) key next to the value: 8 bytes per slot.
// So keys are NOT unique in the table: every lookup checks its candidates with a predicate
// that looks at the record the value names (e.g. "this block has key k in context c"),
// which the caller reads anyway. The home slot is derived from the tag alone, so the table
// can grow without knowing the keys. Linear probing, backward-shift deletion (no
// tombstones: removes never leave garbage behind), load factor kept ≤ 7/8.
//
// Growth is incremental. Past the load factor, Insert switches to a table twice the size
// and from then on every Insert also moves the next few slots of the old table into it
// (kMigrateStep); lookups look in the new table, then in the old one, until the old one is
// empty (after capacity/kMigrateStep inserts) and freed. Moved slots, and slots erased
// while migrating, are marked kMoved in the old table (probes pass over them), so an entry
// is in exactly one of the two tables. A full rehash at once was O(capacity) on the
// writer: ~0.6 s of CPU at 16M slots, and under raft every replica applies the same entry,
// so all of them stalled together (docs/architecture.md §Growth without a rehash at once).
//
// Spares: a growth writes into a buffer twice the size, and on a VM the first touch of
// fresh memory is costly (~2.7 ms per MB with huge pages on the CI VM: 350 ms for a
// 16M-slot table, stalling the writer and, under raft, every replica at the same entry).
// SpareWanted says when growth is near; MakeSpare, on any thread, allocates and empties the
// next buffer; ProvideSpare hands it to the table, whose next growth to that capacity then
// starts in it.
//
// Thread-safety: const methods may run concurrently; mutations need exclusive access.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/internal/huge_buffer.h"
#include "common/internal/prefetch.h"

namespace kvatlas::server {

class FlatTable {
 private:
  struct Slot {
    uint32_t tag;
    uint32_t value;
  };
  static_assert(sizeof(Slot) == 8);

 public:
  static constexpr uint32_t kEmpty = UINT32_MAX;

  // Empty slots for a growth to `capacity`, made ahead (see the header comment).
  class Spare {
   public:
    Spare() = default;
    size_t capacity() const { return capacity_; }
    const void* data() const { return buffer_.get(); }

   private:
    friend class FlatTable;
    std::unique_ptr<void, FreeDeleter> buffer_;
    size_t capacity_ = 0;
  };

  // Old slots moved into the new table per Insert while a growth migrates. Every lookup of
  // a key absent from the new table also probes the old one, so a short migration costs
  // less in total: with 4, a 16M-slot growth migrated over 4M inserts and bulk ingest ran
  // ~25% slower (index_bench); with 64, over 256K inserts, as fast as a full rehash, and an
  // insert moves at most 512 bytes of slots.
  static constexpr size_t kMigrateStep = 64;

  FlatTable() { Allocate(16); }

  size_t size() const { return size_; }
  size_t capacity() const { return mask_ + 1; }
  // Including the old table while a growth migrates, and a spare held for the next growth.
  size_t memory_bytes() const {
    return HugeAllocatedBytes(capacity() * sizeof(Slot)) +
           (old_ ? HugeAllocatedBytes((old_->mask + 1) * sizeof(Slot)) : 0) +
           (spare_capacity() == 0 ? 0 : HugeAllocatedBytes(spare_capacity() * sizeof(Slot)));
  }
  // True while a growth still has old slots to move (tests, figures).
  bool migrating() const { return old_ != nullptr; }
  // The capacity of the spare held for the next growth, 0 when none (tests, figures).
  size_t spare_capacity() const { return spare_held_.load(std::memory_order_relaxed); }
  // Where the slots are (tests: which buffer a growth took).
  const void* slots_data() const { return slots_; }

  // The value of the first slot with `key`'s tag whose value satisfies `match`, or kEmpty.
  template <typename Pred>
  uint32_t Find(uint64_t key, Pred&& match) const {
    const uint32_t tag = TagOf(key);
    for (size_t i = Home(tag);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kEmpty) break;
      if (s.tag == tag && match(s.value)) return s.value;
    }
    if (!old_) return kEmpty;
    for (size_t i = HomeIn(tag, old_->shift, old_->mask);; i = (i + 1) & old_->mask) {
      const Slot& s = old_->slots[i];
      if (s.value == kEmpty) return kEmpty;
      if (s.tag == tag && s.value != kMoved && match(s.value)) return s.value;
    }
  }

  // The first value stored under `key`'s tag, unverified, or kEmpty: a prefetch hint.
  uint32_t FirstCandidate(uint64_t key) const {
    const uint32_t tag = TagOf(key);
    for (size_t i = Home(tag);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.tag == tag && s.value != kEmpty) return s.value;
      if (s.value == kEmpty) break;
    }
    if (!old_) return kEmpty;
    for (size_t i = HomeIn(tag, old_->shift, old_->mask);; i = (i + 1) & old_->mask) {
      const Slot& s = old_->slots[i];
      if (s.value == kEmpty || (s.tag == tag && s.value != kMoved)) return s.value;
    }
  }

  // Hints the CPU to load the home slot of `key`.
  void Prefetch(uint64_t key) const { kvatlas::Prefetch(&slots_[Home(TagOf(key))]); }

  // Adds (key, value). REQUIRES: value < kMoved and the pair is not present. O(1)
  // amortized and O(kMigrateStep) at worst, but for taking a new buffer when no spare was
  // provided (MakeSpare's work, on this thread).
  void Insert(uint64_t key, uint32_t value) {
    if (old_) Migrate(kMigrateStep);
    if ((size_ + 1) * 8 > capacity() * 7) Grow();
    Place(TagOf(key), value);
    ++size_;
  }

  // The capacity of the next growth once this table is past 3/4 load (it grows at 7/8) and
  // holds no spare for it; 0 otherwise. O(1).
  size_t SpareWanted() const;
  // Allocates `capacity` (a power of two) empty slots: O(capacity), any thread.
  static Spare MakeSpare(size_t capacity);
  // Keeps `spare` for the next growth, if it fits it (else drops it). O(1). The writer
  // only, but readers may run meanwhile: they never look at the spare.
  void ProvideSpare(Spare spare);

  // Removes the slot holding exactly (key, value). Returns false if there is none.
  bool Erase(uint64_t key, uint32_t value);

  // Replaces the value of the slot holding exactly (key, old_value).
  bool Replace(uint64_t key, uint32_t old_value, uint32_t new_value);

 private:
  static uint32_t TagOf(uint64_t key) {
    // Keys are mostly hashes already; the finaliser protects against structured ones.
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return static_cast<uint32_t>(key >> 32);
  }
  // Top bits of the (well-mixed) tag; the table never exceeds 2^32 slots.
  static size_t HomeIn(uint32_t tag, int shift, size_t mask) {
    return (uint64_t{tag} << 32 >> shift) & mask;
  }
  size_t Home(uint32_t tag) const { return HomeIn(tag, shift_, mask_); }
  // Marks, in the old table, a slot moved to the new one or erased while migrating.
  static constexpr uint32_t kMoved = UINT32_MAX - 1;

  // The table being emptied into the current one while a growth migrates.
  struct Old {
    std::unique_ptr<void, FreeDeleter> buffer;
    Slot* slots = nullptr;
    size_t mask = 0;
    int shift = 64;
    size_t next = 0;  // the first slot not moved yet
  };

  // The slot in the current table holding exactly (key, value), or SIZE_MAX.
  size_t Locate(uint64_t key, uint32_t value) const;
  // The same in the old table (REQUIRES: migrating), or SIZE_MAX.
  size_t LocateOld(uint64_t key, uint32_t value) const;
  void Place(uint32_t tag, uint32_t value);
  void Allocate(size_t capacity);
  // Starts a growth to twice the capacity, first finishing one still migrating.
  void Grow();
  // Moves up to `slots` old slots into the current table; frees the old table when done.
  void Migrate(size_t slots);

  std::unique_ptr<void, FreeDeleter> buffer_;
  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  int shift_ = 64;            // 64 - log2(capacity)
  size_t size_ = 0;           // in both tables
  std::unique_ptr<Old> old_;  // while migrating
  // Taken by the next growth to its capacity. Readers never look at it.
  Spare spare_;
  // spare_.capacity_ for memory_bytes, which readers call while the writer changes spare_.
  std::atomic<size_t> spare_held_{0};
};

}  // namespace kvatlas::server
