// Private to server/index: the Index's tables and records. index.cc holds the mutations
// and boot loading, index_query.cc the read side. See docs/architecture.md §Index for the
// layout and its memory budget.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/index/flat_table.h"
#include "server/index/index.h"
#include "server/index/pool.h"

namespace kvatlas::server {

inline constexpr uint32_t kNil = UINT32_MAX;

// A copy (block × holder × tier) is named by a 32-bit handle: a block's single copy kept
// inline in its BlockRec is `block | kInlineCopy`; a copy in the chained form is its EntryRec
// id. Record ids therefore stay below kInlineCopy (kMaxRecords, docs/limits.md).
inline constexpr uint32_t kInlineCopy = 1u << 31;
inline constexpr uint32_t kMaxRecords = kInlineCopy - 1;
// Stamps are 48 bits in the block record (docs/limits.md).
inline constexpr uint64_t kMaxStamp = (uint64_t{1} << 48) - 1;

// One block key present in one context. Blocks of a context form a FIFO list in creation
// (stamp) order: the eviction order.
//
// Its copies take one of two forms. Inline (the common case, one copy with the standard
// engine hash): `copy` is the holder, `holder_prev`/`holder_next` link the copy into its
// holder's list (handles), `meta` holds its tier, location flag and refcount; no EntryRec.
// Chained (a second copy, a non-standard engine hash, or a refcount past
// kMaxInlineRefcount): `copy` is the first EntryRec of the block's chain and `holder_prev`
// the chain's length. A block turns chained for good: going back would change the handles
// of copies that clears and removes are iterating over. An inline block with copy == kNil
// has no copy yet (between CreateBlock and its first copy).
#pragma pack(push, 4)
struct BlockRec {
  uint64_t key;
  uint32_t context;
  uint32_t depth;
  uint32_t fifo_prev;  // neighbours in the context's FIFO
  uint32_t fifo_next;
  uint32_t copy;         // inline: the holder; chained: the first entry
  uint32_t holder_prev;  // inline: holder list; chained: number of entries
  uint32_t holder_next;  // inline: holder list
  // Creation order, 48 bits: one counter for the whole index, so that a context's blocks
  // are in stamp order (its FIFO) and storage, which keys entry records by stamp, appends
  // new blocks at the end of its key space (docs/storage.md §Database layout).
  uint32_t stamp_lo;
  uint16_t stamp_hi;
  uint16_t meta;  // kMetaChained | inline copy: tier, kMetaLocation, refcount << kMetaRefShift

  uint64_t stamp() const { return uint64_t{stamp_hi} << 32 | stamp_lo; }
  bool chained() const { return meta & kMetaChained; }

  static constexpr uint16_t kMetaChained = 1;
  static constexpr int kMetaTierShift = 1;  // 2 bits
  static constexpr uint16_t kMetaLocation = 8;
  static constexpr int kMetaRefShift = 4;  // 12 bits
};
#pragma pack(pop)
static_assert(sizeof(BlockRec) == 44);

inline constexpr uint16_t kMaxInlineRefcount = (1u << 12) - 1;
static_assert(kNumTiers <= 4);

// Blocks with at least this many entries ("hot": a shared system prompt held by many
// instances) also index their entries by (block, holder, tier), so that stores and
// removes on them do not walk the whole chain.
inline constexpr uint32_t kHotChain = 8;

// One (block, holder, tier) copy of a chained block. Linked into its block's chain
// (singly) and its holder's list (doubly, handles, so removing any copy is O(1) apart from
// the short block chain).
struct EntryRec {
  uint64_t engine_hash;  // the publisher's hash; == block key when it publishes standard ones
  uint32_t block;
  uint32_t holder;
  uint32_t next_in_block;
  uint32_t holder_prev;
  uint32_t holder_next;
  uint8_t tier;
  uint8_t flags;
  uint16_t refcount;  // duplicate stores of one block by one holder in one tier
};
static_assert(sizeof(EntryRec) == 32);

inline constexpr uint8_t kEntryHasAlias = 1;
inline constexpr uint8_t kEntryHasLocation = 2;
inline constexpr uint16_t kMaxRefcount = UINT16_MAX;

struct ContextRec {
  ContextKey key;
  bool live = false;
  uint32_t fifo_head = kNil;
  uint32_t fifo_tail = kNil;
  uint64_t blocks = 0;
  uint64_t entries = 0;
  uint64_t evicted_blocks = 0;
};

struct HolderRec {
  HolderKey key;
  bool live = false;
  uint32_t head = kNil;
  uint64_t entries = 0;
  uint64_t by_tier[kNumTiers] = {};
};

// Folds a context into a block key for the forward table (a bijection per context).
inline uint64_t ForwardKey(uint32_t context, uint64_t key) {
  uint64_t m = (uint64_t{context} + 1) * 0x9e3779b97f4a7c15ULL;
  m ^= m >> 29;
  return key ^ m;
}

// Folds (context, holder) into an engine hash for the alias table (a bijection per pair).
inline uint64_t AliasKey(uint32_t context, uint32_t holder, uint64_t engine_hash) {
  uint64_t m = ((uint64_t{holder} << 32) | context) * 0xc2b2ae3d27d4eb4fULL + 0x165667b19e3779f9ULL;
  m ^= m >> 31;
  return engine_hash ^ m;
}

inline uint64_t HotKey(uint32_t block, uint32_t holder, uint8_t tier) {
  return (uint64_t{block} << 32 | holder) * 0x9e3779b97f4a7c15ULL + tier;
}

class Index::Impl {
 public:
  explicit Impl(const IndexOptions& options) : options_(options) {}

