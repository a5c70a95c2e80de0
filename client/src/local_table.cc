#include "client/src/local_table.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "kvatlas/common/huge_buffer.h"

namespace kvatlas::client_internal {
namespace {

constexpr uint32_t kNil = UINT32_MAX;
// Keys resolved ahead of the walk: their slots, then their first copies, are loaded in
// parallel before the (dependent) walk reads them.
constexpr size_t kWindow = 16;

}  // namespace

namespace {

// A copy is (holder, tier), packed into 32 bits: tier in the top 2 bits.
uint32_t Pack(uint32_t holder, Tier tier) { return (static_cast<uint32_t>(tier) << 30) | holder; }
uint32_t HolderOf(uint32_t packed) { return packed & ((1u << 30) - 1); }
Tier TierOf(uint32_t packed) { return static_cast<Tier>(packed >> 30); }

}  // namespace

class LocalTable::ContextTable {
 public:
  // A block and its first copy inline (most blocks have one copy: one cache line per block
  // in a lookup); further copies chain through the pool from `more`.
  struct Slot {
    uint64_t key;
    uint32_t first;  // packed copy; kNil marks an empty slot
    uint32_t more;   // first further copy in the pool, or kNil
  };
  struct Copy {
    uint32_t packed;
    uint32_t next;  // next further copy of the same block; also the free-list link
  };

  // Grown slots built from a table without changing it (PrepareGrowth), for Adopt.
  struct Grown {
    std::unique_ptr<void, FreeDeleter> buffer;
    Slot* slots = nullptr;
    size_t mask = 0;
    unsigned shift = 64;
    uint64_t source_generation = 0;  // the table's generation_ when built
  };

  ContextTable() { (void)Adopt(Rehashed(16)); }

  // The slots this table needs for `extra` more blocks without growing, rehashed from the
  // current ones; nullopt when it has room. Reads only: may run beside lookups.
  std::optional<Grown> PrepareGrowth(size_t extra) const {
    size_t capacity = mask_ + 1;
    while ((used_ + extra) * 8 > capacity * 7) capacity *= 2;
    if (capacity == mask_ + 1) return std::nullopt;
    return Rehashed(capacity);
  }

  // Swaps in `grown` (O(1)) if nothing changed this table since it was built; else false.
  [[nodiscard]] bool Adopt(Grown&& grown) {
    if (grown.source_generation != generation_) return false;
    buffer_ = std::move(grown.buffer);
    slots_ = grown.slots;
    mask_ = grown.mask;
    shift_ = grown.shift;
    return true;
  }

