#include "server/index/flat_table.h"

#include <bit>
#include <utility>

namespace kvatlas::server {

void FlatTable::Allocate(size_t capacity) {
  buffer_ = MakeSpare(capacity).buffer_;
  slots_ = static_cast<Slot*>(buffer_.get());
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void FlatTable::Place(uint32_t tag, uint32_t value) {
  size_t i = Home(tag);
  while (slots_[i].value != kEmpty) i = (i + 1) & mask_;
  slots_[i] = Slot{tag, value};
}

void FlatTable::Grow() {
  // Cannot happen with kMigrateStep >= 2 (the old slots are gone before the new table is
  // half full), but correctness must not depend on it.
  if (old_) Migrate(SIZE_MAX);
  const size_t capacity = this->capacity() * 2;
  auto old = std::make_unique<Old>();
  old->buffer = std::move(buffer_);
  old->slots = slots_;
  old->mask = mask_;
  old->shift = shift_;
  buffer_.reset();
  if (spare_.capacity_ <= capacity) {
    // Used now, or (smaller) never: either way the table no longer keeps it. A larger one
    // waits for its doubling.
    Spare spare = std::exchange(spare_, Spare());
    spare_held_.store(0, std::memory_order_relaxed);
    if (spare.capacity_ == capacity) buffer_ = std::move(spare.buffer_);
  }
  if (buffer_ == nullptr) buffer_ = MakeSpare(capacity).buffer_;
  slots_ = static_cast<Slot*>(buffer_.get());
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  old_ = std::move(old);
}

void FlatTable::Migrate(size_t slots) {
  Old& old = *old_;
  const size_t old_capacity = old.mask + 1;
  for (; slots > 0 && old.next < old_capacity; --slots, ++old.next) {
    Slot& s = old.slots[old.next];
    if (s.value == kEmpty || s.value == kMoved) continue;
    Place(s.tag, s.value);
    // Not kEmpty: probes for other keys must still pass over this slot.
    s.value = kMoved;
  }
  if (old.next == old_capacity) old_.reset();
}

size_t FlatTable::SpareWanted() const {
  const size_t next = capacity() * 2;
  if (size_ * 4 <= capacity() * 3 || spare_.capacity_ == next) return 0;
  return next;
}

FlatTable::Spare FlatTable::MakeSpare(size_t capacity) {
  Spare spare;
  spare.buffer_ = AllocateHuge(capacity * sizeof(Slot));
  Slot* slots = static_cast<Slot*>(spare.buffer_.get());
  for (size_t i = 0; i < capacity; ++i) slots[i].value = kEmpty;
  spare.capacity_ = capacity;
  return spare;
}

void FlatTable::ProvideSpare(Spare spare) {
  // A spare for another capacity (the table grew meanwhile by more) would never be used.
  if (spare.capacity_ <= capacity()) return;
  spare_ = std::move(spare);
  spare_held_.store(spare_.capacity_, std::memory_order_relaxed);
}

size_t FlatTable::Locate(uint64_t key, uint32_t value) const {
  const uint32_t tag = TagOf(key);
  for (size_t i = Home(tag);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.value == kEmpty) return SIZE_MAX;
    if (s.value == value && s.tag == tag) return i;
  }
}

size_t FlatTable::LocateOld(uint64_t key, uint32_t value) const {
  const uint32_t tag = TagOf(key);
  for (size_t i = HomeIn(tag, old_->shift, old_->mask);; i = (i + 1) & old_->mask) {
    const Slot& s = old_->slots[i];
    if (s.value == kEmpty) return SIZE_MAX;
    if (s.value == value && s.tag == tag) return i;
  }
}

bool FlatTable::Replace(uint64_t key, uint32_t old_value, uint32_t new_value) {
  if (const size_t i = Locate(key, old_value); i != SIZE_MAX) {
    slots_[i].value = new_value;
    return true;
  }
  if (!old_) return false;
  const size_t i = LocateOld(key, old_value);
  if (i == SIZE_MAX) return false;
  old_->slots[i].value = new_value;
  return true;
}

bool FlatTable::Erase(uint64_t key, uint32_t value) {
  size_t hole = Locate(key, value);
  if (hole == SIZE_MAX && old_) {
    // Not moved yet. The old table only empties from here on: a mark, no shifting, so
    // that no slot moves behind the migration's position.
    const size_t i = LocateOld(key, value);
    if (i == SIZE_MAX) return false;
    old_->slots[i].value = kMoved;
    --size_;
    return true;
  }
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
