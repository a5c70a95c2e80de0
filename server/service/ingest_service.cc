#include "server/service/ingest_service.h"

#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "common/internal/log.h"
#include "server/service/placement_service.h"

namespace kvatlas::server {

namespace {

// A holder-wide command's fan-out id (ClearCommand::fanout): random, never 0. Unique
// enough: a group keeps 64 per holder, and two of them equal by chance would make a move
// take one holder-wide command for another once in 2^58.
uint64_t NewFanoutId() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0) id = random();
  return id;
}

// The answers of `parts` parts of one write joined into one: `done` runs once all have
// answered, with the first failure or else the last part's revision. join(last_part) is
// the callback of one part.
std::function<Applier::Callback(bool)> JoinParts(size_t parts, Applier::Callback done) {
  struct Join {
    std::mutex mu;
    size_t left = 0;
    Result<Revision> result = Revision{0};
    Applier::Callback done;
  };
  auto join = std::make_shared<Join>();
  join->left = parts;
  join->done = std::move(done);
  return [join](bool last_part) -> Applier::Callback {
    return [join, last_part](Result<Revision> applied) {
      {
        std::lock_guard lock(join->mu);
        if (!applied.has_value() ? join->result.has_value() : last_part) {
          join->result = std::move(applied);
        }
        if (--join->left != 0) return;
      }
      join->done(std::move(join->result));
    };
  };
}

}  // namespace

Result<PreparedIngest> PrepareIngest(const Services& services, std::span<const BlockEvent> events,
                                     const std::optional<WriterPosition>& writer) {
  // The configured name limits (the decoders applied the hard maxima); the field's path is
  // built only for an event that fails.
  for (size_t i = 0; i < events.size(); ++i) {
    if (!LimitsOfBlockEvent(events[i], "", services.options.names).ok()) {
      return LimitsOfBlockEvent(events[i], "events[" + std::to_string(i) + "]",
                                services.options.names);
    }
  }
  const EventConverter converter(&services.machine->hasher(), services.options.converter);
  KVATLAS_ASSIGN_OR_RETURN(ConvertedBatch converted, converter.Convert(events));
  if (writer) converted.batch.position = WriterStreamPosition(*writer);
  return PreparedIngest{
      std::move(converted.batch),
      IngestAnswer{services.machine->applied_revision(), converted.events, converted.blocks}};
}

std::vector<std::pair<const Services*, CommandBatch>> SplitByGroup(const Services& services,
                                                                   CommandBatch batch,
                                                                   const Services* refused_by) {
  std::vector<std::pair<const Services*, CommandBatch>> parts;
  if (services.groups == nullptr) {
    parts.emplace_back(&services, std::move(batch));
    return parts;
  }
  const std::vector<Services>& groups = *services.groups;
  const std::shared_ptr<const PlacementDirectory> directory = ClusterState(services).directory();
  std::vector<CommandBatch> by_group(groups.size());
  // Contexts the directory places, each a part of its own (placed stream keys).
  struct PlacedPart {
    size_t group;
    ContextKey context;
    CommandBatch batch;
  };
  std::vector<PlacedPart> placed;
  auto to = [&](const ContextKey& context) -> CommandBatch& {
    const size_t index = GroupOf(services, context) - 1;
    if (directory->contexts().empty() || directory->Find(context) == nullptr) {
      return by_group[index];
    }
    for (PlacedPart& part : placed) {
      if (part.context == context) return part.batch;
    }
    placed.push_back(PlacedPart{index, context, {}});
    return placed.back().batch;
  };
  for (Command& command : batch.commands) {
    if (const ContextKey* context = NamedContext(command)) {
      CommandBatch& part = to(*context);
      part.commands.push_back(std::move(command));
    } else if (std::holds_alternative<ClearCommand>(command) ||
               std::holds_alternative<ExpireHolderCommand>(command) ||
               std::holds_alternative<RegisterCommand>(command) ||
               std::holds_alternative<UnregisterCommand>(command)) {
      // One id for every group's part of a holder-wide removal (kept when a refused part
      // is routed again), which each group records (docs/scaling.md §Moves).
      if (auto* clear = std::get_if<ClearCommand>(&command); clear && clear->fanout == 0) {
        clear->fanout = NewFanoutId();
      } else if (auto* unreg = std::get_if<UnregisterCommand>(&command);
                 unreg && unreg->fanout == 0) {
        unreg->fanout = NewFanoutId();
      }
      for (size_t g = 0; g < groups.size(); ++g) {
        if (refused_by == nullptr || refused_by == &groups[g])
          by_group[g].commands.push_back(command);
      }
    } else {
      by_group[0].commands.push_back(std::move(command));
    }
  }
  // A publisher's restart resets its position in every group, placed keys included
  // (StateMachine: a restart of a stream forgets its placed positions too), so that its new
  // sequence is taken everywhere.
  const bool restart = batch.position && batch.position->restart;
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool restarts_here = restart && (refused_by == nullptr || refused_by == &groups[g]);
    if (by_group[g].commands.empty() && !restarts_here) continue;
    by_group[g].position = batch.position;
    parts.emplace_back(&groups[g], std::move(by_group[g]));
  }
  for (PlacedPart& part : placed) {
    if (batch.position) {
      part.batch.position = batch.position;
      part.batch.position->stream =
          PlacedStreamKey(BaseStreamKey(batch.position->stream), part.context);
    }
    parts.emplace_back(&groups[part.group], std::move(part.batch));
  }
  // A batch without commands (a writer's position alone) is group 1's, as it would be.
  if (parts.empty()) {
    batch.commands.clear();
    parts.emplace_back(&groups[0], std::move(batch));
  }
  return parts;
}

