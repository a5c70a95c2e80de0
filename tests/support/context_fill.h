// Shared by the tests of a move's steps (context_copy_test, context_tap_test): random
// writes into one context of an in-memory StateMachine, and its copies as a listing to
// compare between two groups.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "server/state/state_machine.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::testing {

struct Listed {
  BlockKey key;
  BlockCopy copy;
  friend bool operator==(const Listed&, const Listed&) = default;
};

// ForEachCopy's listing: blocks in creation order, a block's copies together.
inline std::vector<Listed> ListCopies(const server::StateMachine& machine,
                                      const ContextKey& context) {
  std::vector<Listed> out;
  machine.Read([&](const server::Index& index, Revision) {
    index.ForEachCopy(context, [&](BlockKey key, const BlockCopy& copy) {
      out.push_back({key, copy});
    });
  });
  return out;
}

// The listing with each block's copies sorted by holder and tier: the order of a block's
// copies is the order they were made in, which a copy does not keep (nor need to: lookups
// order holders by id, and ids are each index's own).
inline std::vector<Listed> SortedCopies(const server::StateMachine& machine,
                                        const ContextKey& context) {
  std::vector<Listed> out = ListCopies(machine, context);
  const auto by_holder = [](const Listed& a, const Listed& b) {
    return std::tie(a.copy.holder.id, a.copy.holder.dp_rank, a.copy.tier) <
           std::tie(b.copy.holder.id, b.copy.holder.dp_rank, b.copy.tier);
  };
  for (size_t begin = 0; begin < out.size();) {
    size_t end = begin + 1;
    while (end < out.size() && out[end].key == out[begin].key) ++end;
    std::sort(out.begin() + static_cast<long>(begin), out.begin() + static_cast<long>(end),
              by_holder);
    begin = end;
  }
  return out;
}

// The holders FillContext writes as: "e1" rank 1 names blocks by hashes of its own (the
// key ^ kOwnHashes), "store" keeps shared-tier copies with locations.
inline const HolderKey kFillHolders[] = {{"e1", 0}, {"e1", 1}, {"e2", 0}, {"store", 0}};
inline constexpr uint64_t kOwnHashes = 0x5555;

// Random writes into `context` of `machine`: `chains` chains from the root sharing
// prefixes, by kFillHolders in every tier, some stored twice, some removed (gaps in
// chains), shared-tier copies with locations.
inline void FillContext(server::StateMachine& machine, const ContextKey& context, uint32_t seed,
                        int chains_made = 60) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint64_t>> chains;
  for (int n = 0; n < chains_made; ++n) {
    std::vector<uint64_t> chain;
    if (!chains.empty() && rng() % 2 == 0) {
      const auto& base = chains[rng() % chains.size()];
      chain.assign(base.begin(), base.begin() + static_cast<long>(rng() % base.size()));
    }
    const size_t more = 1 + rng() % 12;
    for (size_t i = 0; i < more; ++i) chain.push_back(rng() | 1);
    chains.push_back(chain);
    const size_t h = rng() % 4;
    server::StoreCommand store;
    store.context = context;
    store.holder = kFillHolders[h];
    store.tier = h == 3 ? Tier::kShared : static_cast<Tier>(rng() % 3);
    store.base_depth = 0;
    store.hashes = chain;
    if (h == 1) {  // a publisher with hashes of its own
      for (uint64_t key : chain) store.engine_hashes.push_back(key ^ kOwnHashes);
    }
    if (h == 3) {
      for (uint64_t key : chain) store.locations.push_back("s3://b/" + std::to_string(key));
    }
    server::CommandBatch batch;
    batch.commands.emplace_back(store);
    if (rng() % 4 == 0) batch.commands.emplace_back(store);  // stored twice: refcount 2
    if (rng() % 3 == 0) {
      server::RemoveCommand remove;
      remove.context = context;
      remove.holder = store.holder;
      const size_t at = rng() % chain.size();
      remove.hashes = {h == 1 ? chain[at] ^ kOwnHashes : chain[at]};
      batch.commands.emplace_back(std::move(remove));
    }
    ApplyOne(machine, batch);
  }
}

}  // namespace kvatlas::testing
