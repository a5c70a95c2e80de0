// Private to server/index: the Index's tables and records. index.cc holds the mutations
// and boot loading, index_query.cc the read side. See docs/architecture.md §Index for the
// layout and its memory budget.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/events.h"
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

// The contexts a deletion of a holder's copies reaches: `only` (kNil: every context) but
// none of `spared` (interned ids; a holder-wide clear a group keeps off some contexts,
// Index::ClearHolderExcept).
struct ContextFilter {
  ContextFilter(uint32_t only_context) : only(only_context) {}  // NOLINT: kNil or one id
  ContextFilter(uint32_t only_context, std::span<const uint32_t> spared_contexts)
      : only(only_context), spared(spared_contexts) {}
  bool Reaches(uint32_t context) const {
    return (only == kNil || context == only) &&
           std::find(spared.begin(), spared.end(), context) == spared.end();
  }
  uint32_t only = kNil;
  std::span<const uint32_t> spared;
};

// One block key present in one context. Blocks of a context form a FIFO list in creation
// (stamp) order: the eviction order.
//
// Its copies take one of two forms. Inline (the common case, one copy with the standard
// engine hash and a refcount up to kMaxInlineRefcount): `copy` is the holder and the meta
// bits hold its tier, location flag and refcount; no EntryRec, and no link into the holder's
// list (a clear of the holder scans the block records for it: ClearInlineCopies). Chained
// (a second copy, a non-standard engine hash, or a larger refcount): `copy` is the first
// EntryRec of the block's chain and the meta bits its length (kChainCountElsewhere: in
// Impl::long_chains_). A block turns chained for good: going back would change the handles
// of copies that clears and removes are iterating over. An inline block with copy == kNil
// has no copy yet (between CreateBlock and its first copy), as has a freed record.
//
// 32 bytes: what a block with one copy costs beside its forward slot (docs/architecture.md
// §Index). Hence 16-bit context ids (kMaxContexts) and 24-bit depths (kMaxBlockDepth).
#pragma pack(push, 4)
struct BlockRec {
  uint64_t key;
  uint32_t fifo_prev;  // neighbours in the context's FIFO
  uint32_t fifo_next;
  uint32_t copy;  // inline: the holder (kNil: none); chained: the first entry
  // Creation order, 48 bits: one counter for the whole index, so that a context's blocks
  // are in stamp order (its FIFO) and storage, which keys entry records by stamp, appends
  // new blocks at the end of its key space (docs/storage.md §Database layout).
  uint32_t stamp_lo;
  uint16_t stamp_hi;
  uint16_t context;
  uint32_t depth_meta;  // depth << 8 | meta

  uint64_t stamp() const { return uint64_t{stamp_hi} << 32 | stamp_lo; }
  uint32_t depth() const { return depth_meta >> 8; }
  uint8_t meta() const { return static_cast<uint8_t>(depth_meta); }
  void set_meta(uint32_t meta) { depth_meta = (depth_meta & ~0xffu) | (meta & 0xffu); }
  bool chained() const { return depth_meta & kMetaChained; }

  // Meta bits. Both forms: bit 0 chained. Inline: tier (2 bits), location flag, refcount
  // (4 bits). Chained: the chain's length (7 bits).
  static constexpr uint32_t kMetaChained = 1;
  static constexpr int kMetaTierShift = 1;
  static constexpr uint32_t kMetaLocation = 8;
  static constexpr int kMetaRefShift = 4;
  static constexpr int kMetaCountShift = 1;
  static constexpr uint32_t kChainCountElsewhere = 127;
};
#pragma pack(pop)
static_assert(sizeof(BlockRec) == 32);

inline constexpr uint16_t kMaxInlineRefcount = 15;
static_assert(kNumTiers <= 4);
// Context ids are 16 bits in the block record (docs/limits.md).
inline constexpr size_t kMaxContexts = size_t{1} << 16;

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
  uint64_t key_hash = 0;  // ContextKeyDigest(key), for the replica digest
  bool live = false;
  uint32_t fifo_head = kNil;
  uint32_t fifo_tail = kNil;
  uint64_t blocks = 0;
  uint64_t entries = 0;
  uint64_t evicted_blocks = 0;
};

