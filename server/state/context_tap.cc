#include "server/state/context_tap.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace kvatlas::server {

ContextTap::ContextTap(ContextKey context, const Index& index) : context_(std::move(context)) {
  for (const ContextInfo& info : index.Contexts()) {
    if (info.context == context_) id_ = info.id;
  }
}

bool ContextTap::Take(std::vector<TappedBlock>* blocks) {
  std::unordered_map<BlockKey, Change> changed;
  {
    std::lock_guard lock(mu_);
    if (reset_) return false;
    changed.swap(changed_);
  }
  std::vector<std::pair<uint64_t, TappedBlock>> ordered;
  ordered.reserve(changed.size());
  for (const auto& [key, change] : changed) {
    ordered.push_back({change.made, TappedBlock{key, change.went_away}});
  }
  // Blocks not made since the last Take (stamp 0) first; ties (only among those) by key, so
  // that equal changes give equal rounds.
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.key) < std::tie(b.first, b.second.key);
  });
  blocks->clear();
  blocks->reserve(ordered.size());
  for (const auto& [made, block] : ordered) blocks->push_back(block);
  return true;
}

void ContextTap::OnApplied(Revision, const MutationList& mutations) {
  std::lock_guard lock(mu_);
  for (const Mutation& m : mutations) {
    switch (m.kind) {
      case MutationKind::kPutContext:
        if (id_ == UINT32_MAX && m.context_key != nullptr && *m.context_key == context_) {
          id_ = m.context;
        }
        break;
      case MutationKind::kPutBlock:
        if (m.context == id_) changed_[m.key].made = m.stamp;
        break;
      case MutationKind::kDeleteBlock:
        if (m.context == id_) {
          Change& change = changed_[m.key];
          change.made = 0;
          change.went_away = true;
        }
        break;
      case MutationKind::kPutEntry:
      case MutationKind::kDeleteEntry:
        if (m.context == id_) changed_.try_emplace(m.key);
        break;
      default:
        break;
    }
  }
}

void ContextTap::OnReset(Revision, const Index&) {
  std::lock_guard lock(mu_);
  reset_ = true;
  changed_.clear();
}

std::vector<MovedBlock> MovedBlocks(const Index& index, const ContextKey& context,
                                    std::span<const TappedBlock> blocks) {
  std::vector<BlockKey> keys;
  keys.reserve(blocks.size());
  for (const TappedBlock& block : blocks) keys.push_back(block.key);
  std::vector<MovedBlock> moved = index.CopiesOf(context, keys);
  for (size_t i = 0; i < moved.size(); ++i) {
    moved[i].anew = blocks[i].went_away && !moved[i].copies.empty();
  }
  return moved;
}

}  // namespace kvatlas::server
