// FlatTable: an open-addressing hash table from a 64-bit key to a 32-bit value, built for the
// index's forward (block key → block) and alias (engine hash → block) maps.
//
// Keys are NOT unique by themselves: the caller folds a namespace into the key and checks
// each candidate with a predicate (e.g. "this block belongs to context c"), so two
// (namespace, key) pairs whose folded keys collide still live side by side. 12 bytes per
// slot, linear probing, backward-shift deletion (no tombstones, so removes never leave
// garbage behind), load factor kept ≤ 0.8.
//
// Thread-safety: const methods may run concurrently; mutations need exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvatlas::server {

class FlatTable {
 public:
  static constexpr uint32_t kEmpty = UINT32_MAX;

  FlatTable() { Allocate(16); }

  size_t size() const { return size_; }
  size_t capacity() const { return mask_ + 1; }
  size_t memory_bytes() const { return capacity() * sizeof(Slot); }

  // The value of the first slot with `key` whose value satisfies `match`, or kEmpty.
  template <typename Pred>
  uint32_t Find(uint64_t key, Pred&& match) const {
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value == kEmpty) return kEmpty;
      if (s.key() == key && match(s.value)) return s.value;
    }
  }

  // Hints the CPU to load the home slot of `key`.
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[Home(key)]); }

  // Adds (key, value). REQUIRES: value != kEmpty and the pair is not present.
  void Insert(uint64_t key, uint32_t value) {
    if ((size_ + 1) * 5 > capacity() * 4) Grow();
    Place(key, value);
    ++size_;
  }

  // Removes the slot holding exactly (key, value). Returns false if there is none.
  bool Erase(uint64_t key, uint32_t value);

  // Replaces the value of the slot holding exactly (key, old_value).
  bool Replace(uint64_t key, uint32_t old_value, uint32_t new_value);

 private:
#pragma pack(push, 4)
  struct Slot {
    uint32_t key_lo;
    uint32_t key_hi;
    uint32_t value;
    uint64_t key() const { return (uint64_t{key_hi} << 32) | key_lo; }
  };
#pragma pack(pop)
  static_assert(sizeof(Slot) == 12);

  size_t Home(uint64_t key) const {
    // Keys are mostly hashes already; the finaliser protects against structured ones.
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }
  size_t Locate(uint64_t key, uint32_t value) const;
  void Place(uint64_t key, uint32_t value);
  void Allocate(size_t capacity);
  void Grow();

  std::unique_ptr<Slot[]> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kvatlas::server
