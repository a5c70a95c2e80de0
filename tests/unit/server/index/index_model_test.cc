// Randomized model-based test: the Index against a naive reference model built from
// std::map and linear scans, over many random store / remove / clear / lookup operations.
// Both must give the same answers; the mutations the Index emits must rebuild an equal
// index through the boot-time Load* path (what storage does).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <map>
#include <random>
#include <tuple>

#include "kvatlas/common/block_hasher.h"
#include "server/index/index.h"

namespace kvatlas::server {
namespace {

struct ModelEntry {
  uint32_t refcount = 0;
  uint64_t engine_hash = 0;
  std::string location;
};

using EntryId = std::pair<std::string, int>;  // holder ToString, tier

struct ModelBlock {
  uint32_t depth = 0;
  std::map<EntryId, ModelEntry> entries;
};

struct ModelContext {
  std::list<uint64_t> fifo;
  std::map<uint64_t, ModelBlock> blocks;
  uint64_t entries() const {
    uint64_t n = 0;
    for (const auto& [k, b] : blocks) n += b.entries.size();
    return n;
  }
};

// The reference: same contract as Index, written for obviousness, not speed.
class Model {
 public:
  explicit Model(uint64_t cap) : cap_(cap) {}

  void Apply(const Command& command, uint64_t seed) {
    if (auto* s = std::get_if<StoreCommand>(&command)) return ApplyStore(*s, seed);
    if (auto* r = std::get_if<RemoveCommand>(&command)) return ApplyRemove(*r);
    ApplyClear(std::get<ClearCommand>(command));
  }

  LookupResult Lookup(const ContextKey& ck, const std::vector<uint64_t>& keys,
                      const std::string& instance) const {
    LookupResult r;
    r.blocks_queried = static_cast<uint32_t>(keys.size());
    auto it = contexts_.find(ck.ToString());
    if (it == contexts_.end()) return r;
    const ModelContext& ctx = it->second;
    for (const auto& [name, holder] : holders_) {
      if (!instance.empty() && holder.id != instance) continue;
      HolderMatch m;
      m.holder = holder;
      auto run = [&](std::initializer_list<Tier> tiers) {
        uint32_t n = 0;
        for (uint64_t key : keys) {
          auto b = ctx.blocks.find(key);
          if (b == ctx.blocks.end()) break;
          bool has = false;
          for (Tier t : tiers) has |= b->second.entries.count({name, static_cast<int>(t)}) > 0;
          if (!has) break;
          ++n;
        }
        return n;
      };
      m.gpu = run({Tier::kGpu});
      m.cpu = run({Tier::kGpu, Tier::kCpu});
      m.disk = run({Tier::kGpu, Tier::kCpu, Tier::kDisk});
      m.shared = run({Tier::kShared});
      m.cpu_only = run({Tier::kCpu});
      m.disk_only = run({Tier::kDisk});
      for (uint32_t i = 0; i < m.shared; ++i) {
        m.shared_locations.push_back(
            ctx.blocks.at(keys[i]).entries.at({name, static_cast<int>(Tier::kShared)}).location);
      }
      if (m.disk == 0 && m.shared == 0) continue;
      r.blocks_found = std::max({r.blocks_found, m.disk, m.shared});
      r.holders.push_back(std::move(m));
    }
    return r;
  }

  uint64_t entries() const {
    uint64_t n = 0;
    for (const auto& [k, c] : contexts_) n += c.entries();
    return n;
  }
  uint64_t blocks() const {
    uint64_t n = 0;
    for (const auto& [k, c] : contexts_) n += c.blocks.size();
    return n;
  }
  const std::map<std::string, ModelContext>& contexts() const { return contexts_; }

 private:
  // The block `hash` names for `holder`: an alias (an entry of the holder whose engine hash
  // differs from its key) first, then a block key.
  std::optional<uint64_t> Resolve(const ModelContext& ctx, const std::string& holder,
                                  uint64_t hash) const {
    for (const auto& [key, block] : ctx.blocks) {
      for (const auto& [id, e] : block.entries) {
        if (id.first == holder && e.engine_hash == hash && e.engine_hash != key) return key;
      }
    }
    if (ctx.blocks.count(hash)) return hash;
    return std::nullopt;
  }

