// The Index's read side: prefix lookup, block locations, listings, stats and the digest.
#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/internal/prefetch.h"
#include "server/index/index.h"
#include "server/index/index_impl.h"
#include "server/model/replica_digest.h"

namespace kvatlas::server {

namespace {

// Scratch reused by the lookups of one thread.
struct LookupScratch {
  PrefixWalk walk;
  std::vector<uint32_t> chain;  // block ids of the walked prefix
};

LookupScratch& Scratch(size_t holders) {
  thread_local LookupScratch s;
  s.walk.Reset(holders);
  s.chain.clear();
  return s;
}

// Order-sensitive 64-bit mixing for the digest.
uint64_t Mix(uint64_t h, uint64_t v) {
  v *= 0x9e3779b97f4a7c15ULL;
  v ^= v >> 32;
  h ^= v;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}
uint64_t MixString(uint64_t h, std::string_view s) {
  h = Mix(h, s.size());
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, s.data() + i, std::min<size_t>(8, s.size() - i));
    h = Mix(h, chunk);
  }
  return h;
}
uint64_t MixContext(uint64_t h, const ContextKey& k) {
  h = MixString(h, k.tenant);
  h = MixString(h, k.model);
  h = MixString(h, k.lora_name);
  h = Mix(h, k.block_size);
  return MixString(h, k.salt);
}

}  // namespace

LookupResult Index::Lookup(const ContextKey& context_key, std::span<const BlockKey> keys,
                           const LookupOptions& options) const {
  const Impl& m = *impl_;
  LookupResult result;
  const size_t n = std::min<size_t>(keys.size(), options_.max_lookup_blocks);
  result.blocks_queried = static_cast<uint32_t>(n);
  const uint32_t context = m.FindContext(context_key);
  if (context == kNil || n == 0) return result;

  LookupScratch& s = Scratch(m.holders_.size());
  // The walk is a chain of dependent cache misses per depth (slot → block → entry), but the
  // keys are known up front. So each window of keys is first resolved stage by stage —
  // every stage's loads are independent of each other and overlap in the memory system —
  // and only then walked, when its records are cached.
  constexpr size_t kWindow = 32;
  uint32_t candidate[kWindow];
  for (size_t depth = 0; depth < n; ++depth) {
    if (depth % kWindow == 0) {
      const size_t end = std::min(n, depth + kWindow);
      for (size_t i = depth; i < end; ++i) m.forward_.Prefetch(ForwardKey(context, keys[i]));
      for (size_t i = depth; i < end; ++i) {
        candidate[i - depth] = m.forward_.FirstCandidate(ForwardKey(context, keys[i]));
        if (candidate[i - depth] != kNil) Prefetch(&m.blocks_[candidate[i - depth]]);
      }
      for (size_t i = depth; i < end; ++i) {
        const uint32_t b = candidate[i - depth];
        if (b != kNil && m.blocks_[b].chained() && m.blocks_[b].copy != kNil) {
          Prefetch(&m.entries_[m.blocks_[b].copy]);
        }
      }
    }
    const uint32_t b = m.FindBlock(context, keys[depth]);
    if (b == kNil) break;
    const uint32_t head = m.FirstCopy(b);
    if (m.NextCopy(head) == kNil &&
        s.walk.RepeatsLastOnly(m.HolderOf(head), static_cast<Tier>(m.TierOf(head)))) {
      s.chain.push_back(b);  // held exactly as its parent
      continue;
    }
    for (uint32_t e = head; e != kNil; e = m.NextCopy(e)) {
      const uint32_t holder = m.HolderOf(e);
      if (depth == 0 && !options.instance_id.empty() &&
          m.holders_[holder].key.id != options.instance_id) {
        continue;
      }
      s.walk.Add(holder, static_cast<Tier>(m.TierOf(e)));
    }
    if (!s.walk.EndDepth()) break;
    s.chain.push_back(b);
  }

  result.blocks_found = static_cast<uint32_t>(s.chain.size());
  for (const PrefixWalk::Run& r : s.walk.SortedRuns()) {
    if (r.disk == 0 && r.shared == 0) continue;
    HolderMatch match = PrefixWalk::MatchOf(r);
    match.holder = m.holders_[r.holder].key;
    if (options.include_locations && r.shared > 0) {
      match.shared_locations.reserve(r.shared);
      for (uint32_t i = 0; i < r.shared; ++i) {
        const uint32_t e = m.FindEntry(s.chain[i], r.holder, Tier::kShared);
        match.shared_locations.push_back(e == kNil ? std::string() : m.LocationOf(e));
      }
    }
    result.holders.push_back(std::move(match));
  }
  return result;
}

