#include "server/service/ingest_service.h"

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {

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
                                                                   CommandBatch batch) {
  std::vector<std::pair<const Services*, CommandBatch>> parts;
  if (services.groups == nullptr) {
    parts.emplace_back(&services, std::move(batch));
    return parts;
  }
  const std::vector<Services>& groups = *services.groups;
  std::vector<CommandBatch> by_group(groups.size());
  auto to = [&](const ContextKey& context) -> CommandBatch& {
    return by_group[static_cast<size_t>(&ServicesFor(services, context) - groups.data())];
  };
  for (Command& command : batch.commands) {
    if (auto* store = std::get_if<StoreCommand>(&command)) {
      to(store->context).commands.push_back(std::move(command));
    } else if (auto* remove = std::get_if<RemoveCommand>(&command)) {
      to(remove->context).commands.push_back(std::move(command));
    } else if (auto* clear = std::get_if<ClearCommand>(&command); clear && clear->context) {
      to(*clear->context).commands.push_back(std::move(command));
    } else if (auto* predict = std::get_if<PredictCommand>(&command)) {
      to(predict->context).commands.push_back(std::move(command));
    } else if (std::holds_alternative<ClearCommand>(command) ||
               std::holds_alternative<ExpireHolderCommand>(command) ||
               std::holds_alternative<RegisterCommand>(command) ||
               std::holds_alternative<UnregisterCommand>(command)) {
      for (CommandBatch& part : by_group) part.commands.push_back(command);
    } else {
      by_group[0].commands.push_back(std::move(command));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (by_group[g].commands.empty()) continue;
    by_group[g].position = batch.position;
    parts.emplace_back(&groups[g], std::move(by_group[g]));
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
  return group.applier->TrySubmitAsync(part, std::move(done));
}

void SubmitPart(const Services& group, CommandBatch part, Applier::Callback done) {
  if (Status refused = TrySubmitPart(group, &part, done); !refused.ok()) done(std::move(refused));
}

Result<Revision> SubmitAndWait(const Services& services, CommandBatch batch) {
  std::vector<std::pair<const Services*, CommandBatch>> parts =
      SplitByGroup(services, std::move(batch));
  services.metrics->ApplyStarted();
  std::vector<std::future<Result<Revision>>> pending;
  for (auto& [group, part] : parts) {
    auto promise = std::make_shared<std::promise<Result<Revision>>>();
    pending.push_back(promise->get_future());
    SubmitPart(*group, std::move(part),
               [promise](Result<Revision> applied) { promise->set_value(std::move(applied)); });
  }
  const auto deadline = std::chrono::steady_clock::now() + services.options.apply_timeout;
  Result<Revision> last = Revision{0};
  bool ready = true;
  for (std::future<Result<Revision>>& done : pending) {
    if (done.wait_until(deadline) != std::future_status::ready) {
      ready = false;
      break;
    }
    Result<Revision> applied = done.get();
    if (!applied.has_value() || last.has_value()) last = std::move(applied);
  }
  services.metrics->ApplyFinished();
  if (!ready) return ApplyDeadlineExceeded(services);
  return last;
}

void SubmitAsync(const Services& services, CommandBatch batch,
                 std::function<void(Result<Revision>)> done) {
  std::vector<std::pair<const Services*, CommandBatch>> parts =
      SplitByGroup(services, std::move(batch));
  Metrics* metrics = services.metrics;
  metrics->ApplyStarted();
  if (parts.size() == 1) {
    SubmitPart(*parts.front().first, std::move(parts.front().second),
               [metrics, done = std::move(done)](Result<Revision> applied) {
                 metrics->ApplyFinished();
                 done(std::move(applied));
               });
    return;
  }
  // Several groups: answered once every part is, with the first failure or the last
  // part's revision (ingest_service.h).
  struct Join {
    std::mutex mu;
    size_t left = 0;
    Result<Revision> result = Revision{0};
    std::function<void(Result<Revision>)> done;
  };
  auto join = std::make_shared<Join>();
  join->left = parts.size();
  join->done = std::move(done);
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last_part = i + 1 == parts.size();
    SubmitPart(*parts[i].first, std::move(parts[i].second),
               [metrics, join, last_part](Result<Revision> applied) {
                 bool finished = false;
                 {
                   std::lock_guard lock(join->mu);
                   if (!applied.has_value() ? join->result.has_value() : last_part) {
                     join->result = std::move(applied);
                   }
                   finished = --join->left == 0;
                 }
                 if (!finished) return;
                 metrics->ApplyFinished();
                 join->done(std::move(join->result));
               });
  }
}

Result<Revision> ApplyHereAndWait(const Services& group, CommandBatch batch,
                                  std::chrono::steady_clock::time_point deadline) {
  std::future<Result<Revision>> applied = group.applier->Submit(std::move(batch));
  if (applied.wait_until(deadline) != std::future_status::ready) {
    return ApplyDeadlineExceeded(group);
  }
  return applied.get();
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
