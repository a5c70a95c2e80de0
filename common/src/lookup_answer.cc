#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "common/internal/prefix_match.h"

namespace kvatlas {

LookupAnswer BuildLookupAnswer(const LookupResult& result, const ContextKey& context,
                               std::string_view instance_id, Revision revision) {
  LookupAnswer answer;
  answer.revision = revision;
  answer.context = context;
  answer.blocks_queried = result.blocks_queried;
  answer.blocks_found = result.blocks_found;

  // Holders with a local prefix, grouped by instance id (a sort of pointers rather than a
  // map: a lookup is on the scheduler's hot path, where each node allocation shows).
  std::vector<const HolderMatch*> local;
  local.reserve(result.holders.size());
  for (const HolderMatch& match : result.holders) {
    if (match.shared > 0) {
      answer.shared.push_back(
          SharedMatch{match.holder.id, match.holder.dp_rank, match.shared, match.shared_locations});
    }
    if (match.disk == 0) continue;
    if (!instance_id.empty() && match.holder.id != instance_id) continue;
    local.push_back(&match);
  }
  std::stable_sort(local.begin(), local.end(), [](const HolderMatch* a, const HolderMatch* b) {
    return a->holder.id < b->holder.id;
  });
  answer.instances.reserve(local.size() + (instance_id.empty() ? 0 : 1));
  for (size_t i = 0; i < local.size();) {
    InstanceMatch& instance = answer.instances.emplace_back();
    instance.instance_id = local[i]->holder.id;
    for (; i < local.size() && local[i]->holder.id == instance.instance_id; ++i) {
      const HolderMatch& match = *local[i];
      const TierBlocks blocks{match.gpu, match.cpu, match.disk, match.cpu_only, match.disk_only};
      instance.dp_ranks.push_back(RankMatch{match.holder.dp_rank, blocks});
      instance.blocks.gpu = std::max(instance.blocks.gpu, blocks.gpu);
      instance.blocks.cpu = std::max(instance.blocks.cpu, blocks.cpu);
      instance.blocks.disk = std::max(instance.blocks.disk, blocks.disk);
      instance.blocks.cpu_only = std::max(instance.blocks.cpu_only, blocks.cpu_only);
      instance.blocks.disk_only = std::max(instance.blocks.disk_only, blocks.disk_only);
    }
    std::sort(instance.dp_ranks.begin(), instance.dp_ranks.end(),
              [](const RankMatch& a, const RankMatch& b) { return a.dp_rank < b.dp_rank; });
  }
  if (!instance_id.empty() && answer.instances.empty()) {
    answer.instances.emplace_back().instance_id = std::string(instance_id);
  }
  std::stable_sort(
      answer.instances.begin(), answer.instances.end(),
      [](const InstanceMatch& a, const InstanceMatch& b) { return a.blocks.disk > b.blocks.disk; });
  std::sort(answer.shared.begin(), answer.shared.end(),
            [](const SharedMatch& a, const SharedMatch& b) {
              return std::tie(b.blocks, a.backend_id, a.dp_rank) <
                     std::tie(a.blocks, b.backend_id, b.dp_rank);
            });
  return answer;
}

}  // namespace kvatlas
