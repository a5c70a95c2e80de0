// The Index's write side: applying commands and evicting (loading: index_load.cc).
#include "server/index/index.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/internal/log.h"
#include "kvatlas/common/block_hasher.h"
#include "server/index/index_impl.h"
#include "server/model/replica_digest.h"

namespace kvatlas::server {

namespace {

template <typename... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Deletes the chained copies of `holder` (interned) in the contexts `contexts` reaches and
// `tier` (nullopt = every tier), ignoring refcounts: a walk of the holder's list, O(those
// copies). Its inline copies are in no list: ClearInlineCopies finds them.
// A template so that it can take the private Index::Impl without naming it.
template <typename Impl>
void DeleteChainedCopies(Impl& m, uint32_t holder, const ContextFilter& contexts,
                         std::optional<Tier> tier, MutationCause cause, MutationList* out) {
  uint32_t e = m.holders_[holder].head;
  while (e != kNil) {
    const uint32_t next = m.entries_[e].holder_next;
    const bool context_ok = contexts.Reaches(m.blocks_[m.BlockOf(e)].context);
    const bool tier_ok = !tier || m.TierOf(e) == static_cast<uint8_t>(*tier);
    // Deleting e never frees or renames `next`: it belongs to this holder, the block
    // cascade only frees e's block record (which has no copy left), and blocks never go
    // back from chained to inline.
    if (context_ok && tier_ok) m.DeleteEntry(e, cause, out);
    e = next;
  }
}

// Deletes every copy of `holder` in the contexts `contexts` reaches and `tier` as
// DeleteChainedCopies, ignoring refcounts: the one path of ClearCommand and
// Index::ClearHolderExcept (and of a single ExpireHolderCommand, which differs only in the
// cause it reports). O(the holder's chained copies), plus one pass over the block records
// when it holds inline copies.
template <typename Impl>
void DeleteHolderEntries(Impl& m, uint32_t holder, const ContextFilter& contexts,
                         std::optional<Tier> tier, MutationCause cause, MutationList* out) {
  DeleteChainedCopies(m, holder, contexts, tier, cause, out);
  if (m.holders_[holder].inline_entries == 0) return;
  std::vector<bool> selected(m.holders_.size(), false);
  selected[holder] = true;
  m.ClearInlineCopies(selected, contexts, tier, cause, out);
}

}  // namespace

Index::Index(IndexOptions options) : options_(options), impl_(std::make_unique<Impl>(options)) {}
Index::~Index() = default;
Index::Index(Index&&) noexcept = default;
Index& Index::operator=(Index&&) noexcept = default;

CommandTally Index::Apply(const Command& command, uint64_t seed, MutationList* out) {
  CommandTally tally;
  std::visit(Overloaded{
                 [&](const StoreCommand& c) { impl_->ApplyStore(c, seed, out, &tally); },
                 [&](const RemoveCommand& c) { impl_->ApplyRemove(c, out, &tally); },
                 [&](const ClearCommand& c) { impl_->ApplyClear(c, out); },
                 // The StateMachine decides whether an expiry applies (its race guard); here
                 // it is a clear of everything the holder has, reported as expired.
                 [&](const ExpireHolderCommand& c) {
                   (void)ExpireHolders(std::span<const HolderKey>(&c.holder, 1), out);
                 },
                 // Registry commands are the StateMachine's; they never reach the Index.
                 [](const RegisterCommand&) {},
                 [](const UnregisterCommand&) {},
                 [](const AnnounceCommand&) {},
                 [](const ForgetServerCommand&) {},
                 [](const AuditCommand&) {},
                 [](const LoadReportCommand&) {},
                 [](const PredictCommand&) {},
                 [](const DrainCommand&) {},
                 [](const PlaceContextCommand&) {},
                 [](const SetGroupAcceptingCommand&) {},
                 [](const DisownContextCommand&) {},
                 [](const SetGroupMembersCommand&) {},
                 [&](const ReplaceCopiesCommand& c) { ApplyReplace(c, seed, out); },
                 [&](const DropContextCommand& c) { DropContext(c.context, out); },
                 [](const FenceContextCommand&) {},
                 [](const ImportContextCommand&) {},
             },
             command);
  return tally;
}

size_t Index::ExpireHolders(std::span<const HolderKey> holders, MutationList* out,
                            std::span<const ContextKey> spared) {
  Impl& m = *impl_;
  const std::vector<uint32_t> spared_ids = m.ContextIds(spared);
  const ContextFilter contexts(kNil, spared_ids);
  size_t expired = 0;
  std::vector<bool> selected;  // holders whose inline copies the pass deletes
  for (const HolderKey& key : holders) {
    const uint32_t holder = m.FindHolder(key);
    if (holder == kNil || m.holders_[holder].entries == 0) continue;
    ++expired;
    DeleteChainedCopies(m, holder, contexts, std::nullopt, MutationCause::kExpired, out);
    if (m.holders_[holder].inline_entries == 0) continue;
    selected.resize(m.holders_.size(), false);
    selected[holder] = true;
  }
  if (!selected.empty()) {
    m.ClearInlineCopies(selected, contexts, std::nullopt, MutationCause::kExpired, out);
  }
  return expired;
}

void Index::DropContext(const ContextKey& context, MutationList* out) {
  Impl& m = *impl_;
  const uint32_t c = m.FindContext(context);
  if (c == kNil) return;
  while (m.contexts_[c].fifo_head != kNil) {
    m.DeleteBlock(m.contexts_[c].fifo_head, MutationCause::kCleared, out);
  }
}

std::vector<uint32_t> Index::Impl::ContextIds(std::span<const ContextKey> contexts) const {
  std::vector<uint32_t> ids;
  for (const ContextKey& context : contexts) {
    if (const uint32_t c = FindContext(context); c != kNil) ids.push_back(c);
  }
  return ids;
}

// ---------------------------------------------------------------------------------------
// Records

uint32_t Index::Impl::InternContext(const ContextKey& key, MutationList* out) {
  if (uint32_t id = FindContext(key); id != kNil) return id;
  if (contexts_.size() >= kMaxContexts) return kNil;
  const auto id = static_cast<uint32_t>(contexts_.size());
  contexts_.emplace_back();
  NameContext(id, key);
  context_ids_.emplace(key, id);
  if (out) {
    Mutation m;
    m.kind = MutationKind::kPutContext;
    m.context = id;
    m.context_key = std::make_shared<const ContextKey>(key);
    out->push_back(std::move(m));
  }
  return id;
}

uint32_t Index::Impl::InternHolder(const HolderKey& key, MutationList* out) {
  if (uint32_t id = FindHolder(key); id != kNil) return id;
  const auto id = static_cast<uint32_t>(holders_.size());
  holders_.emplace_back();
  NameHolder(id, key);
  holder_ids_.emplace(key, id);
  if (out) {
    Mutation m;
    m.kind = MutationKind::kPutHolder;
    m.holder = id;
    m.holder_key = std::make_shared<const HolderKey>(key);
    out->push_back(std::move(m));
  }
  return id;
}

// Names a context or holder record after `key`, with its key digest, and adds its element
// to the replica digest when it is kept.
template <typename Rec, typename Key>
void NameRecord(Rec* rec, const Key& key, uint64_t key_digest, uint64_t element, bool keep,
                uint64_t* digest) {
  rec->key = key;
  rec->live = true;
  rec->key_hash = key_digest;
  if (keep) *digest += element;
}

void Index::Impl::NameContext(uint32_t id, const ContextKey& key) {
  NameRecord(&contexts_[id], key, ContextKeyDigest(key), ContextElement(key),
             options_.replica_digest, &digest_);
}

void Index::Impl::NameHolder(uint32_t id, const HolderKey& key) {
  NameRecord(&holders_[id], key, HolderKeyDigest(key), HolderElement(key), options_.replica_digest,
             &digest_);
}

uint64_t Index::Impl::EntryDigest(uint32_t c) const {
  const BlockRec& block = blocks_[BlockOf(c)];
  EntryDigestFields fields;
  fields.context_key_hash = contexts_[block.context].key_hash;
  fields.holder_key_hash = holders_[HolderOf(c)].key_hash;
  fields.block_key = block.key;
  fields.depth = block.depth();
  fields.tier = TierOf(c);
  fields.refcount = RefcountOf(c);
  fields.engine_hash = EngineHashOf(c);
  fields.location_hash = HasLocation(c) ? LocationDigest(LocationOf(c)) : 0;
  return EntryElement(fields);
}

uint32_t Index::Impl::CreateBlock(uint32_t context, uint64_t key, uint32_t depth, uint64_t stamp) {
  const uint32_t b = blocks_.Allocate();
  ContextRec& ctx = contexts_[context];
  // Callers keep context < kMaxContexts, depth <= kMaxBlockDepth, stamp <= kMaxStamp.
  blocks_[b] = BlockRec{key,
                        ctx.fifo_tail,
                        kNil,
                        kNil,
                        static_cast<uint32_t>(stamp),
                        static_cast<uint16_t>(stamp >> 32),
                        static_cast<uint16_t>(context),
                        depth << 8};
  if (ctx.fifo_tail != kNil) {
    blocks_[ctx.fifo_tail].fifo_next = b;
  } else {
    ctx.fifo_head = b;
  }
  ctx.fifo_tail = b;
  ++ctx.blocks;
  forward_.Insert(ForwardKey(context, key), b);
  return b;
}

uint32_t Index::Impl::FindAlias(uint32_t context, uint32_t holder, uint64_t engine_hash) const {
  return aliases_.Find(AliasKey(context, holder, engine_hash), [&](uint32_t b) {
    if (blocks_[b].context != context) return false;
    uint32_t mine[kNumTiers];
    const int n = HolderEntries(b, holder, mine);
    for (int i = 0; i < n; ++i) {
      if (HasAlias(mine[i]) && EngineHashOf(mine[i]) == engine_hash) return true;
    }
    return false;
  });
}

uint32_t Index::Impl::MakeChained(uint32_t b) {
  BlockRec& block = blocks_[b];
  if (block.chained()) return kNil;
  const uint32_t holder = block.copy;
  if (holder == kNil) {
    block.set_meta(BlockRec::kMetaChained);  // no entries
    return kNil;
  }
  const uint32_t inline_copy = b | kInlineCopy;
  const uint32_t e = entries_.Allocate();
  const uint8_t flags = HasLocation(inline_copy) ? kEntryHasLocation : 0;
  entries_[e] = EntryRec{
      block.key, b, holder, kNil, kNil, kNil, TierOf(inline_copy), flags, RefcountOf(inline_copy)};
  --holders_[holder].inline_entries;
  LinkToHolder(e);
  if (flags & kEntryHasLocation) {
    auto node = locations_.extract(inline_copy);
    node.key() = e;
    locations_.insert(std::move(node));
  }
  block.copy = e;
  block.set_meta(BlockRec::kMetaChained);
  SetChainCount(b, 1);
  return e;
}

uint32_t Index::Impl::CreateEntry(uint32_t b, uint32_t holder, Tier tier, uint64_t engine_hash,
                                  uint16_t refcount, std::string location) {
  HolderRec& h = holders_[holder];
  uint32_t e;
  BlockRec& block = blocks_[b];
  if (!block.chained() && block.copy == kNil && engine_hash == block.key &&
      refcount <= kMaxInlineRefcount) {
    e = b | kInlineCopy;
    block.copy = holder;
    block.set_meta(static_cast<uint32_t>(tier) << BlockRec::kMetaTierShift |
                   uint32_t{refcount} << BlockRec::kMetaRefShift);
    ++h.inline_entries;
  } else {
    MakeChained(b);
    e = entries_.Allocate();
    entries_[e] = EntryRec{
        engine_hash, b, holder, block.copy, kNil, kNil, static_cast<uint8_t>(tier), 0, refcount};
    block.copy = e;
    const uint32_t count = CopyCount(b) + 1;
    SetChainCount(b, count);
    if (count == kHotChain) {
      for (uint32_t o = block.copy; o != kNil; o = entries_[o].next_in_block) {
        hot_.Insert(HotKey(b, entries_[o].holder, entries_[o].tier), o);
      }
    } else if (count > kHotChain) {
      hot_.Insert(HotKey(b, holder, static_cast<uint8_t>(tier)), e);
    }
    LinkToHolder(e);
  }
  ++h.entries;
  ++h.by_tier[static_cast<int>(tier)];
  ++contexts_[block.context].entries;
  ++entry_count_;
  AttachAlias(e);
  SetEntryLocation(e, std::move(location));
  DigestEntry(e, +1);
  return e;
}

void Index::Impl::SetRefcount(uint32_t c, uint16_t refcount) {
  if (!IsInline(c)) {
    entries_[c].refcount = refcount;
    return;
  }
  BlockRec& block = blocks_[Id(c)];
  block.set_meta((block.meta() & ((1u << BlockRec::kMetaRefShift) - 1)) |
                 uint32_t{refcount} << BlockRec::kMetaRefShift);
}

void Index::Impl::SetChainCount(uint32_t b, uint32_t count) {
  BlockRec& block = blocks_[b];
  uint32_t bits = count;
  if (count >= BlockRec::kChainCountElsewhere) {
    long_chains_[b] = count;
    bits = BlockRec::kChainCountElsewhere;
  } else if (block.meta() >> BlockRec::kMetaCountShift == BlockRec::kChainCountElsewhere) {
    long_chains_.erase(b);
  }
  block.set_meta(BlockRec::kMetaChained | bits << BlockRec::kMetaCountShift);
}

void Index::Impl::LinkToHolder(uint32_t e) {
  EntryRec& rec = entries_[e];
  HolderRec& h = holders_[rec.holder];
  rec.holder_prev = kNil;
  rec.holder_next = h.head;
  if (h.head != kNil) entries_[h.head].holder_prev = e;
  h.head = e;
}

void Index::Impl::UnlinkFromHolder(uint32_t e) {
  const EntryRec& rec = entries_[e];
  if (rec.holder_prev != kNil) {
    entries_[rec.holder_prev].holder_next = rec.holder_next;
  } else {
    holders_[rec.holder].head = rec.holder_next;
  }
  if (rec.holder_next != kNil) entries_[rec.holder_next].holder_prev = rec.holder_prev;
}

void Index::Impl::ClearInlineCopies(const std::vector<bool>& holders, const ContextFilter& contexts,
                                    std::optional<Tier> tier, MutationCause cause,
                                    MutationList* out) {
  // Ids below allocated() are initialised; a freed record has copy == kNil (its copies were
  // deleted first), so it never matches. Deleting a copy frees at most its own block. Stops
  // once the selected holders have no inline copy left (without filters, that is when the
  // last one is deleted).
  uint64_t left = 0;
  for (uint32_t h = 0; h < holders.size(); ++h) left += holders[h] ? holders_[h].inline_entries : 0;
  const uint32_t end = blocks_.allocated();
  for (uint32_t b = 0; b < end && left > 0; ++b) {
    const BlockRec& block = blocks_[b];
    if (block.copy >= holders.size() || !holders[block.copy] || block.chained()) continue;
    if (!contexts.Reaches(block.context)) continue;
    const uint32_t c = b | kInlineCopy;
    if (tier && TierOf(c) != static_cast<uint8_t>(*tier)) continue;
    DeleteEntry(c, cause, out);
    --left;
  }
}

void Index::Impl::SetEntryLocation(uint32_t c, std::string location) {
  if (location.empty()) return;
  if (IsInline(c)) {
    BlockRec& block = blocks_[Id(c)];
    block.set_meta(block.meta() | BlockRec::kMetaLocation);
  } else {
    entries_[c].flags |= kEntryHasLocation;
  }
  locations_[c] = std::move(location);
}

const std::string& Index::Impl::LocationOf(uint32_t c) const {
  static const std::string kNone;
  if (!HasLocation(c)) return kNone;
  auto it = locations_.find(c);
  return it == locations_.end() ? kNone : it->second;
}

void Index::Impl::EmitEntry(uint32_t e, MutationCause cause, MutationList* out) const {
  if (!out) return;
  const BlockRec& block = blocks_[BlockOf(e)];
  Mutation m;
  m.kind = MutationKind::kPutEntry;
  m.cause = cause;
  m.context = block.context;
  m.holder = HolderOf(e);
  m.key = block.key;
  m.tier = static_cast<Tier>(TierOf(e));
  m.depth = block.depth();
  m.stamp = block.stamp();
  m.refcount = RefcountOf(e);
  m.engine_hash = EngineHashOf(e);
  m.location = LocationOf(e);
  out->push_back(std::move(m));
}

void Index::Impl::AttachAlias(uint32_t e) {
  if (IsInline(e)) return;  // inline copies carry the standard engine hash
  EntryRec& rec = entries_[e];
  const BlockRec& block = blocks_[rec.block];
  if (rec.engine_hash == block.key) return;
  // One alias per (context, holder, engine hash): several tiers of one block share it.
  if (FindAlias(block.context, rec.holder, rec.engine_hash) == kNil) {
    aliases_.Insert(AliasKey(block.context, rec.holder, rec.engine_hash), rec.block);
  }
  rec.flags |= kEntryHasAlias;
}

void Index::Impl::ReleaseAlias(uint32_t e) {
  if (!HasAlias(e)) return;
  EntryRec& rec = entries_[e];
  rec.flags &= static_cast<uint8_t>(~kEntryHasAlias);
  const BlockRec& block = blocks_[rec.block];
  // Keep it while another tier of this holder still carries the same engine hash.
  uint32_t mine[kNumTiers];
  const int n = HolderEntries(rec.block, rec.holder, mine);
  for (int i = 0; i < n; ++i) {
    if (mine[i] != e && HasAlias(mine[i]) && EngineHashOf(mine[i]) == rec.engine_hash) return;
  }
  aliases_.Erase(AliasKey(block.context, rec.holder, rec.engine_hash), rec.block);
}

void Index::Impl::DeleteEntry(uint32_t e, MutationCause cause, MutationList* out, bool cascade) {
  DigestEntry(e, -1);
  ReleaseAlias(e);
  const uint32_t b = BlockOf(e);
  const uint32_t holder = HolderOf(e);
  const uint8_t tier = TierOf(e);
  const bool had_location = HasLocation(e);
  BlockRec& block = blocks_[b];
  if (out) {
    Mutation m;
    m.kind = MutationKind::kDeleteEntry;
    m.cause = cause;
    m.context = block.context;
    m.holder = holder;
    m.key = block.key;
    m.tier = static_cast<Tier>(tier);
    m.stamp = block.stamp();  // storage keys entry records by it
    m.engine_hash = EngineHashOf(e);
    out->push_back(std::move(m));
  }
  HolderRec& h = holders_[holder];
  if (IsInline(e)) {
    block.copy = kNil;
    block.set_meta(0);
    --h.inline_entries;
  } else {
    const EntryRec rec = entries_[e];
    const uint32_t count = CopyCount(b);
    if (count == kHotChain) {
      for (uint32_t o = block.copy; o != kNil; o = entries_[o].next_in_block) {
        hot_.Erase(HotKey(b, entries_[o].holder, entries_[o].tier), o);
      }
    } else if (count > kHotChain) {
      hot_.Erase(HotKey(b, rec.holder, rec.tier), e);
    }
    SetChainCount(b, count - 1);
    if (block.copy == e) {
      block.copy = rec.next_in_block;
    } else {
      uint32_t p = block.copy;
      while (entries_[p].next_in_block != e) p = entries_[p].next_in_block;
      entries_[p].next_in_block = rec.next_in_block;
    }
    UnlinkFromHolder(e);
    entries_.Free(e);
  }
  --h.entries;
  --h.by_tier[tier];
  --contexts_[block.context].entries;
  --entry_count_;
  if (had_location) locations_.erase(e);
  if (cascade && FirstCopy(b) == kNil) RemoveBlockRecord(b, cause, out);
}

void Index::Impl::DeleteBlock(uint32_t b, MutationCause cause, MutationList* out) {
  while (FirstCopy(b) != kNil) DeleteEntry(FirstCopy(b), cause, out, /*cascade=*/false);
  RemoveBlockRecord(b, cause, out);
}

void Index::Impl::RemoveBlockRecord(uint32_t b, MutationCause cause, MutationList* out) {
  const BlockRec block = blocks_[b];
  ContextRec& ctx = contexts_[block.context];
  if (out) {
    Mutation m;
    m.kind = MutationKind::kDeleteBlock;
    m.cause = cause;
    m.context = block.context;
    m.key = block.key;
    out->push_back(std::move(m));
  }
  if (block.fifo_prev != kNil) {
    blocks_[block.fifo_prev].fifo_next = block.fifo_next;
  } else {
    ctx.fifo_head = block.fifo_next;
  }
  if (block.fifo_next != kNil) {
    blocks_[block.fifo_next].fifo_prev = block.fifo_prev;
  } else {
    ctx.fifo_tail = block.fifo_prev;
  }
  --ctx.blocks;
  if (cause == MutationCause::kEvicted) {
    ++ctx.evicted_blocks;
    ++evicted_blocks_;
  }
  forward_.Erase(ForwardKey(block.context, block.key), b);
  blocks_.Free(b);
}

void Index::Impl::EvictOverflow(uint32_t context, MutationList* out) {
  ContextRec& ctx = contexts_[context];
  while (ctx.entries > options_.max_entries_per_context && ctx.fifo_head != kNil) {
    DeleteBlock(ctx.fifo_head, MutationCause::kEvicted, out);
  }
}

// ---------------------------------------------------------------------------------------
// Commands

void Index::Impl::ApplyStore(const StoreCommand& c, uint64_t seed, MutationList* out,
                             CommandTally* tally) {
  if (c.hashes.empty()) return;
  const uint32_t context = InternContext(c.context, out);
  if (context == kNil) {
    LogLimitOnce(IndexLimit::kContexts);
    return;
  }
  const uint32_t holder = InternHolder(c.holder, out);

  // Resolve the parent: an engine hash this holder published, else a block key.
  uint32_t parent_block = kNil;
  if (c.parent) {
    parent_block = FindAlias(context, holder, *c.parent);
    if (parent_block == kNil) parent_block = FindBlock(context, *c.parent);
  }
  uint32_t depth = 0;
  if (c.base_depth) {
    depth = *c.base_depth;
  } else if (parent_block != kNil) {
    depth = blocks_[parent_block].depth() + 1;
  }

  // Block keys. kLocal chains the standard local hashes from the parent's block key; an
  // unresolved parent chains from its raw value, so the blocks are still indexed (and their
  // children resolve through aliases) even though a lookup from the root cannot reach them.
  std::vector<uint64_t> chained;
  std::span<const uint64_t> keys = c.hashes;
  std::span<const uint64_t> engine_hashes = c.engine_hashes;
  std::span<const std::string> locations = c.locations;
  std::vector<uint64_t> resolved_engine_hashes;
  std::vector<std::string> resolved_locations;
  if (c.mode == KeyMode::kAlias) {
    // Copies of blocks this holder announced before (offloads to another tier): each hash
    // names its block through the holder's alias, or is a block key. Without tokens an
    // unknown hash cannot be placed, so it is skipped.
    for (size_t i = 0; i < c.hashes.size(); ++i) {
      uint32_t b = FindAlias(context, holder, c.hashes[i]);
      if (b == kNil) b = FindBlock(context, c.hashes[i]);
      if (b == kNil) continue;
      chained.push_back(uint64_t{blocks_[b].key});  // a copy: BlockRec is packed
      resolved_engine_hashes.push_back(c.hashes[i]);
      if (!c.locations.empty()) resolved_locations.push_back(c.locations[i]);
    }
    keys = chained;
    engine_hashes = resolved_engine_hashes;
    locations = resolved_locations;
  } else if (c.mode == KeyMode::kLocal) {
    std::optional<uint64_t> parent_key;
    if (parent_block != kNil) {
      parent_key = uint64_t{blocks_[parent_block].key};  // a copy: BlockRec is packed
    } else if (c.parent) {
      parent_key = c.parent;
    }
    chained = BlockHasher(seed).ChainLocals(c.hashes, parent_key);
    keys = chained;
  }

  // Each block looks up its forward slot and, when the engine names it by its own hash,
  // its alias slot: random misses in tables of tens of MB, started kSlotAhead blocks early.
  constexpr size_t kSlotAhead = 8;
  auto prefetch = [&](size_t i) {
    forward_.Prefetch(ForwardKey(context, keys[i]));
    if (!engine_hashes.empty() && engine_hashes[i] != keys[i]) {
      aliases_.Prefetch(AliasKey(context, holder, engine_hashes[i]));
    }
  };
  for (size_t i = 0; i < std::min(keys.size(), kSlotAhead); ++i) prefetch(i);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kSlotAhead < keys.size()) prefetch(i + kSlotAhead);
    const uint64_t key = keys[i];
    const uint64_t engine_hash = engine_hashes.empty() ? key : engine_hashes[i];
    std::string location = locations.empty() ? std::string() : locations[i];
    uint32_t b = FindBlock(context, key);
    if (Full()) {
      // The documented limits (docs/limits.md): 2^31 - 1 blocks and chained copies, 48-bit
      // stamps. Nothing past them is indexed.
      LogLimitOnce(IndexLimit::kRecords);
      break;
    }
    if (b == kNil) {
      // Deeper blocks cannot be recorded (24-bit depths); nor can their descendants.
      if (uint64_t{depth} + i > kMaxBlockDepth) {
        LogLimitOnce(IndexLimit::kDepth);
        break;
      }
      b = CreateBlock(context, key, depth + static_cast<uint32_t>(i), next_stamp_++);
      if (out) {
        Mutation m;
        m.kind = MutationKind::kPutBlock;
        m.context = context;
        m.key = key;
        m.depth = blocks_[b].depth();
        m.stamp = blocks_[b].stamp();
        out->push_back(std::move(m));
      }
    }
    if (engine_hash != key) {
      // An engine hash names one block per (context, holder). If this holder announced it
      // for another block before (indexed under a wrong key, e.g. from an unresolved
      // parent), the new announcement wins and the old copies go.
      const uint32_t previous = FindAlias(context, holder, engine_hash);
      if (previous != kNil && previous != b) RemoveAliased(previous, holder, engine_hash, out);
    }
    ++tally->stored_blocks;
    uint32_t e = FindEntry(b, holder, c.tier);
    if (e == kNil) {
      e = CreateEntry(b, holder, c.tier, engine_hash, 1, std::move(location));
    } else {
      ++tally->held_stores;
      // A report of a held block changes no count: the holder still has as many copies.
      const bool add_copy = !c.report;
      const uint16_t refcount = RefcountOf(e);
      // Its element before the change; the changed copy's is added back below.
      DigestEntry(e, -1);
      if (IsInline(e) &&
          (engine_hash != EngineHashOf(e) || (add_copy && refcount == kMaxInlineRefcount))) {
        e = MakeChained(b);  // the inline form has no room for either
      }
      if (add_copy && refcount < kMaxRefcount) {
        SetRefcount(e, static_cast<uint16_t>(refcount + 1));
      }
      bool changed = add_copy;
      if (EngineHashOf(e) != engine_hash) {
        // The publisher re-announced the block under a new hash: re-key its alias.
        ReleaseAlias(e);
        entries_[e].engine_hash = engine_hash;
        AttachAlias(e);
        changed = true;
      }
      if (!location.empty() && location != LocationOf(e)) {
        SetEntryLocation(e, std::move(location));
        changed = true;
      }
      DigestEntry(e, +1);
      // A report that changed nothing writes nothing (no storage write, no feed event).
      if (!changed) continue;
    }
    EmitEntry(e, MutationCause::kStored, out);
  }
  EvictOverflow(context, out);
}

