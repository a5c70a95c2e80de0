// A move's replacement of copies (ReplaceCopiesCommand, docs/scaling.md §Moves): reading a
// context's blocks with their copies in the group a context leaves, and making the copies of
// the group it goes to the same.
#include <cstdint>
#include <vector>

#include "server/index/index.h"
#include "server/index/index_impl.h"

namespace kvatlas::server {
namespace {

// The copy of `holder` in `tier` among `copies`, or null.
const HeldCopy* Find(const std::vector<HeldCopy>& copies, const HolderKey& holder, Tier tier) {
  for (const HeldCopy& copy : copies) {
    if (copy.tier == tier && copy.holder == holder) return &copy;
  }
  return nullptr;
}

// A store of one copy of `block` (of `copy`'s holder, tier, engine hash and location), or a
// report of it (no count changed: only its engine hash and location are set).
StoreCommand StoreOf(const ContextKey& context, const MovedBlock& block, const HeldCopy& copy,
                     bool report) {
  StoreCommand store;
  store.context = context;
  store.holder = copy.holder;
  store.tier = copy.tier;
  store.base_depth = block.depth;
  store.hashes = {block.key};
  store.engine_hashes = {copy.engine_hash};
  if (!copy.location.empty()) store.locations = {copy.location};
  store.report = report;
  return store;
}

}  // namespace

std::vector<MovedBlock> Index::CopiesOf(const ContextKey& context,
                                        std::span<const BlockKey> keys) const {
  const Impl& m = *impl_;
  std::vector<MovedBlock> out;
  out.reserve(keys.size());
  const uint32_t c = m.FindContext(context);
  for (const BlockKey key : keys) {
    MovedBlock& block = out.emplace_back();
    block.key = key;
    const uint32_t b = c == kNil ? kNil : m.FindBlock(c, key);
    if (b == kNil) continue;
    block.depth = m.blocks_[b].depth();
    for (uint32_t e = m.FirstCopy(b); e != kNil; e = m.NextCopy(e)) {
      block.copies.push_back(HeldCopy{m.holders_[m.HolderOf(e)].key, static_cast<Tier>(m.TierOf(e)),
                                      m.RefcountOf(e), m.EngineHashOf(e), m.LocationOf(e)});
    }
  }
  return out;
}

void Index::ApplyReplace(const ReplaceCopiesCommand& c, uint64_t seed, MutationList* out) {
  // Through the Stores and Removes the change takes, so that the records, digests, aliases
  // and eviction order are kept as by any write. Per block, the listed copies are made
  // first and the others removed after, so a block that keeps a copy is never emptied on
  // the way (which would give it a new place in the eviction order).
  for (const MovedBlock& block : c.blocks) {
    const BlockKey key = block.key;
    std::vector<HeldCopy> now =
        std::move(CopiesOf(c.context, std::span<const BlockKey>(&key, 1)).front().copies);
    std::vector<HeldCopy> made;  // the listed copies taken (the first of each holder and tier)
    const auto remove = [&](const HeldCopy& copy, uint32_t times) {
      const RemoveCommand one{c.context, copy.holder, copy.tier, {key}};
      for (uint32_t i = 0; i < times; ++i) (void)Apply(one, seed, out);
    };
    if (block.anew && !block.copies.empty()) {
      for (const HeldCopy& has : now) remove(has, has.refcount);
      now.clear();
    }
    for (const HeldCopy& want : block.copies) {
      if (Find(made, want.holder, want.tier) != nullptr) continue;
      made.push_back(want);
      const HeldCopy* has = Find(now, want.holder, want.tier);
      uint32_t count = has == nullptr ? 0 : has->refcount;
      if (has != nullptr && !has->location.empty() && want.location.empty()) {
        // A store cannot take a location away: the copy is made again without it. (The one
        // place the eviction order may not be kept: were it the block's only copy here, the
        // block is made again. A location goes only with its copy in the group it leaves.)
        remove(*has, count);
        count = 0;
      }
      if (count > 0 && (has->engine_hash != want.engine_hash || has->location != want.location)) {
        (void)Apply(StoreOf(c.context, block, want, /*report=*/true), seed, out);
      }
      const StoreCommand copy = StoreOf(c.context, block, want, /*report=*/false);
      for (; count < want.refcount; ++count) (void)Apply(copy, seed, out);
      if (count > want.refcount) remove(want, count - want.refcount);
    }
    for (const HeldCopy& has : now) {
      if (Find(made, has.holder, has.tier) == nullptr) remove(has, has.refcount);
    }
  }
}

}  // namespace kvatlas::server