GroupCopies Index::CopiesAt(const ContextKey& context_key, std::span<const BlockKey> keys,
                            std::span<const uint32_t> positions) const {
  const Impl& m = *impl_;
  GroupCopies out;
  const uint32_t context = m.FindContext(context_key);
  if (context == kNil) return out;
  std::unordered_map<uint32_t, uint32_t> local;  // index holder id → out.holders index
  for (const uint32_t position : positions) {
    const uint32_t b = m.FindBlock(context, keys[position]);
    if (b == kNil) continue;
    for (uint32_t e = m.FirstCopy(b); e != kNil; e = m.NextCopy(e)) {
      const uint32_t holder = m.HolderOf(e);
      auto [it, added] = local.emplace(holder, static_cast<uint32_t>(out.holders.size()));
      if (added) out.holders.push_back(m.holders_[holder].key);
      GroupCopies::Copy copy{position, it->second, static_cast<Tier>(m.TierOf(e)),
                             GroupCopies::kNoLocation};
      if (copy.tier == Tier::kShared) {
        copy.location = static_cast<uint32_t>(out.locations.size());
        out.locations.push_back(m.LocationOf(e));
      }
      out.copies.push_back(copy);
    }
  }
  return out;
}

std::vector<BlockLocation> Index::Locate(BlockKey key, const ContextKey* context_key) const {
  const Impl& m = *impl_;
  std::vector<BlockLocation> out;
  for (uint32_t c = 0; c < m.contexts_.size(); ++c) {
    const ContextRec& ctx = m.contexts_[c];
    if (!ctx.live || (context_key && !(ctx.key == *context_key))) continue;
    const uint32_t b = m.FindBlock(c, key);
    if (b == kNil) continue;
    for (uint32_t e = m.FirstCopy(b); e != kNil; e = m.NextCopy(e)) {
      out.push_back(BlockLocation{ctx.key, m.holders_[m.HolderOf(e)].key,
                                  static_cast<Tier>(m.TierOf(e)), m.blocks_[b].depth(),
                                  m.RefcountOf(e), m.EngineHashOf(e), m.LocationOf(e)});
    }
  }
  return out;
}

void Index::ForEachCopy(const ContextKey& context,
                        const std::function<void(BlockKey, const BlockCopy&)>& visit) const {
  const Impl& m = *impl_;
  const uint32_t c = m.FindContext(context);
  if (c == kNil) return;
  BlockCopy copy;
  for (uint32_t b = m.contexts_[c].fifo_head; b != kNil; b = m.blocks_[b].fifo_next) {
    const BlockRec& block = m.blocks_[b];
    for (uint32_t e = m.FirstCopy(b); e != kNil; e = m.NextCopy(e)) {
      copy.holder = m.holders_[m.HolderOf(e)].key;
      copy.tier = static_cast<Tier>(m.TierOf(e));
      copy.depth = block.depth();
      copy.refcount = m.RefcountOf(e);
      copy.engine_hash = m.EngineHashOf(e);
      copy.location = m.LocationOf(e);
      visit(block.key, copy);
    }
  }
}

std::vector<HolderInfo> Index::Holders() const {
  std::vector<HolderInfo> out;
  for (uint32_t h = 0; h < impl_->holders_.size(); ++h) {
    const HolderRec& rec = impl_->holders_[h];
    if (!rec.live) continue;
    HolderInfo info;
    info.id = h;
    info.holder = rec.key;
    info.entries = rec.entries;
    std::copy(std::begin(rec.by_tier), std::end(rec.by_tier), info.entries_by_tier);
    out.push_back(std::move(info));
  }
  return out;
}

bool Index::HasContext(const ContextKey& context) const {
  return impl_->FindContext(context) != kNil;
}

std::vector<ContextInfo> Index::Contexts() const {
  std::vector<ContextInfo> out;
  for (uint32_t c = 0; c < impl_->contexts_.size(); ++c) {
    const ContextRec& rec = impl_->contexts_[c];
    if (!rec.live) continue;
    out.push_back(ContextInfo{c, rec.key, rec.blocks, rec.entries, rec.evicted_blocks});
  }
  return out;
}

IndexStats Index::Stats() const {
  const Impl& m = *impl_;
  IndexStats st;
  for (const ContextRec& c : m.contexts_) st.contexts += c.live ? 1 : 0;
  for (const HolderRec& h : m.holders_) st.holders += h.live ? 1 : 0;
  st.blocks = m.blocks_.live();
  st.entries = m.entry_count_;
  st.aliases = m.aliases_.size();
  st.locations = m.locations_.size();
  st.evicted_blocks = m.evicted_blocks_;
  uint64_t strings = 0;
  for (const ContextRec& c : m.contexts_) {
    strings += c.key.tenant.capacity() + c.key.model.capacity() + c.key.lora_name.capacity() +
               c.key.salt.capacity();
  }
  for (const HolderRec& h : m.holders_) strings += h.key.id.capacity();
  for (const auto& [e, loc] : m.locations_) strings += loc.capacity();
  // unordered_map nodes: key/value plus ~2 pointers of node and bucket overhead.
  const uint64_t node_overhead = 2 * sizeof(void*);
  st.memory_bytes = m.blocks_.memory_bytes() + m.entries_.memory_bytes() +
                    m.forward_.memory_bytes() + m.aliases_.memory_bytes() + m.hot_.memory_bytes() +
                    m.contexts_.capacity() * sizeof(ContextRec) +
                    m.holders_.capacity() * sizeof(HolderRec) +
                    m.context_ids_.size() * (sizeof(ContextKey) + 4 + node_overhead) +
                    m.holder_ids_.size() * (sizeof(HolderKey) + 4 + node_overhead) +
                    m.locations_.size() * (sizeof(std::string) + 4 + node_overhead) +
                    m.long_chains_.size() * (8 + node_overhead) + strings;
  return st;
}

