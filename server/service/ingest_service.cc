#include "server/service/ingest_service.h"

#include <future>
#include <memory>
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

Result<Revision> SubmitAndWait(const Services& services, CommandBatch batch) {
  services.metrics->ApplyStarted();
  std::future<Result<Revision>> done = services.applier->Submit(std::move(batch));
  const bool ready = done.wait_for(services.options.apply_timeout) == std::future_status::ready;
  services.metrics->ApplyFinished();
  if (!ready) return ApplyDeadlineExceeded(services);
  return done.get();
}

void SubmitAsync(const Services& services, CommandBatch batch,
                 std::function<void(Result<Revision>)> done) {
  Metrics* metrics = services.metrics;
  metrics->ApplyStarted();
  services.applier->SubmitAsync(std::move(batch),
                                [metrics, done = std::move(done)](Result<Revision> applied) {
                                  metrics->ApplyFinished();
                                  done(std::move(applied));
                                });
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
