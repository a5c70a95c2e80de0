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
// Growth: Insert doubles the table when it would pass the load factor, rehashing every
// slot — O(capacity), tens to hundreds of ms for millions of slots, while the writer holds
// exclusive access. A single writer can instead build the grown slots with PrepareGrowth
// (const: readers keep running) and swap them in with Adopt (O(1)); Insert's own growth
// stays the fallback, so correctness never depends on a prepare.
//
// Spares: a growth writes every slot of a buffer twice the size, and on a VM the first
// touch of fresh memory is costly (~2.7 ms per MB with huge pages on the CI VM: 350 ms for a
// 16M-slot table, stalling the writer and, under raft, every replica at the same entry).
// SpareWanted says when growth is near; MakeSpare, on any thread, allocates and empties the
// next buffer; ProvideSpare hands it to the table, whose next growth to that capacity then
// only rehashes into it.
//
// Thread-safety: const methods may run concurrently; mutations need exclusive access.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "kvatlas/common/huge_buffer.h"
#include "kvatlas/common/prefetch.h"

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

  // A grown copy of one table's slots (PrepareGrowth), valid for Adopt by that table only
  // while it is unchanged. Move-only; dropping it just frees the copy.
  class Grown {
   public:
    size_t capacity() const { return mask_ + 1; }

   private:
    friend class FlatTable;
    Grown() = default;
    std::unique_ptr<void, FreeDeleter> buffer_;
    Slot* slots_ = nullptr;
    size_t mask_ = 0;
    int shift_ = 64;
    // What Adopt checks: the table it was built from and that table's state then.
    const FlatTable* source_ = nullptr;
    uint64_t source_generation_ = 0;
    size_t source_capacity_ = 0;
  };

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

  FlatTable() { Allocate(16); }

  size_t size() const { return size_; }
  size_t capacity() const { return mask_ + 1; }
  // Including a spare held for the next growth.
  size_t memory_bytes() const {
    return HugeAllocatedBytes(capacity() * sizeof(Slot)) +
           (spare_capacity() == 0 ? 0 : HugeAllocatedBytes(spare_capacity() * sizeof(Slot)));
  }
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
      if (s.value == kEmpty) return kEmpty;
      if (s.tag == tag && match(s.value)) return s.value;
    }
  }

  // The first value stored under `key`'s tag, unverified, or kEmpty: a prefetch hint.
  uint32_t FirstCandidate(uint64_t key) const {
    const uint32_t tag = TagOf(key);
    for (size_t i = Home(tag);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kEmpty || s.tag == tag) return s.value;
    }
  }

  // Hints the CPU to load the home slot of `key`.
  void Prefetch(uint64_t key) const { kvatlas::Prefetch(&slots_[Home(TagOf(key))]); }

  // Adds (key, value). REQUIRES: value != kEmpty and the pair is not present.
  void Insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 8 > capacity() * 7) Grow();
    Place(TagOf(key), value);
    ++size_;
    ++generation_;
  }

  // The slots this table would need so that `extra_inserts` more Inserts (from now, with no
  // erases counted) do not grow it: the smallest capacity Insert's doublings would reach,
  // rehashed from the current slots. nullopt when the current capacity suffices. O(capacity)
  // when it grows, O(1) otherwise; reads only, so it may run beside readers.
  std::optional<Grown> PrepareGrowth(size_t extra_inserts) const;

  // Swaps in `grown` in O(1). REQUIRES: `grown` came from this table's PrepareGrowth and no
  // Insert, Erase or Replace ran since (the copy would lose them). Checked in every build
  // (three compares): on a violation it returns false and changes nothing, so the caller
  // loses only the head start (Insert grows by itself).
  [[nodiscard]] bool Adopt(Grown&& grown);

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
  size_t Locate(uint64_t key, uint32_t value) const;
  void Place(uint32_t tag, uint32_t value);
  void Allocate(size_t capacity);
  void Grow();
  // Empty slots of `capacity` (a power of two) holding this table's slots, rehashed.
  Grown Rehashed(size_t capacity) const;

  std::unique_ptr<void, FreeDeleter> buffer_;
  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  int shift_ = 64;  // 64 - log2(capacity)
  size_t size_ = 0;
  // Counts Insert, Erase and Replace: Adopt's proof that nothing changed since a prepare.
  uint64_t generation_ = 0;
  // Taken by the next growth to its capacity (Rehashed, which is const: the writer's
  // PrepareGrowth runs beside readers, and readers never look at the spare).
  mutable Spare spare_;
  // spare_.capacity_ for memory_bytes, which readers call while the writer changes spare_.
  mutable std::atomic<size_t> spare_held_{0};
};

}  // namespace kvatlas::server
