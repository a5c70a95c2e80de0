#include "server/service/placement_service.h"

#include <algorithm>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "common/internal/log.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

// How often a wait for this server's replica to apply a commit looks again.
constexpr std::chrono::milliseconds kApplyPoll{1};

// Submits one command to `group` (its applier, or its leader through the forwarder) and
// waits for its revision in that group.
Result<Revision> CommitAndWait(const Services& group, Command command, Deadline deadline) {
  auto promise = std::make_shared<std::promise<Result<Revision>>>();
  std::future<Result<Revision>> applied = promise->get_future();
  CommandBatch batch;
  batch.commands.push_back(std::move(command));
  SubmitPart(group, std::move(batch),
             [promise](Result<Revision> r) { promise->set_value(std::move(r)); });
  if (applied.wait_until(deadline) != std::future_status::ready) {
    return ApplyDeadlineExceeded(group);
  }
  return applied.get();
}

// Waits until this server's replica of `group` has applied `revision` (a commit made
// through another server reaches this one a moment later).
Status AwaitApplied(const Services& group, Revision revision, Deadline deadline) {
  while (group.machine->applied_revision() < revision) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status(StatusCode::kDeadlineExceeded,
                    "group " + std::to_string(group.group) + " did not apply revision " +
                        std::to_string(revision) + " on this server in time");
    }
    std::this_thread::sleep_for(kApplyPoll);
  }
  return Status::Ok();
}

// The accepting group, other than `home`, with the fewest entries (lowest id on ties).
Result<GroupId> PickGroup(const Services& services, const PlacementDirectory& directory,
                          GroupId home) {
  GroupId best = kNoGroup;
  uint64_t best_entries = std::numeric_limits<uint64_t>::max();
  const std::vector<Services>& groups = *services.groups;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto id = static_cast<GroupId>(i + 1);
    if (id == home || !GroupAccepting(directory, id)) continue;
    const uint64_t entries =
        groups[i].machine->Read([](const Index& index, Revision) { return index.Stats().entries; });
    if (entries < best_entries) {
      best = id;
      best_entries = entries;
    }
  }
  if (best == kNoGroup) {
    return Status::ResourceExhausted("no raft group other than group " + std::to_string(home) +
                                     " takes new contexts (their snapshots near "
                                     "snapshot_stop_bytes, or set so by hand)");
  }
  return best;
}

}  // namespace

std::vector<ContextKey> ContextsOf(const CommandBatch& batch) {
  std::vector<ContextKey> out;
  for (const Command& command : batch.commands) {
    const ContextKey* context = NamedContext(command);
    if (context == nullptr) continue;
    bool seen = false;
    for (const ContextKey& c : out) seen = seen || c == *context;
    if (!seen) out.push_back(*context);
  }
  return out;
}

bool GroupAccepting(const PlacementDirectory& directory, GroupId group) {
  const GroupDescriptor* listed = directory.FindGroup(group);
  return listed == nullptr || listed->accepting;
}

bool PlacementActive(const Services& services) {
  if (services.groups == nullptr) return false;
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  if (!directory->contexts().empty()) return true;
  for (const auto& [id, group] : directory->groups()) {
    if (!group.accepting) return true;
  }
  return false;
}

