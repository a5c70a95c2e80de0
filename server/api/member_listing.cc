#include "server/api/member_listing.h"

#include <string>
#include <utility>

#include "server/api/forwarding.h"
#include "server/api/routes.h"
#include "server/service/lookup_service.h"
#include "server/service/replica_audit_service.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

// A member's error answer as a Status of its code ("code" and "message" of the body).
Status StatusOfReply(const HttpReply& reply) {
  const json body = json::parse(reply.body, nullptr, false);
  if (body.is_object() && body.contains("code") && body["code"].is_string() &&
      body.contains("message") && body["message"].is_string()) {
    return Status(StatusCodeFromWireName(body["code"].get<std::string>()),
                  body["message"].get<std::string>());
  }
  return Status::Unavailable("a group's member answered " + std::to_string(reply.status) + ": " +
                             reply.body);
}

// to[name] += from[name], for unsigned counts (a member's answer is this build's; anything
// else is left as it is).
void AddCount(const json& from, const std::string& name, json* to) {
  if (!from.contains(name) || !from[name].is_number_unsigned() || !to->is_object()) return;
  json& sum = (*to)[name];
  sum = (sum.is_number_unsigned() ? sum.get<uint64_t>() : 0) + from[name].get<uint64_t>();
}

}  // namespace

Result<ListingScope> PrepareListing(const Services& services, const RouteRequest& request,
                                    const Services* context_group) {
  ListingScope scope;
  if (request.http.HasParam("group")) {
    KVATLAS_ASSIGN_OR_RETURN(const Services* named, GroupOfQuery(services, request));
    scope.only = named->group;
    if (context_group == nullptr && services.groups != nullptr) context_group = named;
  }
  if (context_group != nullptr) {
    scope.elsewhere = AnswerFromMember(services, request, *context_group);
    return scope;
  }
  KVATLAS_RETURN_IF_ERROR(ServesReads(services));
  for (const GroupId id : UnhostedGroups(services)) {
    HttpRequest http = request.http;
    std::string target = http.target.empty() ? http.path : http.target;
    target += (target.find('?') == std::string::npos ? "?group=" : "&group=") + std::to_string(id);
    SetTarget(target, &http);
    const RouteRequest sent{http, request.path_param, request.peer, request.principal};
    std::optional<HttpReply> reply = AnswerFromMember(services, sent, (*services.groups)[id - 1]);
    if (!reply) {
      return Status::Unavailable("group " + std::to_string(id) +
                                 " came to this server while it was listed: retry");
    }
    if (reply->status != 200) return StatusOfReply(*reply);
    json body = json::parse(reply->body, nullptr, false);
    if (!body.is_object()) {
      return Status::Unavailable("group " + std::to_string(id) +
                                 "'s member answered a listing that is not a JSON object");
    }
    scope.parts.push_back(std::move(body));
  }
  return scope;
}

void MergeHolderParts(const std::vector<json>& parts, json* holders) {
  for (const json& part : parts) {
    if (!part.contains("holders") || !part["holders"].is_array()) continue;
    for (const json& holder : part["holders"]) {
      json* same = nullptr;
      for (json& known : *holders) {
        if (known["holder_id"] == holder["holder_id"] && known["dp_rank"] == holder["dp_rank"]) {
          same = &known;
          break;
        }
      }
      if (same == nullptr) {
        holders->push_back(holder);
        continue;
      }
      AddCount(holder, "entries", same);
      if (!holder.contains("entries_by_tier") || !holder["entries_by_tier"].is_object()) continue;
      for (const auto& [tier, count] : holder["entries_by_tier"].items()) {
        AddCount(holder["entries_by_tier"], tier, &(*same)["entries_by_tier"]);
      }
    }
  }
}

void AppendListingParts(const std::vector<json>& parts, const char* field, json* items) {
  for (const json& part : parts) {
    if (!part.contains(field) || !part[field].is_array()) continue;
    for (const json& item : part[field]) items->push_back(item);
  }
}

}  // namespace kvatlas::server
