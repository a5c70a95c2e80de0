// The Index's boot loading: rebuilding it from stored records, each checked against the
// records loaded before it (a violation is `corruption`).
#include <algorithm>
#include <string>
#include <utility>

#include "server/index/index.h"
#include "server/index/index_impl.h"

namespace kvatlas::server {

Status Index::LoadContext(uint32_t id, const ContextKey& key) {
  auto& contexts = impl_->contexts_;
  if (id >= kMaxContexts) return Status::Corruption("context id beyond 16 bits");
  if (id < contexts.size() && contexts[id].live) {
    return Status::Corruption("duplicate context id " + std::to_string(id));
  }
  if (!impl_->context_ids_.emplace(key, id).second) {
    return Status::Corruption("context " + key.ToString() + " stored under two ids");
  }
  if (id >= contexts.size()) contexts.resize(id + 1);
  impl_->NameContext(id, key);
  return Status::Ok();
}

Status Index::LoadHolder(uint32_t id, const HolderKey& key) {
  auto& holders = impl_->holders_;
  if (id == kNil) return Status::Corruption("holder id out of range");
  if (id < holders.size() && holders[id].live) {
    return Status::Corruption("duplicate holder id " + std::to_string(id));
  }
  if (!impl_->holder_ids_.emplace(key, id).second) {
    return Status::Corruption("holder " + key.ToString() + " stored under two ids");
  }
  if (id >= holders.size()) holders.resize(id + 1);
  impl_->NameHolder(id, key);
  return Status::Ok();
}

Status Index::LoadBlock(uint32_t context, BlockKey key, uint32_t depth, uint64_t stamp) {
  Impl& m = *impl_;
  if (context >= m.contexts_.size() || !m.contexts_[context].live) {
    return Status::Corruption("block of unknown context " + std::to_string(context));
  }
  const ContextRec& ctx = m.contexts_[context];
  if (stamp > kMaxStamp) return Status::Corruption("block stamp beyond 48 bits");
  if (depth > kMaxBlockDepth) return Status::Corruption("block depth beyond 24 bits");
  if (m.blocks_.live() >= kMaxRecords)
    return Status::Corruption("more blocks than the index holds");
  if (ctx.fifo_tail != kNil && stamp <= m.blocks_[ctx.fifo_tail].stamp()) {
    return Status::Corruption("blocks of context " + std::to_string(context) +
                              " not loaded in stamp order");
  }
  if (m.FindBlock(context, key) != kNil) return Status::Corruption("duplicate block record");
  m.CreateBlock(context, key, depth, stamp);
  m.next_stamp_ = std::max(m.next_stamp_, stamp + 1);
  return Status::Ok();
}

Status Index::LoadEntry(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
                        uint32_t refcount, uint64_t engine_hash, std::string location) {
  Impl& m = *impl_;
  if (holder >= m.holders_.size() || !m.holders_[holder].live) {
    return Status::Corruption("entry of unknown holder " + std::to_string(holder));
  }
  if (static_cast<int>(tier) >= kNumTiers) return Status::Corruption("entry with unknown tier");
  if (refcount == 0) return Status::Corruption("entry with zero refcount");
  const uint32_t b = context < m.contexts_.size() ? m.FindBlock(context, key) : kNil;
  if (b == kNil) return Status::Corruption("entry without its block record");
  if (m.FindEntry(b, holder, tier) != kNil) return Status::Corruption("duplicate entry record");
  m.CreateEntry(b, holder, tier, engine_hash,
                static_cast<uint16_t>(std::min<uint32_t>(refcount, kMaxRefcount)),
                std::move(location));
  return Status::Ok();
}

}  // namespace kvatlas::server