uint64_t Index::StateDigest() const {
  const Impl& m = *impl_;
  // Contexts and holders by key (ids are an artefact of arrival order on one replica only
  // through the log, but keys are what a reader sees); blocks in FIFO order, since that
  // order is state (it decides evictions); entries of a block as a sorted set.
  std::vector<uint32_t> contexts;
  for (uint32_t c = 0; c < m.contexts_.size(); ++c) {
    if (m.contexts_[c].live) contexts.push_back(c);
  }
  std::sort(contexts.begin(), contexts.end(), [&](uint32_t a, uint32_t b) {
    return m.contexts_[a].key.ToString() < m.contexts_[b].key.ToString();
  });
  std::vector<std::string> holder_names;
  for (const HolderRec& h : m.holders_) {
    if (h.live) holder_names.push_back(h.key.ToString());
  }
  std::sort(holder_names.begin(), holder_names.end());
  uint64_t digest = 0x6b7661746c6173ULL;
  for (const std::string& name : holder_names) digest = MixString(digest, name);
  struct EntryView {
    std::string holder;
    uint8_t tier;
    uint16_t refcount;
    uint64_t engine_hash;
    std::string location;
    bool operator<(const EntryView& o) const {
      return std::tie(holder, tier) < std::tie(o.holder, o.tier);
    }
  };
  std::vector<EntryView> views;
  for (uint32_t c : contexts) {
    const ContextRec& ctx = m.contexts_[c];
    digest = MixContext(digest, ctx.key);
    digest = Mix(digest, ctx.blocks);
    for (uint32_t b = ctx.fifo_head; b != kNil; b = m.blocks_[b].fifo_next) {
      digest = Mix(digest, m.blocks_[b].key);
      digest = Mix(digest, m.blocks_[b].depth());
      views.clear();
      for (uint32_t e = m.FirstCopy(b); e != kNil; e = m.NextCopy(e)) {
        views.push_back(EntryView{m.holders_[m.HolderOf(e)].key.ToString(), m.TierOf(e),
                                  m.RefcountOf(e), m.EngineHashOf(e), m.LocationOf(e)});
      }
      std::sort(views.begin(), views.end());
      for (const EntryView& v : views) {
        digest = MixString(digest, v.holder);
        digest = Mix(digest, v.tier);
        digest = Mix(digest, v.refcount);
        digest = Mix(digest, v.engine_hash);
        digest = MixString(digest, v.location);
      }
    }
  }
  return digest;
}

}  // namespace kvatlas::server

namespace kvatlas::server {

uint64_t Index::ReplicaDigest() const { return impl_->digest_; }

uint64_t Index::RecomputeReplicaDigest() const {
  const Impl& m = *impl_;
  if (!m.options_.replica_digest) return 0;
  // From the records alone: the key hashes the incremental digest caches are recomputed.
  uint64_t digest = 0;
  std::vector<uint64_t> holder_hashes(m.holders_.size());
  for (size_t h = 0; h < m.holders_.size(); ++h) {
    if (!m.holders_[h].live) continue;
    digest += HolderElement(m.holders_[h].key);
    holder_hashes[h] = HolderKeyDigest(m.holders_[h].key);
  }
  for (const ContextRec& ctx : m.contexts_) {
    if (!ctx.live) continue;
    digest += ContextElement(ctx.key);
    EntryDigestFields fields;
    fields.context_key_hash = ContextKeyDigest(ctx.key);
    // Every live block is in its context's FIFO.
    for (uint32_t b = ctx.fifo_head; b != kNil; b = m.blocks_[b].fifo_next) {
      fields.block_key = m.blocks_[b].key;
      fields.depth = m.blocks_[b].depth();
      for (uint32_t c = m.FirstCopy(b); c != kNil; c = m.NextCopy(c)) {
        fields.holder_key_hash = holder_hashes[m.HolderOf(c)];
        fields.tier = m.TierOf(c);
        fields.refcount = m.RefcountOf(c);
        fields.engine_hash = m.EngineHashOf(c);
        fields.location_hash = LocationDigest(m.LocationOf(c));
        digest += EntryElement(fields);
      }
    }
  }
  return digest;
}

}  // namespace kvatlas::server
