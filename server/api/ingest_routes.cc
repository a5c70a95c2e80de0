// POST /v1/events: decode and convert in the request thread, then hand the batch to the
// applier and wait for its revision (docs/api.md §Ingest).
#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/internal/log.h"
#include "kvatlas/common/events.h"
#include "kvatlas/common/json_codec.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

// Counts a batch in the applier-queue gauge for as long as the request waits on it.
class InFlight {
 public:
  explicit InFlight(Metrics* metrics) : metrics_(metrics) { metrics_->ApplyStarted(); }
  ~InFlight() { metrics_->ApplyFinished(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Metrics* metrics_;
};

Result<HttpReply> HandleEvents(const ApiServices& api, const RouteRequest& request) {
  std::optional<WriterPosition> writer;
  KVATLAS_ASSIGN_OR_RETURN(std::vector<BlockEvent> events,
                           DecodeEventBatch(request.http.body, &writer));
  const EventConverter converter(&api.machine->hasher(), api.options.converter);
  KVATLAS_ASSIGN_OR_RETURN(ConvertedBatch converted, converter.Convert(events));
  if (writer) converted.batch.position = WriterStreamPosition(*writer);
  IngestAnswer answer{api.machine->applied_revision(), converted.events, converted.blocks};
  // An empty batch changes nothing: it answers the current revision without a log entry.
  if (!converted.batch.commands.empty()) {
    KVATLAS_ASSIGN_OR_RETURN(answer.revision, SubmitAndWait(api, std::move(converted.batch)));
  }
  NoteUnknownMedia(api, events);
  return JsonReply(EncodeIngestAnswer(answer));
}

}  // namespace

Result<nlohmann::json> ParseJsonObjectBody(const RouteRequest& request) {
  nlohmann::json body =
      nlohmann::json::parse(request.http.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Status::InvalidArgument("body: not valid JSON");
  if (!body.is_object()) return Status::InvalidArgument("body: expected a JSON object");
  return body;
}

Result<Revision> SubmitAndWait(const ApiServices& api, CommandBatch batch) {
  InFlight in_flight(api.metrics);
  std::future<Result<Revision>> done = api.applier->Submit(std::move(batch));
  if (done.wait_for(api.options.apply_timeout) != std::future_status::ready) {
    return ApplyDeadlineExceeded(api);
  }
  return done.get();
}

Status ApplyDeadlineExceeded(const ApiServices& api) {
  return Status(StatusCode::kDeadlineExceeded,
                "the batch was not applied within " +
                    std::to_string(api.options.apply_timeout.count()) +
                    " ms (apply_timeout_ms); it may still be applied");
}

void NoteUnknownMedia(const ApiServices& api, std::span<const BlockEvent> events) {
  for (const BlockEvent& event : events) {
    if (event.medium_known || !event.medium) continue;
    if (api.metrics->RecordUnknownMedium(*event.medium)) {
      LogWarning("unknown medium \"" + *event.medium + "\" (backend " + event.holder.id +
                 ") is indexed as tier " + std::string(TierName(event.tier)));
    }
  }
}

void AddIngestRoutes(const ApiServices* api, Router* router) {
  router->Add({"POST", "/v1/events", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleEvents(*api, request); }});
}

}  // namespace kvatlas::server
