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
  // The same rehash as a prepared growth, adopted at once (it cannot be stale).
  const bool adopted = Adopt(Rehashed(capacity() * 2));
  (void)adopted;
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

FlatTable::Grown FlatTable::Rehashed(size_t capacity) const {
  Grown g;
  if (spare_.capacity_ <= capacity) {
    // Used now, or (smaller) never: either way the table no longer keeps it.
    Spare spare = std::exchange(spare_, Spare());
    spare_held_.store(0, std::memory_order_relaxed);
    if (spare.capacity_ == capacity) g.buffer_ = std::move(spare.buffer_);
  }
  if (g.buffer_ == nullptr) g.buffer_ = MakeSpare(capacity).buffer_;
  g.slots_ = static_cast<Slot*>(g.buffer_.get());
  g.mask_ = capacity - 1;
  g.shift_ = 64 - std::countr_zero(capacity);
  // Probing inserts into a table without deletions, in any order, leave every slot
  // reachable from its home.
  const size_t old_capacity = mask_ + 1;
  for (size_t i = 0; i < old_capacity; ++i) {
    const Slot& s = slots_[i];
    if (s.value == kEmpty) continue;
    size_t j = HomeIn(s.tag, g.shift_, g.mask_);
    while (g.slots_[j].value != kEmpty) j = (j + 1) & g.mask_;
    g.slots_[j] = s;
  }
  g.source_ = this;
  g.source_generation_ = generation_;
  g.source_capacity_ = old_capacity;
  return g;
}

std::optional<FlatTable::Grown> FlatTable::PrepareGrowth(size_t extra_inserts) const {
  // Insert grows when (size + 1) * 8 > capacity * 7, by doubling: find where the doublings
  // end after `extra_inserts` more.
  size_t capacity = this->capacity();
  const size_t target = size_ + extra_inserts;
  while (target * 8 > capacity * 7) capacity *= 2;
  if (capacity == this->capacity()) return std::nullopt;
  return Rehashed(capacity);
}

bool FlatTable::Adopt(Grown&& grown) {
  if (grown.source_ != this || grown.source_generation_ != generation_ ||
      grown.source_capacity_ != capacity()) {
    return false;
  }
  buffer_ = std::move(grown.buffer_);
  slots_ = grown.slots_;
  mask_ = grown.mask_;
  shift_ = grown.shift_;
  grown.slots_ = nullptr;
  grown.source_ = nullptr;
  return true;
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
  ++generation_;
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
  ++generation_;
  return true;
}

}  // namespace kvatlas::server