  // --- shared lookups (index_query.cc reads them too) ---
  uint32_t FindContext(const ContextKey& key) const {
    auto it = context_ids_.find(key);
    return it == context_ids_.end() ? kNil : it->second;
  }
  uint32_t FindHolder(const HolderKey& key) const {
    auto it = holder_ids_.find(key);
    return it == holder_ids_.end() ? kNil : it->second;
  }
  uint32_t FindBlock(uint32_t context, uint64_t key) const {
    return forward_.Find(ForwardKey(context, key), [&](uint32_t b) {
      const BlockRec& rec = blocks_[b];
      return rec.context == context && rec.key == key;
    });
  }
  // --- copies by handle (kInlineCopy above) ---
  static bool IsInline(uint32_t c) { return c & kInlineCopy; }
  uint32_t BlockOf(uint32_t c) const { return IsInline(c) ? c & ~kInlineCopy : entries_[c].block; }
  uint32_t HolderOf(uint32_t c) const {
    return IsInline(c) ? blocks_[c & ~kInlineCopy].copy : entries_[c].holder;
  }
  uint8_t TierOf(uint32_t c) const {
    return IsInline(c) ? (blocks_[c & ~kInlineCopy].meta >> BlockRec::kMetaTierShift) & 3
                       : entries_[c].tier;
  }
  uint16_t RefcountOf(uint32_t c) const {
    return IsInline(c) ? blocks_[c & ~kInlineCopy].meta >> BlockRec::kMetaRefShift
                       : entries_[c].refcount;
  }
  uint64_t EngineHashOf(uint32_t c) const {
    return IsInline(c) ? blocks_[c & ~kInlineCopy].key : entries_[c].engine_hash;
  }
  bool HasAlias(uint32_t c) const { return !IsInline(c) && (entries_[c].flags & kEntryHasAlias); }
  bool HasLocation(uint32_t c) const {
    return IsInline(c) ? (blocks_[c & ~kInlineCopy].meta & BlockRec::kMetaLocation)
                       : (entries_[c].flags & kEntryHasLocation);
  }
  uint32_t HolderPrev(uint32_t c) const {
    return IsInline(c) ? blocks_[c & ~kInlineCopy].holder_prev : entries_[c].holder_prev;
  }
  uint32_t HolderNext(uint32_t c) const {
    return IsInline(c) ? blocks_[c & ~kInlineCopy].holder_next : entries_[c].holder_next;
  }
  void SetHolderPrev(uint32_t c, uint32_t v) {
    (IsInline(c) ? blocks_[c & ~kInlineCopy].holder_prev : entries_[c].holder_prev) = v;
  }
  void SetHolderNext(uint32_t c, uint32_t v) {
    (IsInline(c) ? blocks_[c & ~kInlineCopy].holder_next : entries_[c].holder_next) = v;
  }
  // Block b's first copy (kNil: none), and the copy after c in its block.
  uint32_t FirstCopy(uint32_t b) const {
    const BlockRec& rec = blocks_[b];
    if (rec.chained()) return rec.copy;
    return rec.copy == kNil ? kNil : b | kInlineCopy;
  }
  uint32_t NextCopy(uint32_t c) const { return IsInline(c) ? kNil : entries_[c].next_in_block; }
  uint32_t CopyCount(uint32_t b) const {
    const BlockRec& rec = blocks_[b];
    if (rec.chained()) return rec.holder_prev;
    return rec.copy == kNil ? 0 : 1;
  }

