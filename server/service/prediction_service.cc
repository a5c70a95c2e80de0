#include "server/service/prediction_service.h"

#include <optional>
#include <string>
#include <utility>

namespace kvatlas::server {

std::vector<uint32_t> PredictedPrefixes(const Services& services, const ContextKey& context,
                                        std::span<const BlockKey> keys,
                                        std::span<const RouteCandidate> candidates) {
  const PredictedTable& table = services.machine->predicted();
  const auto now = PredictedTable::Clock::now();
  std::vector<uint32_t> out(candidates.size(), 0);
  if (keys.empty() || table.stats().entries == 0) return out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RouteCandidate& c = candidates[i];
    out[i] = c.dp_rank ? table.PrefixOf(context, HolderKey{c.instance_id, *c.dp_rank}, keys, now)
                       : table.BestOfInstance(context, c.instance_id, keys, now);
  }
  return out;
}

bool PredictsFor(const Services& services, const ContextKey& context,
                 const RouteCandidate& picked) {
  if (picked.predict) return true;
  const HolderKey holder{picked.instance_id, picked.dp_rank.value_or(0)};
  // Registered: always without events; with events, while its stream is quiet (down, or
  // idle: the next event replaces what was predicted).
  const std::optional<bool> publishes = ClusterState(services).ReadRegistry(
      [&](const Registry& registry, Revision) -> std::optional<bool> {
        const auto it = registry.registrations.find(
            Registration::RegistrationKey(holder.id, context.tenant, holder.dp_rank));
        if (it == registry.registrations.end()) return std::nullopt;
        return it->second.PublishesEvents();
      });
  if (!publishes) return false;
  return !*publishes || !services.machine->predicted().IsLive(holder, PredictedTable::Clock::now());
}

void RecordPrediction(const Services& services, const ContextKey& context,
                      const RouteCandidate& picked, std::vector<BlockKey> keys) {
  if (services.predictions == nullptr || keys.empty()) return;
  // predicted_max_entries 0: predictions are off here, not worth a log entry.
  if (services.machine->predicted().stats().max_entries == 0) return;
  if (!PredictsFor(services, context, picked)) return;
  (void)services.predictions->Enqueue(
      context, HolderKey{picked.instance_id, picked.dp_rank.value_or(0)}, std::move(keys));
}

Result<size_t> RecordDecision(const Services& all, const ContextKey& context,
                              const HolderKey& holder, std::vector<BlockKey> keys) {
  const Services& services = ServicesFor(all, context);  // the context's group
  KVATLAS_RETURN_IF_ERROR(CheckContextLimits(context, "", {}, services.options.names));
  KVATLAS_RETURN_IF_ERROR(CheckLength("", "backend_id", holder.id,
                                      services.options.names.name_bytes, "max_name_bytes"));
  if (services.predictions == nullptr || services.machine->predicted().stats().max_entries == 0) {
    return Status::FailedPrecondition(
        "this server records no predictions (predicted_max_entries is 0)");
  }
  if (keys.size() > services.options.max_lookup_blocks) {
    keys.resize(services.options.max_lookup_blocks);  // as a route's lookup is cut
  }
  const size_t queued = keys.size();
  if (!services.predictions->Enqueue(context, holder, std::move(keys))) {
    return Status::ResourceExhausted(
        "the prediction queue is full (predicted.queue.dropped in GET /v1/stats); retry later");
  }
  return queued;
}

std::vector<ConductorPrediction> PredictionsOf(const Services& services, const ContextKey& context,
                                               std::span<const BlockKey> keys) {
  std::vector<ConductorPrediction> out;
  for (PredictedMatch& m :
       services.machine->predicted().Matches(context, keys, PredictedTable::Clock::now())) {
    out.push_back({std::move(m.holder.id), m.holder.dp_rank, m.blocks});
  }
  return out;
}

}  // namespace kvatlas::server