  void ApplyStore(const StoreCommand& c, uint64_t seed) {
    if (c.hashes.empty()) return;
    ModelContext& ctx = contexts_[c.context.ToString()];
    const std::string holder = c.holder.ToString();
    holders_[holder] = c.holder;
    std::optional<uint64_t> parent_key;
    if (c.parent) parent_key = Resolve(ctx, holder, *c.parent);
    uint32_t depth = 0;
    if (c.base_depth) {
      depth = *c.base_depth;
    } else if (parent_key) {
      depth = ctx.blocks.at(*parent_key).depth + 1;
    }
    std::vector<uint64_t> keys = c.hashes;
    if (c.mode == KeyMode::kLocal) {
      keys = BlockHasher(seed).ChainLocals(c.hashes, parent_key ? parent_key : c.parent);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint64_t engine_hash = c.engine_hashes.empty() ? keys[i] : c.engine_hashes[i];
      if (engine_hash != keys[i]) {
        // The engine hash moves: the holder's copies under it on another block go.
        const auto previous = Resolve(ctx, holder, engine_hash);
        if (previous && *previous != keys[i] && ctx.blocks.count(*previous)) {
          std::vector<EntryId> victims;
          for (const auto& [id, e] : ctx.blocks.at(*previous).entries) {
            if (id.first == holder && e.engine_hash == engine_hash) victims.push_back(id);
          }
          for (const auto& id : victims) EraseEntry(ctx, *previous, id);
        }
      }
      auto [it, created] = ctx.blocks.try_emplace(keys[i]);
      if (created) {
        it->second.depth = depth + static_cast<uint32_t>(i);
        ctx.fifo.push_back(keys[i]);
      }
      ModelEntry& e = it->second.entries[{holder, static_cast<int>(c.tier)}];
      // A report (StoreCommand::report) of a held block keeps its count.
      if (!c.report || e.refcount == 0) e.refcount = std::min<uint32_t>(e.refcount + 1, 65535);
      e.engine_hash = engine_hash;
      if (!c.locations.empty() && !c.locations[i].empty()) e.location = c.locations[i];
    }
    while (ctx.entries() > cap_ && !ctx.fifo.empty()) {
      ctx.blocks.erase(ctx.fifo.front());
      ctx.fifo.pop_front();
    }
  }

  void EraseEntry(ModelContext& ctx, uint64_t key, const EntryId& id) {
    ModelBlock& b = ctx.blocks.at(key);
    b.entries.erase(id);
    if (b.entries.empty()) {
      ctx.blocks.erase(key);
      ctx.fifo.remove(key);
    }
  }

  void ApplyRemove(const RemoveCommand& c) {
    auto cit = contexts_.find(c.context.ToString());
    if (cit == contexts_.end()) return;
    ModelContext& ctx = cit->second;
    const std::string holder = c.holder.ToString();
    for (uint64_t hash : c.hashes) {
      const auto key = Resolve(ctx, holder, hash);
      if (!key) continue;
      for (int t = 0; t < kNumTiers; ++t) {
        if (c.tier && static_cast<int>(*c.tier) != t) continue;
        if (!ctx.blocks.count(*key)) break;
        auto& entries = ctx.blocks.at(*key).entries;
        auto e = entries.find({holder, t});
        if (e == entries.end()) continue;
        if (--e->second.refcount == 0) EraseEntry(ctx, *key, {holder, t});
      }
    }
  }

  void ApplyClear(const ClearCommand& c) {
    const std::string holder = c.holder.ToString();
    for (auto& [name, ctx] : contexts_) {
      if (c.context && name != c.context->ToString()) continue;
      std::vector<std::pair<uint64_t, EntryId>> victims;
      for (const auto& [key, block] : ctx.blocks) {
        for (const auto& [id, e] : block.entries) {
          if (id.first == holder && (!c.tier || static_cast<int>(*c.tier) == id.second)) {
            victims.emplace_back(key, id);
          }
        }
      }
      for (const auto& [key, id] : victims) EraseEntry(ctx, key, id);
    }
  }