  // The slot holding `key`, or nullptr.
  const Slot* Find(uint64_t key) const {
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.first == kNil) return nullptr;
      if (s.key == key) return &s;
    }
  }
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[Home(key)]); }
  void PrefetchCopy(uint32_t copy) const { __builtin_prefetch(&copies_[copy]); }
  const Copy& copy(uint32_t c) const { return copies_[c]; }

  // Calls visit(packed) for every copy of the block in `slot`.
  template <typename F>
  void ForEachCopy(const Slot& slot, F&& visit) const {
    visit(slot.first);
    for (uint32_t c = slot.more; c != kNil; c = copies_[c].next) visit(copies_[c].packed);
  }

  const std::string& LocationOf(uint64_t key, uint32_t packed) const {
    static const std::string kNone;
    const auto it = locations_.find(key);
    if (it == locations_.end()) return kNone;
    for (const auto& [p, location] : it->second) {
      if (p == packed) return location;
    }
    return kNone;
  }

  void Add(uint64_t key, uint32_t packed, const std::string* location) {
    ++generation_;  // any change may touch a slot (its first copy or chain head)
    size_t i = Home(key);
    for (; slots_[i].first != kNil; i = (i + 1) & mask_) {
      if (slots_[i].key != key) continue;
      bool present = slots_[i].first == packed;
      for (uint32_t c = slots_[i].more; c != kNil && !present; c = copies_[c].next) {
        present = copies_[c].packed == packed;
      }
      if (!present) slots_[i].more = NewCopy(packed, slots_[i].more);
      if (!present) ++live_copies_;
      SetLocation(key, packed, location);
      return;
    }
    slots_[i] = Slot{key, packed, kNil};
    ++live_copies_;
    SetLocation(key, packed, location);
    if (++used_ * 8 > (mask_ + 1) * 7) (void)Adopt(Rehashed((mask_ + 1) * 2));
  }

  void Remove(uint64_t key, uint32_t packed) {
    ++generation_;
    for (size_t i = Home(key); slots_[i].first != kNil; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.key != key) continue;
      if (slot.first == packed) {
        if (slot.more == kNil) {
          EraseSlot(i);
        } else {  // the first further copy moves inline
          const uint32_t c = slot.more;
          slot.first = copies_[c].packed;
          slot.more = copies_[c].next;
          FreeCopy(c);
        }
      } else {
        uint32_t* link = &slot.more;
        while (*link != kNil && copies_[*link].packed != packed) link = &copies_[*link].next;
        if (*link == kNil) return;
        const uint32_t c = *link;
        *link = copies_[c].next;
        FreeCopy(c);
      }
      --live_copies_;
      ClearLocation(key, packed);
      return;
    }
  }

  uint64_t blocks() const { return used_; }
  uint64_t copies() const { return live_copies_; }
  uint64_t memory_bytes() const {
    uint64_t bytes =
        HugeAllocatedBytes((mask_ + 1) * sizeof(Slot)) + copies_.capacity() * sizeof(Copy);
    for (const auto& [key, list] : locations_) {
      bytes += 64;
      for (const auto& [packed, location] : list) bytes += 40 + location.capacity();
    }
    return bytes;
  }

 private:
  static size_t HomeIn(uint64_t key, unsigned shift, size_t mask) {
    return static_cast<size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift) & mask;
  }
  size_t Home(uint64_t key) const { return HomeIn(key, shift_, mask_); }

  uint32_t NewCopy(uint32_t packed, uint32_t next) {
    uint32_t c;
    if (free_head_ != kNil) {
      c = free_head_;
      free_head_ = copies_[c].next;
    } else {
      c = static_cast<uint32_t>(copies_.size());
      copies_.push_back({});
    }
    copies_[c] = Copy{packed, next};
    return c;
  }

  void FreeCopy(uint32_t c) {
    copies_[c] = Copy{kNil, free_head_};
    free_head_ = c;
  }

  // Keeps `location` for the copy (an empty or absent one keeps what was there).
  void SetLocation(uint64_t key, uint32_t packed, const std::string* location) {
    if (location == nullptr || location->empty()) return;
    auto& list = locations_[key];
    for (auto& [p, value] : list) {
      if (p == packed) {
        value = *location;
        return;
      }
    }
    list.emplace_back(packed, *location);
  }

  void ClearLocation(uint64_t key, uint32_t packed) {
    const auto it = locations_.find(key);
    if (it == locations_.end()) return;
    std::erase_if(it->second, [packed](const auto& entry) { return entry.first == packed; });
    if (it->second.empty()) locations_.erase(it);
  }

  // Backward-shift deletion: pulls later members of the probe run into the hole so that
  // no tombstone is left and every key stays reachable from its home slot.
  void EraseSlot(size_t hole) {
    for (size_t j = (hole + 1) & mask_; slots_[j].first != kNil; j = (j + 1) & mask_) {
      const size_t home = Home(slots_[j].key);
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].first = kNil;
    --used_;
  }

  // A table of `capacity` slots (a power of two) holding this one's blocks. The slot array
  // lives on huge pages (huge_buffer.h): lookups touch random slots of a table of tens of
  // MB, and with 4 KiB pages each would also be a TLB miss.
  Grown Rehashed(size_t capacity) const {
    Grown g;
    g.buffer = AllocateHuge(capacity * sizeof(Slot));
    g.slots = static_cast<Slot*>(g.buffer.get());
    std::uninitialized_fill_n(g.slots, capacity, Slot{0, kNil, kNil});
    g.mask = capacity - 1;
    g.shift = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    g.source_generation = generation_;
    const size_t old_capacity = slots_ == nullptr ? 0 : mask_ + 1;
    for (size_t j = 0; j < old_capacity; ++j) {
      const Slot& s = slots_[j];
      if (s.first == kNil) continue;
      size_t i = HomeIn(s.key, g.shift, g.mask);
      while (g.slots[i].first != kNil) i = (i + 1) & g.mask;
      g.slots[i] = s;
    }
    return g;
  }

  std::unique_ptr<void, FreeDeleter> buffer_;
  Slot* slots_ = nullptr;  // mask_ + 1 slots in buffer_
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t used_ = 0;
  uint64_t generation_ = 0;  // counts slot changes: Adopt's proof that none happened
  std::vector<Copy> copies_;
  uint32_t free_head_ = kNil;
  uint64_t live_copies_ = 0;
  // SHARED-tier descriptors: block key → (packed copy, location); few blocks have any.
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, std::string>>> locations_;
};

struct LocalTable::Growth {
  ContextKey context;
  const ContextTable* table;  // the table it was built from, to check it is still tracked
  ContextTable::Grown grown;
};

void LocalTable::GrowthDeleter::operator()(Growth* growth) const { delete growth; }

LocalTable::LocalTable() = default;
LocalTable::~LocalTable() = default;

LocalTable::PreparedGrowth LocalTable::PrepareGrowth(const ContextKey& context,
                                                     size_t extra_blocks) const {
  const ContextTable* table = Find(context);
  if (table == nullptr) return nullptr;
  std::optional<ContextTable::Grown> grown = table->PrepareGrowth(extra_blocks);
  if (!grown) return nullptr;
  return PreparedGrowth(new Growth{context, table, std::move(*grown)});
}

bool LocalTable::AdoptGrowth(PreparedGrowth growth) {
  ContextTable* table = Find(growth->context);
  return table == growth->table && table->Adopt(std::move(growth->grown));
}

