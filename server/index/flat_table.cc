#include "server/index/flat_table.h"

#include <bit>
#include <utility>

namespace kvatlas::server {

void FlatTable::Allocate(size_t capacity) {
  buffer_ = AllocateHuge(capacity * sizeof(Slot));
  slots_ = static_cast<Slot*>(buffer_.get());
  for (size_t i = 0; i < capacity; ++i) slots_[i].value = kEmpty;
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void FlatTable::Place(uint32_t tag, uint32_t value) {
  size_t i = Home(tag);
  while (slots_[i].value != kEmpty) i = (i + 1) & mask_;
  slots_[i] = Slot{tag, value};
}

void FlatTable::Grow() {
  std::unique_ptr<void, FreeDeleter> old_buffer = std::move(buffer_);
  const Slot* old = slots_;
  const size_t old_capacity = mask_ + 1;
  Allocate(old_capacity * 2);
  for (size_t i = 0; i < old_capacity; ++i) {
    if (old[i].value != kEmpty) Place(old[i].tag, old[i].value);
  }
}

size_t FlatTable::Locate(uint64_t key, uint32_t value) const {
  const uint32_t tag = TagOf(key);
  for (size_t i = Home(tag);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.value == kEmpty) return SIZE_MAX;
    if (s.value == value && s.tag == tag) return i;
  }
}

bool FlatTable::Replace(uint64_t key, uint32_t old_value, uint32_t new_value) {
  const size_t i = Locate(key, old_value);
  if (i == SIZE_MAX) return false;
  slots_[i].value = new_value;
  return true;
}

bool FlatTable::Erase(uint64_t key, uint32_t value) {
  size_t hole = Locate(key, value);
  if (hole == SIZE_MAX) return false;
  // Backward-shift: pull later members of the probe run into the hole so that every
  // remaining key stays reachable from its home slot without tombstones.
  for (size_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
    if (slots_[j].value == kEmpty) break;
    const size_t home = Home(slots_[j].tag);
    // Move j into the hole unless j's home lies cyclically in (hole, j].
    const bool home_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!home_between) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole].value = kEmpty;
  --size_;
  return true;
}

}  // namespace kvatlas::server