bool Index::Impl::Full() const {
  // A store adds at most one block and two entry records (MakeChained and the new copy).
  return next_stamp_ > kMaxStamp || blocks_.live() >= kMaxRecords - 1 ||
         entries_.live() >= kMaxRecords - 2;
}

void Index::Impl::LogLimitOnce(IndexLimit limit) {
  const auto bit = 1u << static_cast<int>(limit);
  if (logged_limits_ & bit) return;
  logged_limits_ |= bit;
  switch (limit) {
    case IndexLimit::kRecords:
      LogWarning(
          "index: full (2^31 - 1 blocks or chained copies, or 48-bit stamps used up): "
          "stores of new blocks and copies are dropped (docs/limits.md)");
      return;
    case IndexLimit::kContexts:
      LogWarning(
          "index: 65,536 contexts exist: stores into new contexts are dropped "
          "(docs/limits.md)");
      return;
    case IndexLimit::kDepth:
      LogWarning(
          "index: a block deeper than 16,777,215 in its chain: it and the blocks after "
          "it in its store are dropped (docs/limits.md)");
      return;
  }
}

void Index::Impl::RemoveAliased(uint32_t b, uint32_t holder, uint64_t engine_hash,
                                MutationList* out) {
  uint32_t mine[kNumTiers];
  const int n = HolderEntries(b, holder, mine);
  for (int i = 0; i < n; ++i) {
    if (EngineHashOf(mine[i]) == engine_hash) DeleteEntry(mine[i], MutationCause::kRemoved, out);
  }
}