  uint64_t cap_;
  std::map<std::string, ModelContext> contexts_;
  std::map<std::string, HolderKey> holders_;
};

// Rebuilds an index from mutations the way storage does: keep the last value of each
// record, then Load* in the required order.
Index Replay(const MutationList& log, const IndexOptions& options) {
  std::map<uint32_t, ContextKey> contexts;
  std::map<uint32_t, HolderKey> holders;
  std::map<std::pair<uint32_t, uint64_t>, std::pair<uint32_t, uint64_t>> blocks;  // depth, stamp
  std::map<std::tuple<uint32_t, uint64_t, uint32_t, int>, Mutation> entries;
  for (const Mutation& m : log) {
    switch (m.kind) {
      case MutationKind::kPutContext:
        contexts[m.context] = *m.context_key;
        break;
      case MutationKind::kPutHolder:
        holders[m.holder] = *m.holder_key;
        break;
      case MutationKind::kPutBlock:
        blocks[{m.context, m.key}] = {m.depth, m.stamp};
        break;
      case MutationKind::kDeleteBlock:
        blocks.erase({m.context, m.key});
        break;
      case MutationKind::kPutEntry:
        entries[{m.context, m.key, m.holder, static_cast<int>(m.tier)}] = m;
        break;
      case MutationKind::kDeleteEntry:
        entries.erase({m.context, m.key, m.holder, static_cast<int>(m.tier)});
        break;
      case MutationKind::kPutRegistration:
      case MutationKind::kDeleteRegistration:
      case MutationKind::kPutStreamPosition:
      case MutationKind::kDeleteStreamPosition:
      case MutationKind::kPutServerAddresses:
      case MutationKind::kDeleteServerAddresses:
      case MutationKind::kPutDirectory:
      case MutationKind::kPutDisowned:
      case MutationKind::kPutImporting:
      case MutationKind::kDeleteImporting:
      case MutationKind::kPutHolderWide:
        FAIL("the Index emitted a registry mutation");
        break;
      case MutationKind::kPredicted:
        FAIL("the Index emitted a prediction");
        break;
    }
  }
  Index index(options);
  for (const auto& [id, key] : contexts) REQUIRE(index.LoadContext(id, key).ok());
  for (const auto& [id, key] : holders) REQUIRE(index.LoadHolder(id, key).ok());
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t, uint32_t>> order;  // ctx, stamp, key, depth
  for (const auto& [k, v] : blocks) order.emplace_back(k.first, v.second, k.second, v.first);
  std::sort(order.begin(), order.end());
  for (const auto& [ctx, stamp, key, depth] : order)
    REQUIRE(index.LoadBlock(ctx, key, depth, stamp).ok());
  for (const auto& [k, m] : entries) {
    REQUIRE(
        index.LoadEntry(m.context, m.key, m.holder, m.tier, m.refcount, m.engine_hash, m.location)
            .ok());
  }
  return index;
}

struct Workload {
  std::mt19937_64 rng;
  BlockHasher hasher{kDefaultHashSeed};
  std::vector<ContextKey> contexts;
  std::vector<HolderKey> holders;
  // Token documents; chains are prefixes of them, so many chains share blocks.
  std::vector<std::vector<uint32_t>> docs;

  explicit Workload(uint64_t seed) : rng(seed) {
    contexts = {{"default", "m", "", 4, ""}, {"t2", "m", "lora", 4, "salt"}};
    // Enough holders × tiers that shared blocks cross kHotChain entries both ways.
    for (uint32_t h = 0; h < 12; ++h) holders.push_back({"inst" + std::to_string(h % 8), h / 8});
    for (int d = 0; d < 8; ++d) {
      std::vector<uint32_t> doc(4 * 12);
      const uint32_t base = static_cast<uint32_t>(rng() % 3);  // shared beginnings
      for (size_t i = 0; i < doc.size(); ++i) {
        doc[i] = i < 8 ? base : static_cast<uint32_t>(rng() % 50);
      }
      docs.push_back(doc);
    }
  }
  size_t Pick(size_t n) { return static_cast<size_t>(rng() % n); }
  // Holders 0-2 publish standard hashes; the others their own (an alias per block).
  uint64_t EngineHash(size_t holder, uint64_t key) const {
    return holder < 3 ? key : key ^ (0xabcdef0000000000ULL + holder);
  }