LocalTable::ContextTable* LocalTable::Find(const ContextKey& context) const {
  auto it = contexts_.find(context);
  return it == contexts_.end() ? nullptr : it->second.get();
}

bool LocalTable::Tracks(const ContextKey& context) const { return Find(context) != nullptr; }

void LocalTable::Track(const ContextKey& context) {
  auto& table = contexts_[context];
  if (!table) table = std::make_unique<ContextTable>();
}

uint32_t LocalTable::InternHolder(const HolderKey& holder) {
  // Ids fit the 30 bits a packed copy gives them (a billion holders: never reached).
  auto [it, inserted] = holder_ids_.try_emplace(holder, static_cast<uint32_t>(holders_.size()));
  if (inserted) holders_.push_back(holder);
  return it->second;
}

void LocalTable::Load(const ContextKey& context, std::span<const LocalCopy> copies) {
  auto table = std::make_unique<ContextTable>();
  for (const LocalCopy& c : copies)
    table->Add(c.key, Pack(InternHolder(c.holder), c.tier), &c.location);
  contexts_[context] = std::move(table);
}

void LocalTable::Apply(const FeedRecord& record) {
  ContextTable* table = Find(record.context);
  if (table == nullptr) return;
  const uint32_t packed = Pack(InternHolder(record.holder), record.tier);
  if (record.op == FeedOp::kStored) {
    const bool located = record.locations.size() == record.keys.size();
    for (size_t i = 0; i < record.keys.size(); ++i) {
      table->Add(record.keys[i], packed, located ? &record.locations[i] : nullptr);
    }
    return;
  }
  for (BlockKey key : record.keys) table->Remove(key, packed);
}

LookupResult LocalTable::Lookup(const ContextKey& context, std::span<const BlockKey> keys,
                                std::string_view instance_id, bool include_locations,
                                uint32_t max_blocks) const {
  LookupResult result;
  const size_t n = std::min<size_t>(keys.size(), max_blocks);
  result.blocks_queried = static_cast<uint32_t>(n);
  const ContextTable* table = Find(context);
  if (table == nullptr || n == 0) return result;

  thread_local PrefixWalk walk;
  thread_local std::vector<BlockKey> chain;  // the matched blocks' keys
  walk.Reset(holders_.size());
  chain.clear();
  // Pipelined: while window w is resolved and walked, the slots of window w + 1 are
  // already on their way; a block's further copies are prefetched when it is resolved.
  const ContextTable::Slot* slots[kWindow];
  for (size_t i = 0; i < std::min(n, kWindow); ++i) table->Prefetch(keys[i]);
  for (size_t depth = 0; depth < n; ++depth) {
    if (depth % kWindow == 0) {
      const size_t end = std::min(n, depth + kWindow);
      for (size_t i = end; i < std::min(n, end + kWindow); ++i) table->Prefetch(keys[i]);
      for (size_t i = depth; i < end; ++i) {
        slots[i - depth] = table->Find(keys[i]);
        if (slots[i - depth] != nullptr && slots[i - depth]->more != kNil) {
          table->PrefetchCopy(slots[i - depth]->more);
        }
      }
    }
    const ContextTable::Slot* slot = slots[depth % kWindow];
    if (slot == nullptr) break;
    table->ForEachCopy(*slot, [&](uint32_t packed) {
      const uint32_t holder = HolderOf(packed);
      if (depth == 0 && !instance_id.empty() && holders_[holder].id != instance_id) return;
      walk.Add(holder, TierOf(packed));
    });
    if (!walk.EndDepth()) break;
    chain.push_back(keys[depth]);
  }

  result.blocks_found = static_cast<uint32_t>(chain.size());
  const std::span<const PrefixWalk::Run> runs = walk.SortedRuns();
  result.holders.reserve(runs.size());
  for (const PrefixWalk::Run& r : runs) {
    if (r.disk == 0 && r.shared == 0) continue;
    HolderMatch match = PrefixWalk::MatchOf(r);
    match.holder = holders_[r.holder];
    if (include_locations && r.shared > 0) {
      match.shared_locations.reserve(r.shared);
      const uint32_t packed = Pack(r.holder, Tier::kShared);
      for (uint32_t i = 0; i < r.shared; ++i) {
        match.shared_locations.push_back(table->LocationOf(chain[i], packed));
      }
    }
    result.holders.push_back(std::move(match));
  }
  return result;
}

uint64_t LocalTable::blocks() const {
  uint64_t n = 0;
  for (const auto& [key, table] : contexts_) n += table->blocks();
  return n;
}

uint64_t LocalTable::copies() const {
  uint64_t n = 0;
  for (const auto& [key, table] : contexts_) n += table->copies();
  return n;
}

uint64_t LocalTable::memory_bytes() const {
  uint64_t n = holders_.size() * sizeof(HolderKey);
  for (const auto& [key, table] : contexts_) n += table->memory_bytes();
  return n;
}

}  // namespace kvatlas::client_internal
