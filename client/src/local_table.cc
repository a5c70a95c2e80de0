#include "client/src/local_table.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "client/src/segmented_array.h"
#include "common/internal/huge_buffer.h"
#include "common/internal/prefetch.h"

namespace kvatlas::client_internal {
namespace {

constexpr uint32_t kNil = UINT32_MAX;
// Keys whose hash slots a lookup resolves (and prefetches) at a time once it uses them.
constexpr size_t kAhead = 16;
// Records left by removed blocks below which the records are never compacted.
constexpr size_t kMinHolesToCompact = 1024;
// Records (16 bytes) a lookup walking adjacent records prefetches ahead of itself.
constexpr uint32_t kAheadBlocks = 32;

}  // namespace

namespace {

// A copy is (holder, tier), packed into 32 bits: tier in the top 2 bits.
uint32_t Pack(uint32_t holder, Tier tier) { return (static_cast<uint32_t>(tier) << 30) | holder; }
uint32_t HolderOf(uint32_t packed) { return packed & ((1u << 30) - 1); }
Tier TierOf(uint32_t packed) { return static_cast<Tier>(packed >> 30); }

}  // namespace

class LocalTable::ContextTable {
 public:
  // A block, with its first copy inline (most blocks have one copy), further copies chained
  // through the copy pool from `more`. Records are numbered as blocks are created, so the
  // blocks one record stored along a chain lie next to each other: a lookup walking that
  // chain reads consecutive records rather than a random slot per block.
  struct Block {
    uint64_t key;
    uint32_t first;  // packed copy; kNil marks a free record
    uint32_t more;   // first further copy in the pool, or kNil
  };
  // A hash slot: the low 32 bits of the block's key (a filter; the record holds the key) and
  // the record's number.
  struct Slot {
    uint32_t tag;
    uint32_t block;  // kNil marks an empty slot
  };
  struct Copy {
    uint32_t packed;
    uint32_t next;  // next further copy of the same block; also the free-list link
  };

  // What a table grows into, built from it without changing it (PrepareGrowth), for
  // Adopt: new slots, more record segments, or both with the records compacted.
  struct Grown {
    std::unique_ptr<void, FreeDeleter> buffer;
    Slot* slots = nullptr;
    size_t mask = 0;
    unsigned shift = 64;
    std::unique_ptr<SegmentedArray<Block>> compacted;  // the live records, renumbered
    std::vector<SegmentedArray<Block>::Segment> segments;
    uint64_t source_generation = 0;  // the table's generation_ when built
  };

  ContextTable() {
    (void)Adopt(Rebuilt(16, /*compact=*/false));
    for (auto& segment : blocks_.PrepareCapacity(1)) blocks_.Install(std::move(segment));
  }

  // What this table needs for `extra` more blocks without allocating; nullopt when it has
  // room. Reads only: may run beside lookups.
  std::optional<Grown> PrepareGrowth(size_t extra) const {
    size_t capacity = mask_ + 1;
    while ((used_ + extra) * 8 > capacity * 7) capacity *= 2;
    if (WantsCompaction(extra)) {
      Grown grown = Rebuilt(capacity, /*compact=*/true);
      grown.segments = grown.compacted->PrepareCapacity(used_ + extra);
      return grown;
    }
    std::vector<SegmentedArray<Block>::Segment> segments =
        blocks_.PrepareCapacity(blocks_.size() + extra);
    if (capacity == mask_ + 1 && segments.empty()) return std::nullopt;
    Grown grown = capacity == mask_ + 1 ? Grown{} : Rebuilt(capacity, /*compact=*/false);
    grown.segments = std::move(segments);
    grown.source_generation = generation_;
    return grown;
  }