struct HolderRec {
  HolderKey key;
  uint64_t key_hash = 0;  // HolderKeyDigest(key), for the replica digest
  bool live = false;
  uint32_t head = kNil;  // its chained copies (EntryRecs), a doubly linked list
  uint64_t entries = 0;
  uint64_t inline_entries = 0;  // of `entries`: inline copies, linked from no list
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
  // Every accessor below indexes its pool with the masked id on both paths (Id(c) == c for
  // an entry). Written as `IsInline(c) ? blocks_[c & ~kInlineCopy] : entries_[c]`, GCC 12.2
  // at -O2 (tree PRE) shared `c >> 16`, both pools' chunk index, between the paths and so
  // dropped the mask on the inline one: a release build read chunk 2^15 of the block pool.
  // UBSan had nothing to flag; index_record_test's release run (scripts/test) catches it.
  static uint32_t Id(uint32_t c) { return c & ~kInlineCopy; }
  uint32_t BlockOf(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? id : entries_[id].block;
  }
  uint32_t HolderOf(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? blocks_[id].copy : entries_[id].holder;
  }
  uint8_t TierOf(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? (blocks_[id].meta() >> BlockRec::kMetaTierShift) & 3 : entries_[id].tier;
  }
  uint16_t RefcountOf(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? blocks_[id].meta() >> BlockRec::kMetaRefShift : entries_[id].refcount;
  }
  uint64_t EngineHashOf(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? blocks_[id].key : entries_[id].engine_hash;
  }
  bool HasAlias(uint32_t c) const { return !IsInline(c) && (entries_[c].flags & kEntryHasAlias); }
  bool HasLocation(uint32_t c) const {
    const uint32_t id = Id(c);
    return IsInline(c) ? (blocks_[id].meta() & BlockRec::kMetaLocation)
                       : (entries_[id].flags & kEntryHasLocation);
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
    if (!rec.chained()) return rec.copy == kNil ? 0 : 1;
    const uint32_t count = rec.meta() >> BlockRec::kMetaCountShift;
    return count == BlockRec::kChainCountElsewhere ? long_chains_.at(b) : count;
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
  void ApplyStore(const StoreCommand& c, uint64_t seed, MutationList* out, CommandTally* tally);
  void ApplyRemove(const RemoveCommand& c, MutationList* out, CommandTally* tally);
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
  // Sets chained block b's chain length (CopyCount).
  void SetChainCount(uint32_t b, uint32_t count);
  // Links chained copy e at the head of its holder's list / unlinks it.
  void LinkToHolder(uint32_t e);
  void UnlinkFromHolder(uint32_t e);
  // Deletes the inline copies of the holders selected in `holders` (indexed by holder id)
  // in the contexts `contexts` reaches and `tier` (nullopt: any): one pass over the block
  // records, since inline copies are in no holder list.
  void ClearInlineCopies(const std::vector<bool>& holders, const ContextFilter& contexts,
                         std::optional<Tier> tier, MutationCause cause, MutationList* out);
  // The ids of those of `contexts` that exist (for a ContextFilter's spared contexts).
  std::vector<uint32_t> ContextIds(std::span<const ContextKey> contexts) const;
  // Whether the record or stamp limits leave no room for one more store (docs/limits.md).
  bool Full() const;
  // Logs, the first time a store is dropped for it, which limit dropped it.
  enum class IndexLimit { kRecords, kContexts, kDepth };
  void LogLimitOnce(IndexLimit limit);
  void EmitEntry(uint32_t e, MutationCause cause, MutationList* out) const;

  const std::string& LocationOf(uint32_t e) const;

  // The replica digest's element of copy c (server/model/replica_digest.h).
  uint64_t EntryDigest(uint32_t c) const;
  // Adds (or, with `sign` -1, takes away) copy c's element from digest_; a no-op unless
  // options_.replica_digest.
  void DigestEntry(uint32_t c, int sign) {
    if (!options_.replica_digest) return;
    const uint64_t element = EntryDigest(c);
    digest_ += sign > 0 ? element : uint64_t{0} - element;
  }
  // Sets contexts_[id] / holders_[id]'s key and key hash, and adds its element.
  void NameContext(uint32_t id, const ContextKey& key);
  void NameHolder(uint32_t id, const HolderKey& key);

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
  // Chain lengths of blocks with kChainCountElsewhere or more copies (rare: a prompt held by
  // over a hundred instances).
  std::unordered_map<uint32_t, uint32_t> long_chains_;
  uint64_t entry_count_ = 0;
  uint64_t evicted_blocks_ = 0;
  // The replica digest of the contexts, holders and entries (replica_digest.h), kept on
  // every change when options_.replica_digest.
  uint64_t digest_ = 0;
  uint32_t logged_limits_ = 0;  // bit i: IndexLimit i logged
};

}  // namespace kvatlas::server
