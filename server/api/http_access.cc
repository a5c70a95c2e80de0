#include "server/api/http_access.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "server/api/forwarding.h"

namespace kvatlas::server {
namespace {

std::string Normalise(std::string_view host) {
  std::string out(host);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1;
}

bool IsIpv6Literal(std::string_view bracketed) {
  if (bracketed.size() < 3 || bracketed.front() != '[' || bracketed.back() != ']') return false;
  const std::string inner(bracketed.substr(1, bracketed.size() - 2));
  unsigned char buffer[16];
  return inet_pton(AF_INET6, inner.c_str(), buffer) == 1;
}

// The request as named in audit lines: method and path.
std::string Described(const HttpRequest& request) { return request.method + " " + request.path; }

AuditSource SourceOf(const HttpRequest& request, const std::string& described) {
  AuditSource source{"rest", request.remote_addr, described};
  const auto forwarded = request.headers.find(kForwardedHeader);
  if (forwarded != request.headers.end()) source.forwarded_by = forwarded->second;
  return source;
}

// The token of an "Authorization: Bearer <token>" header; kUnauthenticated for another
// scheme or several Authorization headers. nullopt when there is none.
Result<std::optional<std::string>> BearerToken(const HttpRequest& request) {
  const size_t count = request.HeaderCount("Authorization");
  if (count == 0) return std::optional<std::string>();
  if (count > 1) return Status::Unauthenticated("Authorization: more than one header");
  const std::string value = request.Header("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  std::string scheme = value.substr(0, kScheme.size());
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != kScheme) {
    return Status::Unauthenticated("Authorization: only the Bearer scheme is accepted");
  }
  std::string token = value.substr(kScheme.size());
  token.erase(0, token.find_first_not_of(' '));
  token.erase(token.find_last_not_of(' ') + 1);
  return std::optional<std::string>(std::move(token));
}

Role RoleOf(RouteAccess access) {
  switch (access) {
    case RouteAccess::kWrite:
      return Role::kWrite;
    case RouteAccess::kAdmin:
      return Role::kAdmin;
    case RouteAccess::kOpen:
    case RouteAccess::kRead:
    case RouteAccess::kInternal:
      break;
  }
  return Role::kRead;
}

// "ok" for a 2xx answer, else the `code` of its error body (a wire name), else "http_NNN".
std::string OutcomeOf(const HttpReply& reply) {
  if (reply.status >= 200 && reply.status < 300) return "ok";
  const nlohmann::json body = nlohmann::json::parse(reply.body, nullptr, false);
  if (body.is_object() && body.contains("code") && body["code"].is_string()) {
    return std::string(WireNameOf(StatusCodeFromWireName(body["code"].get<std::string>())));
  }
  return "http_" + std::to_string(reply.status);
}

}  // namespace

HostAllowList::HostAllowList(std::vector<std::string> names) {
  names_.push_back("localhost");
  for (const std::string& name : names) {
    if (name == "*") any_ = true;
    const std::string normal = Normalise(name);
    if (!normal.empty() && std::find(names_.begin(), names_.end(), normal) == names_.end()) {
      names_.push_back(normal);
    }
  }
}

bool HostAllowList::Allows(std::string_view host) const {
  if (any_ || host.empty()) return true;
  if (host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = host.substr(close + 1);
    return (rest.empty() || rest.front() == ':') && IsIpv6Literal(host.substr(0, close + 1));
  }
  const size_t colon = host.find(':');
  if (colon != std::string_view::npos && host.find(':', colon + 1) != std::string_view::npos) {
    return false;  // an unbracketed IPv6 address is not a valid Host
  }
  const std::string name = Normalise(host.substr(0, colon));
  if (IsIpLiteral(name)) return true;
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

HttpAccess::HttpAccess(const Services* services, HostAllowList hosts)
    : services_(services), hosts_(std::move(hosts)) {}

Status HttpAccess::CheckHost(const HttpRequest& request) const {
  const std::string host = request.Header("Host");
  if (hosts_.Allows(host)) return Status::Ok();
  const Status refused = Status::PermissionDenied(
      "Host: \"" + host.substr(0, 256) +
      "\" is not a name of this server (add it to http_allowed_hosts if clients use it)");
  if (services_->audit != nullptr) {
    services_->audit->Refused(SourceOf(request, Described(request)), AuthFailure::kHostNotAllowed,
                              "", refused);
  }
  return refused;
}

Result<Principal> HttpAccess::AdmitInternal(const HttpRequest&) const {
  Principal internal;
  internal.name = "internal";
  internal.anonymous = true;
  return internal;
}

Result<Principal> HttpAccess::Admit(const Route& route, const HttpRequest& request) const {
  if (route.access == RouteAccess::kInternal) return AdmitInternal(request);
  const Authenticator* auth = services_->auth;
  if (auth == nullptr || !auth->enabled() || route.access == RouteAccess::kOpen) {
    Principal anonymous;
    anonymous.name = "anonymous";
    anonymous.anonymous = true;
    return anonymous;
  }
  const std::string described = Described(request);
  const auto refuse = [&](AuthFailure reason, std::string_view name, Status status) {
    if (services_->audit != nullptr) {
      services_->audit->Refused(SourceOf(request, described), reason, name, status);
    }
    return status;
  };
  Result<std::optional<std::string>> token = BearerToken(request);
  if (!token) return refuse(AuthFailure::kInvalidToken, "", token.error());
  if (!token->has_value()) {
    return refuse(AuthFailure::kMissingToken, "",
                  Status::Unauthenticated(described + " needs a token: send Authorization: "
                                                      "Bearer <token>"));
  }
  Result<Principal> principal = auth->Authenticate(**token);
  if (!principal) return refuse(AuthFailure::kInvalidToken, "", principal.error());
  if (Status s = Authenticator::Authorize(*principal, RoleOf(route.access), described); !s.ok()) {
    return refuse(AuthFailure::kForbidden, principal->name, s);
  }
  return principal;
}

void HttpAccess::Finished(const Route& route, const HttpRequest& request,
                          const Principal& principal, const HttpReply& reply) const {
  if (route.access != RouteAccess::kAdmin || services_->audit == nullptr) return;
  const std::string described = Described(request);
  const std::string outcome = OutcomeOf(reply);
  std::string detail;
  if (outcome != "ok") {
    const nlohmann::json body = nlohmann::json::parse(reply.body, nullptr, false);
    if (body.is_object() && body.contains("message") && body["message"].is_string()) {
      detail = body["message"].get<std::string>();
    }
  }
  services_->audit->AdminAction(SourceOf(request, described), principal.name,
                                route.method + " " + route.pattern, outcome, detail);
}

HttpReply RefusalReply(const Status& status) {
  HttpReply reply = ErrorReply(status);
  if (status.code() == StatusCode::kUnauthenticated) {
    reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"kvatlas\"");
  }
  return reply;
}

}  // namespace kvatlas::server
