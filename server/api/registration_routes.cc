// Publisher registration (Mooncake Conductor dialect) and stream status:
// POST /register, POST /unregister, GET /v1/registrations, GET /v1/streams (docs/api.md
// §Engine streams). Registrations are state: they go
// through the applier like any write.
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "server/api/registration_json.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleRegister(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(Registration registration, RegistrationFromJson(body));
  const std::string instance = registration.instance_id;
  CommandBatch batch;
  batch.commands.emplace_back(RegisterCommand{std::move(registration)});
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, SubmitAndWait(api, std::move(batch)));
  return JsonReply(nlohmann::json{
      {"status", "registered successfully"}, {"instance_id", instance}, {"revision", revision}}
                       .dump());
}

Result<HttpReply> HandleUnregister(const ApiServices& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(UnregisterRequest req, UnregisterRequestFromJson(body));
  const std::string key =
      Registration::RegistrationKey(req.instance_id, req.tenant_id, req.dp_rank);
  const bool known = api.machine->ReadRegistry(
      [&key](const Registry& r, Revision) { return r.registrations.contains(key); });
  if (!known) {
    return Status::NotFound("no publisher is registered as " + key +
                            " (instance_id|tenant_id|dp_rank)");
  }
  CommandBatch batch;
  batch.commands.emplace_back(
      UnregisterCommand{std::move(req.instance_id), std::move(req.tenant_id), req.dp_rank});
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, SubmitAndWait(api, std::move(batch)));
  return JsonReply(nlohmann::json{
      {"status", "unregistered successfully"},
      {"removed_instances", nlohmann::json::array({key})},
      {"revision",
       revision}}.dump());
}

Result<HttpReply> HandleRegistrations(const ApiServices& api) {
  nlohmann::json list = api.machine->ReadRegistry([](const Registry& r, Revision revision) {
    nlohmann::json out = {{"revision", revision}, {"registrations", nlohmann::json::array()}};
    for (const auto& [key, registration] : r.registrations) {
      out["registrations"].push_back(RegistrationToJson(registration));
    }
    return out;
  });
  return JsonReply(list.dump());
}

Result<HttpReply> HandleStreams(const ApiServices& api) {
  nlohmann::json out = {{"streams", nlohmann::json::array()}};
  if (api.zmq != nullptr) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    for (const auto& view : api.zmq->Streams())
      out["streams"].push_back(StreamViewJson(*view, now));
  }
  return JsonReply(out.dump());
}

}  // namespace

void AddRegistrationRoutes(const ApiServices* api, Router* router) {
  router->Add({"POST", "/register", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleRegister(*api, request); }});
  router->Add({"POST", "/unregister", /*json_body=*/true,
               [api](const RouteRequest& request) { return HandleUnregister(*api, request); }});
  router->Add({"GET", "/v1/registrations", false,
               [api](const RouteRequest&) { return HandleRegistrations(*api); }});
  router->Add(
      {"GET", "/v1/streams", false, [api](const RouteRequest&) { return HandleStreams(*api); }});
}

}  // namespace kvatlas::server
