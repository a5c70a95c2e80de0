// Publisher registration (Mooncake Conductor dialect) and stream status:
// POST /register, POST /unregister, GET /v1/registrations, GET /v1/streams (docs/api.md
// §Engine streams), over registration_service.h.
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "server/api/registration_json.h"
#include "server/api/routes.h"
#include "server/service/registration_service.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleRegister(const Services& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(Registration registration, RegistrationFromJson(body));
  const std::string instance = registration.instance_id;
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, RegisterPublisher(api, std::move(registration)));
  return JsonReply(nlohmann::json{
      {"status", "registered successfully"}, {"instance_id", instance}, {"revision", revision}}
                       .dump());
}

Result<HttpReply> HandleUnregister(const Services& api, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(UnregisterRequest req, UnregisterRequestFromJson(body));
  const std::string key =
      Registration::RegistrationKey(req.instance_id, req.tenant_id, req.dp_rank);
  KVATLAS_ASSIGN_OR_RETURN(
      Revision revision,
      UnregisterPublisher(api, std::move(req.instance_id), std::move(req.tenant_id), req.dp_rank));
  return JsonReply(nlohmann::json{
      {"status", "unregistered successfully"},
      {"removed_instances", nlohmann::json::array({key})},
      {"revision",
       revision}}.dump());
}

Result<HttpReply> HandleRegistrations(const Services& api) {
  const RegistrationListing listing = ListRegistrations(api);
  nlohmann::json out = {{"revision", listing.revision}, {"registrations", nlohmann::json::array()}};
  for (const Registration& registration : listing.registrations) {
    out["registrations"].push_back(RegistrationToJson(registration));
  }
  return JsonReply(out.dump());
}

Result<HttpReply> HandleStreams(const Services& api) {
  nlohmann::json out = {{"streams", nlohmann::json::array()}};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& view : ListStreams(api)) out["streams"].push_back(StreamViewJson(*view, now));
  return JsonReply(out.dump());
}

}  // namespace

void AddRegistrationRoutes(const Services* api, Router* router) {
  router->Add({"POST", "/register", RouteAccess::kAdmin,
               [api](const RouteRequest& request) { return HandleRegister(*api, request); }});
  router->Add({"POST", "/unregister", RouteAccess::kAdmin,
               [api](const RouteRequest& request) { return HandleUnregister(*api, request); }});
  router->Add({"GET", "/v1/registrations", RouteAccess::kRead,
               [api](const RouteRequest&) { return HandleRegistrations(*api); }});
  router->Add({"GET", "/v1/streams", RouteAccess::kRead,
               [api](const RouteRequest&) { return HandleStreams(*api); }});
}

}  // namespace kvatlas::server
