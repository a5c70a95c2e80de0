// Publisher registration (Mooncake Conductor dialect) and stream status:
// POST /register, POST /unregister, GET /v1/registrations, GET /v1/streams (docs/api.md
// §Engine streams), over registration_service.h.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "server/api/registration_json.h"
#include "server/api/routes.h"
#include "server/service/registration_service.h"

namespace kvatlas::server {
namespace {

Result<HttpReply> HandleRegister(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(Registration registration, RegistrationFromJson(body));
  const std::string instance = registration.instance_id;
  KVATLAS_ASSIGN_OR_RETURN(Revision revision, RegisterPublisher(services, std::move(registration)));
  return JsonReply(nlohmann::json{
      {"status", "registered successfully"}, {"instance_id", instance}, {"revision", revision}}
                       .dump());
}

Result<HttpReply> HandleUnregister(const Services& services, const RouteRequest& request) {
  KVATLAS_ASSIGN_OR_RETURN(nlohmann::json body, ParseJsonObjectBody(request));
  KVATLAS_ASSIGN_OR_RETURN(UnregisterRequest req, UnregisterRequestFromJson(body));
  const std::string key =
      Registration::RegistrationKey(req.instance_id, req.tenant_id, req.dp_rank);
  KVATLAS_ASSIGN_OR_RETURN(Revision revision,
                           UnregisterPublisher(services, std::move(req.instance_id),
                                               std::move(req.tenant_id), req.dp_rank));
  return JsonReply(nlohmann::json{
      {"status", "unregistered successfully"},
      {"removed_instances", nlohmann::json::array({key})},
      {"revision",
       revision}}.dump());
}

Result<HttpReply> HandleRegistrations(const Services& services) {
  const RegistrationListing listing = ListRegistrations(services);
  nlohmann::json out = {{"revision", listing.revision}, {"registrations", nlohmann::json::array()}};
  for (const Registration& registration : listing.registrations) {
    out["registrations"].push_back(RegistrationToJson(registration));
  }
  return JsonReply(out.dump());
}

Result<HttpReply> HandleStreams(const Services& services) {
  nlohmann::json out = {{"streams", nlohmann::json::array()}};
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& view : ListStreams(services))
    out["streams"].push_back(StreamViewJson(*view, now));
  return JsonReply(out.dump());
}

}  // namespace

void AddRegistrationRoutes(const Services* services, Router* router) {
  router->Add({"POST", "/register", RouteAccess::kAdmin, [services](const RouteRequest& request) {
                 return HandleRegister(*services, request);
               }});
  router->Add({"POST", "/unregister", RouteAccess::kAdmin, [services](const RouteRequest& request) {
                 return HandleUnregister(*services, request);
               }});
  router->Add({"GET", "/v1/registrations", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleRegistrations(*services); }});
  router->Add({"GET", "/v1/streams", RouteAccess::kRead,
               [services](const RouteRequest&) { return HandleStreams(*services); }});
}

}  // namespace kvatlas::server