  // Swaps in `grown` (O(1)) if nothing changed this table since it was built; else false.
  [[nodiscard]] bool Adopt(Grown&& grown) {
    if (grown.source_generation != generation_) return false;
    if (grown.slots != nullptr) {
      buffer_ = std::move(grown.buffer);
      slots_ = grown.slots;
      mask_ = grown.mask;
      shift_ = grown.shift;
    }
    if (grown.compacted) {
      blocks_ = std::move(*grown.compacted);
      holes_ = 0;
    }
    for (auto& segment : grown.segments) blocks_.Install(std::move(segment));
    return true;
  }

  const Block& block(uint32_t id) const { return blocks_[id]; }

  // The record of the block `key`, or kNil.
  uint32_t FindBlock(uint64_t key) const {
    const uint32_t tag = static_cast<uint32_t>(key);
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.block == kNil) return kNil;
      if (s.tag == tag && blocks_[s.block].key == key) return s.block;
    }
  }
  // The record of the first slot on `key`'s probe path whose tag matches, or kNil (then
  // the block is absent). Reads only slots; the caller checks the record's key.
  uint32_t Candidate(uint64_t key) const {
    const uint32_t tag = static_cast<uint32_t>(key);
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.block == kNil || s.tag == tag) return s.block;
    }
  }
  // The record after `id` (kNil: none) when it is the block `key`; else kNil.
  uint32_t NextIs(uint32_t id, uint64_t key) const {
    if (id == kNil || id + 1 >= blocks_.size()) return kNil;
    const Block& next = blocks_[id + 1];
    return next.first != kNil && next.key == key ? id + 1 : kNil;
  }
  void PrefetchSlot(uint64_t key) const { Prefetch(&slots_[Home(key)]); }
  void PrefetchBlock(uint32_t id) const {
    if (id < blocks_.size()) Prefetch(&blocks_[id]);
  }

  // Resolves the keys of a lookup, depth by depth, to their records. Two ways, chosen as
  // the chain shows itself:
  // - adjacent: a block is looked for first in the record after its parent's, where a chain
  //   stored by one record put it; the walk then reads consecutive records, prefetched
  //   ahead, instead of a random slot and record per block;
  // - hashed: after two blocks in a row elsewhere (a chain stored piecemeal, or continued
  //   by other records), windows of kAhead keys are resolved through the slots, the next
  //   window's slots and this window's records loading in parallel; a window whose blocks
  //   turn out consecutive switches back.
  class ChainResolver {
   public:
    ChainResolver(const ContextTable& table, std::span<const BlockKey> keys)
        : table_(table), keys_(keys) {}

    // The record of keys[depth], or kNil; depths must come in order from 0.
    uint32_t Next(size_t depth) {
      const uint64_t key = keys_[depth];
      uint32_t id = kNil;
      if (!hashed_) {
        id = table_.NextIs(last_, key);
        if (id == kNil) {
          PrefetchSlots(depth + 1, 2 * kAhead);  // the two windows hashed mode would resolve
          id = table_.FindBlock(key);
          if (id != kNil) {  // a run of records may start here: load it ahead of the walk
            for (uint32_t a = 4; a < kAheadBlocks; a += 4) table_.PrefetchBlock(id + a);
          }
          if (++misses_ >= 2) {
            hashed_ = true;
            current_.begin = current_.end = depth + 1;
          }
        } else {
          misses_ = 0;
          if (id % 4 == 0) table_.PrefetchBlock(id + kAheadBlocks);  // a line is 4 records
        }
      } else {
        if (depth == current_.end) ResolveWindow(depth);
        id = current_.ids[depth - current_.begin];
        if (id != kNil && table_.block(id).key != key) id = table_.FindBlock(key);  // tag clash
        if (depth + 1 == current_.end && current_.consecutive) {
          hashed_ = false;
          misses_ = 0;
        }
      }
      last_ = id;
      return id;
    }

   private:
    // Prefetches the slots of keys [from, from + count) not prefetched yet.
    void PrefetchSlots(size_t from, size_t count = kAhead) {
      prefetched_ = std::max(prefetched_, from);
      for (; prefetched_ < std::min(keys_.size(), from + count); ++prefetched_) {
        table_.PrefetchSlot(keys_[prefetched_]);
      }
    }

    // Makes [begin, begin + kAhead) the current window, resolved from its slots (prefetched
    // before), and resolves the window after it ahead, prefetching its records and the
    // slots of the one after that: each stage's loads overlap the walk of a window.
    void ResolveWindow(size_t begin) {
      if (ahead_.begin != begin || ahead_.end == ahead_.begin) Resolve(begin, &ahead_);
      std::swap(current_, ahead_);
      Resolve(current_.end, &ahead_);
      PrefetchSlots(ahead_.end);
    }

    struct Window {
      size_t begin = 0;
      size_t end = 0;
      bool consecutive = false;  // all found, in consecutive records
      uint32_t ids[kAhead];
    };

    void Resolve(size_t begin, Window* w) {
      w->begin = std::min(keys_.size(), begin);
      w->end = std::min(keys_.size(), begin + kAhead);
      w->consecutive = true;
      for (size_t i = w->begin; i < w->end; ++i) {
        const uint32_t id = table_.Candidate(keys_[i]);
        w->ids[i - w->begin] = id;
        if (id != kNil) table_.PrefetchBlock(id);
        w->consecutive &= id != kNil && (i == w->begin || id == w->ids[i - w->begin - 1] + 1);
      }
    }

    const ContextTable& table_;
    std::span<const BlockKey> keys_;
    uint32_t last_ = kNil;   // the record of the previous depth
    uint32_t misses_ = 0;    // blocks in a row not found after their parent's record
    size_t prefetched_ = 0;  // keys [0, prefetched_) have had their slots prefetched
    bool hashed_ = false;
    Window current_;  // the window being walked
    Window ahead_;    // the next one, resolved ahead (empty when not)
  };

  // Calls visit(packed) for every copy of `block`.
  template <typename F>
  void ForEachCopy(const Block& block, F&& visit) const {
    visit(block.first);
    for (uint32_t c = block.more; c != kNil; c = copies_[c].next) visit(copies_[c].packed);
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
    ++generation_;  // any change may touch a slot or a record
    const uint32_t tag = static_cast<uint32_t>(key);
    size_t i = Home(key);
    for (; slots_[i].block != kNil; i = (i + 1) & mask_) {
      if (slots_[i].tag != tag) continue;
      Block& b = blocks_[slots_[i].block];
      if (b.key != key) continue;
      bool present = b.first == packed;
      for (uint32_t c = b.more; c != kNil && !present; c = copies_[c].next) {
        present = copies_[c].packed == packed;
      }
      if (!present) b.more = NewCopy(packed, b.more);
      if (!present) ++live_copies_;
      SetLocation(key, packed, location);
      return;
    }
    const uint32_t id = blocks_.Append();
    blocks_[id] = Block{key, packed, kNil};
    slots_[i] = Slot{tag, id};
    ++live_copies_;
    SetLocation(key, packed, location);
    // Under the writer's lock: growth nobody prepared, and a backstop for compaction
    // (PrepareGrowth compacts at half this many holes, outside the lock).
    const bool full = ++used_ * 8 > (mask_ + 1) * 7;
    const bool holey = holes_ >= kMinHolesToCompact && holes_ > 2 * used_;
    if (full || holey) {
      (void)Adopt(Rebuilt(full ? (mask_ + 1) * 2 : mask_ + 1, WantsCompaction(0)));
    }
  }

  void Remove(uint64_t key, uint32_t packed) {
    ++generation_;
    const uint32_t tag = static_cast<uint32_t>(key);
    for (size_t i = Home(key); slots_[i].block != kNil; i = (i + 1) & mask_) {
      if (slots_[i].tag != tag) continue;
      const uint32_t id = slots_[i].block;
      Block& b = blocks_[id];
      if (b.key != key) continue;
      if (b.first == packed) {
        if (b.more == kNil) {
          EraseSlot(i);
          b.first = kNil;  // a hole until the next compaction
          ++holes_;
        } else {  // the first further copy moves inline
          const uint32_t c = b.more;
          b.first = copies_[c].packed;
          b.more = copies_[c].next;
          FreeCopy(c);
        }
      } else {
        uint32_t* link = &b.more;
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
    uint64_t bytes = HugeAllocatedBytes((mask_ + 1) * sizeof(Slot)) + blocks_.memory_bytes() +
                     copies_.capacity() * sizeof(Copy);
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

  // New blocks always take new records at the end, never the holes removed blocks left:
  // reusing those would scatter a chain stored later over them. Instead the records are
  // compacted (renumbered in order) once holes outnumber half the live blocks.
  bool WantsCompaction(size_t extra) const {
    return holes_ >= kMinHolesToCompact && holes_ * 2 > used_ + extra;
  }

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
    for (size_t j = (hole + 1) & mask_; slots_[j].block != kNil; j = (j + 1) & mask_) {
      const size_t home = Home(blocks_[slots_[j].block].key);
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].block = kNil;
    --used_;
  }

  // A table of `capacity` slots (a power of two) indexing this one's blocks, built from the
  // records in order (sequential reads); with `compact`, over a copy of the live records
  // renumbered without holes, in the same order. The slot array lives on huge pages
  // (huge_buffer.h): lookups touch random slots of a table of MBs.
  Grown Rebuilt(size_t capacity, bool compact) const {
    Grown g;
    g.buffer = AllocateHuge(capacity * sizeof(Slot));
    g.slots = static_cast<Slot*>(g.buffer.get());
    std::uninitialized_fill_n(g.slots, capacity, Slot{0, kNil});
    g.mask = capacity - 1;
    g.shift = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    g.source_generation = generation_;
    if (compact) g.compacted = std::make_unique<SegmentedArray<Block>>();
    for (uint32_t old_id = 0; old_id < blocks_.size(); ++old_id) {
      const Block& b = blocks_[old_id];
      if (b.first == kNil) continue;
      uint32_t id = old_id;
      if (compact) {
        id = g.compacted->Append();
        (*g.compacted)[id] = b;
      }
      size_t i = HomeIn(b.key, g.shift, g.mask);
      while (g.slots[i].block != kNil) i = (i + 1) & g.mask;
      g.slots[i] = Slot{static_cast<uint32_t>(b.key), id};
    }
    return g;
  }

  std::unique_ptr<void, FreeDeleter> buffer_;
  Slot* slots_ = nullptr;  // mask_ + 1 slots in buffer_
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t used_ = 0;          // live blocks
  uint64_t generation_ = 0;  // counts changes: Adopt's proof that none happened
  SegmentedArray<Block> blocks_;
  size_t holes_ = 0;  // records of removed blocks (first == kNil)
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
  contexts_[context] = std::make_unique<ContextTable>();
  Append(context, copies);
}

void LocalTable::Append(const ContextKey& context, std::span<const LocalCopy> copies) {
  std::unique_ptr<ContextTable>& table = contexts_[context];
  if (!table) table = std::make_unique<ContextTable>();
  for (const LocalCopy& c : copies)
    table->Add(c.key, Pack(InternHolder(c.holder), c.tier), &c.location);
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
  ContextTable::ChainResolver resolver(*table, keys.first(n));
  for (size_t depth = 0; depth < n; ++depth) {
    const uint32_t id = resolver.Next(depth);
    if (id == kNil) break;
    const ContextTable::Block& block = table->block(id);
    chain.push_back(keys[depth]);
    if (block.more == kNil && walk.RepeatsLastOnly(HolderOf(block.first), TierOf(block.first))) {
      continue;  // held exactly as its parent
    }
    table->ForEachCopy(block, [&](uint32_t packed) {
      const uint32_t holder = HolderOf(packed);
      if (depth == 0 && !instance_id.empty() && holders_[holder].id != instance_id) return;
      walk.Add(holder, TierOf(packed));
    });
    if (!walk.EndDepth()) {
      chain.pop_back();
      break;
    }
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
