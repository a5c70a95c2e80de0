// POST /v1/events (docs/api.md §Ingest): decode in the request thread, then convert, submit
// and wait for the batch's revision (ingest_service.h).

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "kvatlas/common/events.h"
#include "kvatlas/common/json_codec.h"
#include "server/api/routes.h"
#include "server/service/ingest_service.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleEvents(const Services& services, const RouteRequest& request) {
  std::optional<WriterPosition> writer;
  KVATLAS_ASSIGN_OR_RETURN(std::vector<BlockEvent> events,
                           DecodeEventBatch(request.http.body, &writer));
  KVATLAS_ASSIGN_OR_RETURN(PreparedIngest prepared, PrepareIngest(services, events, writer));
  // An empty batch changes nothing: it answers the current revision without a log entry.
  if (!prepared.batch.commands.empty()) {
    KVATLAS_ASSIGN_OR_RETURN(prepared.answer.revision,
                             SubmitAndWait(services, std::move(prepared.batch)));
  }
  NoteUnknownMedia(services, events);
  return JsonReply(EncodeIngestAnswer(prepared.answer));
}

}  // namespace

Result<nlohmann::json> ParseJsonObjectBody(const RouteRequest& request) {
  nlohmann::json body;
  KVATLAS_RETURN_IF_ERROR(ParseJsonBody(request.http.body, &body));
  if (!body.is_object()) return Status::InvalidArgument("body: expected a JSON object");
  return body;
}

void AddIngestRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/v1/events", RouteAccess::kWrite, [services](const RouteRequest& request) {
                 return HandleEvents(*services, request);
               }});
}

}  // namespace kvatlas::server