  Command Next() {
    const size_t h = Pick(holders.size());
    const ContextKey& ctx = contexts[Pick(contexts.size())];
    const auto& doc = docs[Pick(docs.size())];
    const auto keys = hasher.SequenceHashes(doc, 4);
    const size_t start = Pick(keys.size());
    const size_t len = 1 + Pick(std::min<size_t>(5, keys.size() - start));
    const Tier tier = static_cast<Tier>(Pick(kNumTiers));
    const uint64_t roll = rng() % 100;
    if (roll < 55) {
      StoreCommand c;
      c.context = ctx;
      c.holder = holders[h];
      c.tier = tier;
      c.report = Pick(4) == 0;
      if (Pick(2) == 0 || start == 0) {
        c.mode = KeyMode::kSequence;
        c.hashes.assign(keys.begin() + start, keys.begin() + start + len);
        if (Pick(2) == 0) c.base_depth = static_cast<uint32_t>(start);
      } else {
        // Tokens given: local hashes chained from the parent's engine hash.
        c.mode = KeyMode::kLocal;
        const auto locals = hasher.LocalHashes(doc, 4);
        c.hashes.assign(locals.begin() + start, locals.begin() + start + len);
        c.parent = EngineHash(h, keys[start - 1]);
      }
      for (size_t i = start; i < start + len; ++i)
        c.engine_hashes.push_back(EngineHash(h, keys[i]));
      if (tier == Tier::kShared) {
        for (size_t i = start; i < start + len; ++i) {
          c.locations.push_back(Pick(3) == 0 ? "" : "loc" + std::to_string(rng() % 1000));
        }
      }
      return c;
    }
    if (roll < 90) {
      RemoveCommand c;
      c.context = ctx;
      c.holder = holders[h];
      if (Pick(4) != 0) c.tier = tier;
      for (size_t i = start; i < start + len; ++i) {
        c.hashes.push_back(Pick(5) == 0 ? rng() : EngineHash(h, keys[i]));
      }
      return c;
    }
    ClearCommand c;
    c.holder = holders[h];
    if (Pick(2) == 0) c.context = ctx;
    if (Pick(2) == 0) c.tier = tier;
    return c;
  }
};

void CheckSameLookup(const LookupResult& got, const LookupResult& want) {
  CHECK(got.blocks_found == want.blocks_found);
  REQUIRE(got.holders.size() == want.holders.size());
  auto sorted = got.holders;
  std::sort(sorted.begin(), sorted.end(), [](const HolderMatch& a, const HolderMatch& b) {
    return a.holder.ToString() < b.holder.ToString();
  });
  for (size_t i = 0; i < sorted.size(); ++i) {
    INFO("holder " << want.holders[i].holder.ToString());
    CHECK(sorted[i].holder == want.holders[i].holder);
    CHECK(sorted[i].gpu == want.holders[i].gpu);
    CHECK(sorted[i].cpu == want.holders[i].cpu);
    CHECK(sorted[i].disk == want.holders[i].disk);
    CHECK(sorted[i].shared == want.holders[i].shared);
    CHECK(sorted[i].cpu_only == want.holders[i].cpu_only);
    CHECK(sorted[i].disk_only == want.holders[i].disk_only);
    CHECK(sorted[i].shared_locations == want.holders[i].shared_locations);
  }
}

TEST_SUITE("Index model") {
  TEST_CASE("random operations give the same answers as the reference model") {
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      CAPTURE(seed);
      IndexOptions options;
      options.max_entries_per_context = seed % 3 == 0 ? 40 : 1'000'000;  // some runs evict
      Index index(options);
      Model model(options.max_entries_per_context);
      Workload w(seed);
      MutationList log;
      for (int step = 0; step < 1500; ++step) {
        const Command c = w.Next();
        index.Apply(c, kDefaultHashSeed, &log);
        model.Apply(c, kDefaultHashSeed);
        // KVATLAS_CHECK_EVERY_STEP=1 compares after every operation (to pin a failure).
        if (step % 10 == 0 || std::getenv("KVATLAS_CHECK_EVERY_STEP")) {
          const ContextKey& ctx = w.contexts[w.Pick(w.contexts.size())];
          const auto& doc = w.docs[w.Pick(w.docs.size())];
          const auto keys = w.hasher.SequenceHashes(doc, 4);
          const std::string instance = w.Pick(4) == 0 ? w.holders[w.Pick(w.holders.size())].id : "";
          LookupOptions lo;
          lo.instance_id = instance;
          CheckSameLookup(index.Lookup(ctx, keys, lo), model.Lookup(ctx, keys, instance));
        }
      }
      const IndexStats st = index.Stats();
      CHECK(st.entries == model.entries());
      CHECK(st.blocks == model.blocks());
      // Every block's copies, with depth, refcount, engine hash and location.
      for (const auto& ck : w.contexts) {
        auto it = model.contexts().find(ck.ToString());
        if (it == model.contexts().end()) continue;
        for (const auto& [key, block] : it->second.blocks) {
          auto locs = index.Locate(key, &ck);
          REQUIRE(locs.size() == block.entries.size());
          for (const BlockLocation& l : locs) {
            const ModelEntry& e = block.entries.at({l.holder.ToString(), static_cast<int>(l.tier)});
            CHECK(l.depth == block.depth);
            CHECK(l.refcount == e.refcount);
            CHECK(l.engine_hash == e.engine_hash);
            CHECK(l.location == e.location);
          }
        }
      }
      // The mutations rebuild the same state, and the rebuilt index evolves identically.
      Index rebuilt = Replay(log, options);
      CHECK(rebuilt.StateDigest() == index.StateDigest());
      for (int step = 0; step < 300; ++step) {
        const Command c = w.Next();
        index.Apply(c, kDefaultHashSeed, nullptr);
        rebuilt.Apply(c, kDefaultHashSeed, nullptr);
      }
      CHECK(rebuilt.StateDigest() == index.StateDigest());
    }
  }
}

}  // namespace
}  // namespace kvatlas::server
