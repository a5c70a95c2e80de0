#include "server/runtime/accepting_reporter.h"

#include <string>
#include <utility>

#include "common/internal/log.h"
#include "server/service/ingest_service.h"
#include "server/service/placement_service.h"

namespace kvatlas::server {

AcceptingReporter::AcceptingReporter(const Services* services)
    : services_(services),
      in_flight_(std::make_shared<std::vector<std::atomic<bool>>>(services->groups->size())),
      task_(std::chrono::milliseconds(0), [this] { return Round(); }) {}

PeriodicTask::Next AcceptingReporter::Round() {
  const std::vector<Services>& groups = *services_->groups;
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(*services_).directory();
  for (size_t i = 0; i < groups.size(); ++i) {
    const Services& group = groups[i];
    if (group.log == nullptr || !group.log->is_leader()) continue;
    const auto id = static_cast<GroupId>(i + 1);
    const bool accepting = group.applier->new_contexts_refused().empty();
    if (GroupAccepting(*directory, id) == accepting) continue;
    if ((*in_flight_)[i].exchange(true)) continue;
    CommandBatch batch;
    batch.commands.push_back(SetGroupAcceptingCommand{id, accepting});
    SubmitPart(groups[0], std::move(batch), [in_flight = in_flight_, i, id](Result<Revision> r) {
      (*in_flight)[i].store(false);
      if (!r.has_value()) {
        LogWarning("recording whether group " + std::to_string(id) +
                   " takes new contexts failed (retried next round): " + r.status().ToString());
      }
    });
  }
  return kPeriod;
}

}  // namespace kvatlas::server