  // The copy of `holder` in `tier` on block b, or kNil.
  uint32_t FindEntry(uint32_t b, uint32_t holder, Tier tier) const {
    const auto t = static_cast<uint8_t>(tier);
    if (CopyCount(b) >= kHotChain) {
      return hot_.Find(HotKey(b, holder, t), [&](uint32_t e) {
        const EntryRec& rec = entries_[e];
        return rec.block == b && rec.holder == holder && rec.tier == t;
      });
    }
    for (uint32_t c = FirstCopy(b); c != kNil; c = NextCopy(c)) {
      if (HolderOf(c) == holder && TierOf(c) == t) return c;
    }
    return kNil;
  }
  // The copies of `holder` on block b (at most one per tier) into out; returns how many.
  int HolderEntries(uint32_t b, uint32_t holder, uint32_t out[kNumTiers]) const {
    int n = 0;
    if (CopyCount(b) >= kHotChain) {
      for (int t = 0; t < kNumTiers; ++t) {
        const uint32_t e = FindEntry(b, holder, static_cast<Tier>(t));
        if (e != kNil) out[n++] = e;
      }
      return n;
    }
    for (uint32_t c = FirstCopy(b); c != kNil; c = NextCopy(c)) {
      if (HolderOf(c) == holder) out[n++] = c;
    }
    return n;
  }
  uint32_t FindAlias(uint32_t context, uint32_t holder, uint64_t engine_hash) const;

  // --- mutations (index.cc) ---
  void ApplyStore(const StoreCommand& c, uint64_t seed, MutationList* out);
  void ApplyRemove(const RemoveCommand& c, MutationList* out);
  void ApplyClear(const ClearCommand& c, MutationList* out);

  uint32_t InternContext(const ContextKey& key, MutationList* out);
  uint32_t InternHolder(const HolderKey& key, MutationList* out);
  uint32_t CreateBlock(uint32_t context, uint64_t key, uint32_t depth, uint64_t stamp);
  // Adds a copy to block b (inline when it is the block's first and simple, else chained);
  // returns its handle.
  uint32_t CreateEntry(uint32_t b, uint32_t holder, Tier tier, uint64_t engine_hash,
                       uint16_t refcount, std::string location);
  // Moves block b's copies to the chained form (no-op if it is); returns the handle of its
  // former inline copy (kNil if it had none).
  uint32_t MakeChained(uint32_t b);
  void SetRefcount(uint32_t c, uint16_t refcount);
  void SetEntryLocation(uint32_t c, std::string location);
  void AttachAlias(uint32_t e);
  void ReleaseAlias(uint32_t e);
  // Deletes entry e; with `cascade`, also its block when e was the block's last entry.
  void DeleteEntry(uint32_t e, MutationCause cause, MutationList* out, bool cascade = true);
  // Deletes block b with all its entries.
  void DeleteBlock(uint32_t b, MutationCause cause, MutationList* out);
  void RemoveBlockRecord(uint32_t b, MutationCause cause, MutationList* out);
  // Deletes every entry of `holder` on block b that carries `engine_hash`.
  void RemoveAliased(uint32_t b, uint32_t holder, uint64_t engine_hash, MutationList* out);
  void EvictOverflow(uint32_t context, MutationList* out);
  // Whether the record or stamp limits leave no room for one more store (docs/limits.md).
  bool Full() const;
  void LogFullOnce();
  void EmitEntry(uint32_t e, MutationCause cause, MutationList* out) const;

  const std::string& LocationOf(uint32_t e) const;

  IndexOptions options_;
  std::vector<ContextRec> contexts_;
  uint64_t next_stamp_ = 1;  // the stamp of the next block created (BlockRec::stamp)
  std::unordered_map<ContextKey, uint32_t, ContextKeyHash> context_ids_;
  std::vector<HolderRec> holders_;
  std::unordered_map<HolderKey, uint32_t, HolderKeyHash> holder_ids_;
  Pool<BlockRec> blocks_;
  Pool<EntryRec> entries_;
  FlatTable forward_;  // ForwardKey(context, key) → block
  FlatTable aliases_;  // AliasKey(context, holder, engine hash) → block
  FlatTable hot_;      // HotKey(block, holder, tier) → entry, for hot blocks only
  std::unordered_map<uint32_t, std::string> locations_;  // copy handle → location (sparse)
  uint64_t entry_count_ = 0;
  uint64_t evicted_blocks_ = 0;
  bool logged_full_ = false;
};

}  // namespace kvatlas::server