Status TrySubmitPart(const Services& group, CommandBatch* part, Applier::Callback done) {
  if (group.group_forwarder != nullptr && group.log != nullptr && !group.log->is_leader()) {
    return group.group_forwarder->TryForward(group, part, std::move(done));
  }
  // Applied here: a part the group refused (it names a context the group disowned) is
  // answered wrong_group (the forwarded ones are by the leader: ApplyHereAndWait).
  if (group.machine->has_disowned()) {
    done = [&group, contexts = ContextsOf(*part), done = std::move(done)](Result<Revision> r) {
      if (r.has_value()) {
        if (Status refused = RefusalOf(group, contexts, *r); !refused.ok()) {
          return done(std::move(refused));
        }
      }
      done(std::move(r));
    };
  }
  return group.applier->TrySubmitAsync(part, std::move(done));
}

void SubmitPart(const Services& group, CommandBatch part, Applier::Callback done) {
  if (Status refused = TrySubmitPart(group, &part, done); !refused.ok()) done(std::move(refused));
}

Result<Revision> SubmitAndWait(const Services& services, CommandBatch batch) {
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  KVATLAS_RETURN_IF_ERROR(PlaceNewContexts(services, batch, deadline));
  services.metrics->ApplyStarted();
  Result<Revision> last = Revision{0};
  std::vector<std::pair<const Services*, CommandBatch>> parts =
      SplitByGroup(services, std::move(batch));
  // Parts refused by their group (wrong_group: a placement this server had not applied yet
  // when it routed them) are routed again with the directory as it is then: a refused part
  // changed nothing, so resending it applies it once.
  while (!parts.empty()) {
    std::vector<std::future<Result<Revision>>> pending;
    std::vector<CommandBatch> kept;  // a copy of each part, for a refusal
    std::vector<const Services*> parts_group;
    for (auto& [group, part] : parts) {
      parts_group.push_back(group);
      auto promise = std::make_shared<std::promise<Result<Revision>>>();
      pending.push_back(promise->get_future());
      // A copy per part of a server of several groups: even a group this server's replica
      // does not know to have disowned anything may refuse (its leader knows better).
      kept.push_back(services.groups != nullptr ? part : CommandBatch{});
      SubmitPart(*group, std::move(part),
                 [promise](Result<Revision> applied) { promise->set_value(std::move(applied)); });
    }
    std::vector<std::pair<const Services*, CommandBatch>> again;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (pending[i].wait_until(deadline) != std::future_status::ready) {
        services.metrics->ApplyFinished();
        return ApplyDeadlineExceeded(services);
      }
      Result<Revision> applied = pending[i].get();
      if (!applied.has_value() && applied.status().code() == StatusCode::kWrongGroup &&
          !kept[i].commands.empty()) {
        CommandBatch refused = std::move(kept[i]);
        if (refused.position) {
          refused.position->stream = std::string(BaseStreamKey(refused.position->stream));
        }
        Status placed = PlaceContextsOf(services, refused, deadline);
        if (!placed.ok()) {
          last = std::move(placed);
          continue;
        }
        for (auto& part : SplitByGroup(services, std::move(refused), parts_group[i])) {
          again.push_back(std::move(part));
        }
        continue;
      }
      if (!applied.has_value() || last.has_value()) last = std::move(applied);
    }
    parts = std::move(again);
  }
  services.metrics->ApplyFinished();
  return last;
}

