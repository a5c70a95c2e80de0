#include "tools/replay/cache_model.h"

namespace kvatlas::replay {

bool LruBlocks::Touch(uint32_t id, std::vector<uint32_t>* evicted) {
  if (const auto it = where_.find(id); it != where_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return false;
  }
  if (capacity_ == 0) return false;
  while (where_.size() >= capacity_) {
    const uint32_t victim = order_.back();
    order_.pop_back();
    where_.erase(victim);
    evicted->push_back(victim);
  }
  order_.push_front(id);
  where_.emplace(id, order_.begin());
  return true;
}

bool LruBlocks::Erase(uint32_t id) {
  const auto it = where_.find(id);
  if (it == where_.end()) return false;
  order_.erase(it->second);
  where_.erase(it);
  return true;
}

TierMatch InstanceCache::Match(std::span<const uint32_t> blocks, const LruBlocks* shared) const {
  TierMatch match;
  for (uint32_t id : blocks) {
    if (gpu_.Contains(id)) {
      ++match.gpu;
    } else if (cpu_.Contains(id)) {
      ++match.cpu;
    } else if (shared != nullptr && shared->Contains(id)) {
      ++match.shared;
    } else {
      break;
    }
  }
  return match;
}

CacheChanges InstanceCache::Admit(std::span<const uint32_t> blocks, LruBlocks* shared) {
  CacheChanges changes;
  // Blocks that no tier had were computed: they go to shared storage too.
  std::vector<uint32_t> computed;
  for (uint32_t id : blocks) {
    if (!gpu_.Contains(id) && !cpu_.Contains(id) && !(shared && shared->Contains(id))) {
      computed.push_back(id);
    }
  }
  std::vector<uint32_t> evicted;
  for (size_t i = blocks.size(); i-- > 0;) {
    const uint32_t id = blocks[i];
    if (gpu_.Touch(id, &evicted)) changes.gpu_stored.push_back(id);
  }
  // A CPU copy that is used is fresh again.
  for (uint32_t id : blocks) {
    if (cpu_.Contains(id)) cpu_.Touch(id, &changes.cpu_removed);
  }
  for (uint32_t id : evicted) {
    // The request's own blocks never evict each other unless the prompt exceeds the GPU.
    changes.gpu_removed.push_back(id);
    if (cpu_.Touch(id, &changes.cpu_removed)) changes.cpu_stored.push_back(id);
  }
  if (shared != nullptr) {
    for (uint32_t id : computed) {
      if (shared->Touch(id, &changes.shared_removed)) changes.shared_stored.push_back(id);
    }
  }
  // A block both stored and removed in one step (a prompt larger than a tier) was never
  // visible: drop the pair so the events name only net changes.
  const auto net = [](std::vector<uint32_t>* stored, std::vector<uint32_t>* removed) {
    std::unordered_map<uint32_t, int> count;
    for (uint32_t id : *stored) ++count[id];
    for (uint32_t id : *removed) --count[id];
    std::erase_if(*stored, [&](uint32_t id) { return count[id] <= 0; });
    std::erase_if(*removed, [&](uint32_t id) {
      auto it = count.find(id);
      return it != count.end() && it->second >= 0;
    });
  };
  net(&changes.gpu_stored, &changes.gpu_removed);
  net(&changes.cpu_stored, &changes.cpu_removed);
  net(&changes.shared_stored, &changes.shared_removed);
  return changes;
}

}  // namespace kvatlas::replay