Status EnsurePlaced(const Services& services, const ContextKey& context, Deadline deadline) {
  const std::vector<Services>& groups = *services.groups;
  const StateMachine& cluster = ClusterState(services);
  std::shared_ptr<const PlacementDirectory> directory = cluster.directory();
  if (directory->Find(context) != nullptr) return Status::Ok();
  const GroupId home = HomeGroup(context, static_cast<uint32_t>(groups.size()));
  const Services& home_group = groups[home - 1];
  if (!home_group.machine->has_disowned() || !home_group.machine->Disowned(context)) {
    if (GroupAccepting(*directory, home)) return Status::Ok();
    const bool held = home_group.machine->Read(
        [&](const Index& index, Revision) { return index.HasContext(context); });
    if (held) return Status::Ok();
    // Somewhere to go first: a context disowned with nowhere to go is refused everywhere
    // until a group takes new contexts again.
    KVATLAS_RETURN_IF_ERROR(PickGroup(services, *directory, home).status());
    KVATLAS_ASSIGN_OR_RETURN(
        const Revision disowned,
        CommitAndWait(home_group, DisownContextCommand{context, directory->epoch() + 1}, deadline));
    KVATLAS_RETURN_IF_ERROR(AwaitApplied(home_group, disowned, deadline));
    // The home group came to hold the context before the disown: it stays there.
    if (!home_group.machine->Disowned(context)) return Status::Ok();
  }
  // Disowned by its home group (just now, or earlier by a placement that did not finish):
  // the directory must place it for it to be written at all.
  while (true) {
    directory = cluster.directory();
    if (directory->Find(context) != nullptr) return Status::Ok();
    KVATLAS_ASSIGN_OR_RETURN(const GroupId target, PickGroup(services, *directory, home));
    KVATLAS_ASSIGN_OR_RETURN(
        const Revision placed,
        CommitAndWait(groups[0], PlaceContextCommand{context, target}, deadline));
    KVATLAS_RETURN_IF_ERROR(AwaitApplied(groups[0], placed, deadline));
    if (cluster.directory()->Find(context) != nullptr) {
      LogInfo("context " + context.ToString() + " placed on group " +
              std::to_string(cluster.directory()->Find(context)->ranges.front().group) +
              " (its home group " + std::to_string(home) + " takes no new contexts)");
      return Status::Ok();
    }
    // The target stopped taking new contexts before the placement applied: pick again.
    if (std::chrono::steady_clock::now() >= deadline) return ApplyDeadlineExceeded(services);
  }
}

bool NeedsPlacement(const Services& services, const CommandBatch& batch) {
  if (!PlacementActive(services)) return false;
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  const auto groups = static_cast<uint32_t>(services.groups->size());
  for (const ContextKey& context : ContextsOf(batch)) {
    if (directory->Find(context) != nullptr) continue;
    const GroupId home = HomeGroup(context, groups);
    const StateMachine& home_state = *(*services.groups)[home - 1].machine;
    if (home_state.has_disowned() && home_state.Disowned(context)) return true;
    if (GroupAccepting(*directory, home)) continue;
    // A context the group holds stays there: its writes need no placing.
    const bool held =
        home_state.Read([&](const Index& index, Revision) { return index.HasContext(context); });
    if (!held) return true;
  }
  return false;
}

Status PlaceNewContexts(const Services& services, const CommandBatch& batch, Deadline deadline) {
  return PlacementActive(services) ? PlaceContextsOf(services, batch, deadline) : Status::Ok();
}

Status PlaceContextsOf(const Services& services, const CommandBatch& batch, Deadline deadline) {
  if (services.groups == nullptr) return Status::Ok();
  for (const ContextKey& context : ContextsOf(batch)) {
    KVATLAS_RETURN_IF_ERROR(EnsurePlaced(services, context, deadline));
  }
  return Status::Ok();
}

bool GaveAway(const Services& services, const Services& group, const ContextKey& context) {
  return services.groups != nullptr && group.machine->has_disowned() &&
         group.machine->Disowned(context) &&
         ClusterState(services).directory()->Find(context) == nullptr;
}

bool AwaitPlacement(const Services& services, const ContextKey& context, Deadline deadline) {
  const StateMachine& cluster = ClusterState(services);
  const Deadline until = std::min(deadline, std::chrono::steady_clock::now() + kPlacementWait);
  while (cluster.directory()->Find(context) == nullptr) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(kApplyPoll);
  }
  return true;
}

Status RefusalOf(const Services& group, const std::vector<ContextKey>& contexts,
                 Revision revision) {
  if (!group.machine->has_disowned()) return Status::Ok();
  for (const ContextKey& context : contexts) {
    const std::optional<DisownedContext> disowned = group.machine->Disowned(context);
    if (disowned && disowned->revision <= revision) {
      return Status::WrongGroup("context " + context.ToString() + " is not group " +
                                std::to_string(group.group) +
                                "'s: the placement directory places it elsewhere (epoch " +
                                std::to_string(disowned->epoch) + " or later); route it again");
    }
  }
  return Status::Ok();
}

}  // namespace kvatlas::server