size_t PlaceOrDropNewContextStores(const Services& services, const Services& home,
                                   CommandBatch* batch) {
  if (!PlacementActive(services)) return home.applier->DropNewContextStores(batch);
  // Unplaced, these stay in their home group, whose applier refuses them: dropped below.
  (void)PlaceNewContexts(services, *batch,
                         std::chrono::steady_clock::now() + services.options.apply_timeout);
  size_t dropped = 0;
  for (const ContextKey& context : ContextsOf(*batch)) {
    const Services& group = ServicesFor(services, context);
    if (group.applier->new_contexts_refused().empty()) continue;
    const bool held = group.machine->Read(
        [&](const Index& index, Revision) { return index.HasContext(context); });
    if (held) continue;
    dropped += std::erase_if(batch->commands, [&](const Command& command) {
      const auto* store = std::get_if<StoreCommand>(&command);
      return store != nullptr && store->context == context;
    });
  }
  return dropped;
}

Status TrySubmitStreamBatch(const Services& services, const Services& home, CommandBatch* batch,
                            Applier::Callback done) {
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  if (!PlacementActive(services)) {
    return TrySubmitPart(home, batch,
                         RoutedAgainOnRefusal(services, home, *batch, std::move(done), deadline));
  }
  // Kept whole until the first part is taken: refused, the batch is left as it was.
  std::vector<std::pair<const Services*, CommandBatch>> parts = SplitByGroup(services, *batch);
  KVATLAS_RETURN_IF_ERROR(TrySubmitPart(
      *parts.front().first, &parts.front().second,
      RoutedAgainOnRefusal(services, *parts.front().first, parts.front().second, done, deadline)));
  *batch = CommandBatch{};
  for (size_t i = 1; i < parts.size(); ++i) {
    while (true) {
      Status s = TrySubmitPart(
          *parts[i].first, &parts[i].second,
          RoutedAgainOnRefusal(services, *parts[i].first, parts[i].second, done, deadline));
      if (s.ok()) break;
      if (s.code() != StatusCode::kResourceExhausted ||
          std::chrono::steady_clock::now() >= deadline) {
        done(std::move(s));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return Status::Ok();
}

namespace {

// SubmitAsync once the batch's new contexts are placed (or need no placing).
void SubmitAsyncPlaced(const Services& services, CommandBatch batch,
                       std::function<void(Result<Revision>)> done,
                       std::chrono::steady_clock::time_point deadline) {
  std::vector<std::pair<const Services*, CommandBatch>> parts =
      SplitByGroup(services, std::move(batch));
  Metrics* metrics = services.metrics;
  metrics->ApplyStarted();
  // Answered once every part is, with the first failure or the last part's revision
  // (ingest_service.h).
  auto join = JoinParts(parts.size(), [metrics, done = std::move(done)](Result<Revision> r) {
    metrics->ApplyFinished();
    done(std::move(r));
  });
  for (size_t i = 0; i < parts.size(); ++i) {
    const Services& group = *parts[i].first;
    Applier::Callback answered = RoutedAgainOnRefusal(services, group, parts[i].second,
                                                      join(i + 1 == parts.size()), deadline);
    SubmitPart(group, std::move(parts[i].second), std::move(answered));
  }
}

}  // namespace

void SubmitAsync(const Services& services, CommandBatch batch,
                 std::function<void(Result<Revision>)> done) {
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  if (!NeedsPlacement(services, batch)) {
    return SubmitAsyncPlaced(services, std::move(batch), std::move(done), deadline);
  }
  // A new context to place first: up to two commits, waited for on the reroute thread (or,
  // without one, on this thread), not on a network handler.
  auto place = [&services, deadline](CommandBatch write,
                                     std::function<void(Result<Revision>)> answer) {
    if (Status placed = PlaceNewContexts(services, write, deadline); !placed.ok()) {
      return answer(std::move(placed));
    }
    SubmitAsyncPlaced(services, std::move(write), std::move(answer), deadline);
  };
  if (services.rerouter == nullptr) return place(std::move(batch), std::move(done));
  auto held = std::make_shared<std::pair<CommandBatch, std::function<void(Result<Revision>)>>>(
      std::move(batch), std::move(done));
  if (!services.rerouter->Submit(
          [place, held] { place(std::move(held->first), std::move(held->second)); })) {
    held->second(Status::Unavailable(
        "a write into a context to be placed on another group, and this server's queue of "
        "writes waiting for a placement is full; retry"));
  }
}

Applier::Callback RoutedAgainOnRefusal(const Services& services, const Services& group,
                                       const CommandBatch& part, Applier::Callback done,
                                       std::chrono::steady_clock::time_point deadline) {
  // The copy costs a part's commands: taken only while placement is at work (a disown
  // comes after the directory stops a group's new contexts) or the group disowned some.
  if (services.rerouter == nullptr ||
      !(group.machine->has_disowned() || PlacementActive(services))) {
    return done;
  }
  auto kept = std::make_shared<CommandBatch>(part);
  auto answer = std::make_shared<Applier::Callback>(std::move(done));
  return [&services, &group, kept, answer, deadline](Result<Revision> applied) {
    if (applied.has_value() || applied.status().code() != StatusCode::kWrongGroup) {
      return (*answer)(std::move(applied));
    }
    const bool posted = services.rerouter->Submit([&services, &group, kept, answer, deadline] {
      CommandBatch refused = std::move(*kept);
      if (refused.position) {
        refused.position->stream = std::string(BaseStreamKey(refused.position->stream));
      }
      if (Status placed = PlaceContextsOf(services, refused, deadline); !placed.ok()) {
        return (*answer)(std::move(placed));
      }
      std::vector<std::pair<const Services*, CommandBatch>> parts =
          SplitByGroup(services, std::move(refused), &group);
      auto join = JoinParts(parts.size(), std::move(*answer));
      for (size_t i = 0; i < parts.size(); ++i) {
        const Services& to = *parts[i].first;
        Applier::Callback answered = RoutedAgainOnRefusal(services, to, parts[i].second,
                                                          join(i + 1 == parts.size()), deadline);
        SubmitPart(to, std::move(parts[i].second), std::move(answered));
      }
    });
    if (!posted) {
      (*answer)(Status::Unavailable(
          "a write part was refused by a group that no longer holds its context, and this "
          "server's queue of parts to route again is full; retry"));
    }
  };
}

Result<Revision> ApplyHereAndWait(const Services& group, CommandBatch batch,
                                  std::chrono::steady_clock::time_point deadline) {
  const std::vector<ContextKey> contexts =
      group.machine->has_disowned() ? ContextsOf(batch) : std::vector<ContextKey>{};
  std::future<Result<Revision>> applied = group.applier->Submit(std::move(batch));
  if (applied.wait_until(deadline) != std::future_status::ready) {
    return ApplyDeadlineExceeded(group);
  }
  KVATLAS_ASSIGN_OR_RETURN(const Revision revision, applied.get());
  KVATLAS_RETURN_IF_ERROR(RefusalOf(group, contexts, revision));
  return revision;
}

Status ApplyDeadlineExceeded(const Services& services) {
  return Status(StatusCode::kDeadlineExceeded,
                "the batch was not applied within " +
                    std::to_string(services.options.apply_timeout.count()) +
                    " ms (apply_timeout_ms); it may still be applied");
}

void NoteUnknownMedia(const Services& services, std::span<const BlockEvent> events) {
  for (const BlockEvent& event : events) {
    if (event.medium_known || !event.medium) continue;
    if (services.metrics->RecordUnknownMedium(*event.medium)) {
      LogWarning("unknown medium \"" + *event.medium + "\" (backend " + event.holder.id +
                 ") is indexed as tier " + std::string(TierName(event.tier)));
    }
  }
}

}  // namespace kvatlas::server