void Index::Impl::ApplyRemove(const RemoveCommand& c, MutationList* out, CommandTally* tally) {
  // Unknown contexts, holders and hashes are no-ops: a remove never creates state.
  tally->removed_hashes += static_cast<uint32_t>(c.hashes.size());
  const uint32_t context = FindContext(c.context);
  const uint32_t holder = FindHolder(c.holder);
  if (context == kNil || holder == kNil) return;
  for (uint64_t hash : c.hashes) {
    uint32_t b = FindAlias(context, holder, hash);
    if (b == kNil) b = FindBlock(context, hash);
    if (b == kNil) continue;
    // Collect first: deleting the block's last entry frees the block.
    uint32_t mine[kNumTiers], victims[kNumTiers];
    const int found = HolderEntries(b, holder, mine);
    int n = 0;
    for (int i = 0; i < found; ++i) {
      if (!c.tier || TierOf(mine[i]) == static_cast<uint8_t>(*c.tier)) victims[n++] = mine[i];
    }
    if (n > 0) ++tally->found_removes;
    for (int i = 0; i < n; ++i) {
      const uint16_t refcount = RefcountOf(victims[i]);
      if (refcount > 1) {
        DigestEntry(victims[i], -1);
        SetRefcount(victims[i], static_cast<uint16_t>(refcount - 1));
        DigestEntry(victims[i], +1);
        EmitEntry(victims[i], MutationCause::kRemoved, out);
      } else {
        DeleteEntry(victims[i], MutationCause::kRemoved, out);
      }
    }
  }
}

void Index::ClearHolderExcept(const HolderKey& holder, std::optional<Tier> tier,
                              std::span<const ContextKey> spared, MutationList* out) {
  Impl& m = *impl_;
  const uint32_t id = m.FindHolder(holder);
  if (id == kNil) return;
  const std::vector<uint32_t> spared_ids = m.ContextIds(spared);
  DeleteHolderEntries(m, id, ContextFilter(kNil, spared_ids), tier, MutationCause::kCleared, out);
}

void Index::Impl::ApplyClear(const ClearCommand& c, MutationList* out) {
  const uint32_t holder = FindHolder(c.holder);
  if (holder == kNil) return;
  uint32_t context = kNil;
  if (c.context) {
    context = FindContext(*c.context);
    if (context == kNil) return;
  }
  DeleteHolderEntries(*this, holder, context, c.tier, MutationCause::kCleared, out);
}

}  // namespace kvatlas::server
