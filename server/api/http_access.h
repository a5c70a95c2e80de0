// HttpAccess: access control of the REST API (docs/security.md), applied by the HTTP server
// to every request before its route runs:
//   1. the Host header must name this server (HostAllowList: DNS rebinding), else 403;
//   2. the route's RouteAccess decides whether a token is needed (Authorization: Bearer),
//      which the service layer's Authenticator checks: 401 without a valid one, 403 when its
//      role is below the route's;
// and after an admin route ran, its audit line. Every refusal is audited (AuditLog).
//
// Immutable after construction: safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "server/api/router.h"
#include "server/service/services.h"

namespace kvatlas::server {

// The names a REST request's Host header may give (docs/security.md §Browser-borne
// requests). A page that rebinds its own DNS name to this server's address sends its own
// name as the Host; only names the operator configured, "localhost" and IP literals are
// this server's. IP literals are always allowed: a browser sends one only for a URL that
// names that address, i.e. a page of that origin, never for a rebound name.
class HostAllowList {
 public:
  // `names`: host names without port, compared case-insensitively (a trailing dot
  // ignored); "*" allows any Host. "localhost" is always allowed.
  explicit HostAllowList(std::vector<std::string> names);

  // Whether a request whose Host header is `host` (with or without ":port"; "[v6]:port") is
  // allowed. An absent (empty) Host is allowed: browsers always send one.
  [[nodiscard]] bool Allows(std::string_view host) const;

  const std::vector<std::string>& names() const { return names_; }

 private:
  bool any_ = false;
  std::vector<std::string> names_;  // normalised
};

class HttpAccess {
 public:
  // `services` (its auth and audit) must outlive this.
  HttpAccess(const Services* services, HostAllowList hosts);

  // Step 1: kPermissionDenied naming the Host when it is not allowed (audited).
  [[nodiscard]] Status CheckHost(const HttpRequest& request) const;

  // Step 2, for the route that matched: who sent the request, or why it is refused
  // (kUnauthenticated, kPermissionDenied; audited).
  [[nodiscard]] Result<Principal> Admit(const Route& route, const HttpRequest& request) const;

  // After an admin route answered `reply`: the audit line and kvatlas_admin_actions_total.
  void Finished(const Route& route, const HttpRequest& request, const Principal& principal,
                const HttpReply& reply) const;

 private:
  // kInternal routes: admitted as the principal "internal" whatever the token. Their
  // authentication is the peers' (the cluster secret): the route itself requires a
  // verified internal call (RouteRequest::peer, forwarding.h).
  Result<Principal> AdmitInternal(const HttpRequest& request) const;

  const Services* services_;
  HostAllowList hosts_;
};

// The answer to a refused request: ErrorReply(status), with `WWW-Authenticate: Bearer` on
// 401 (RFC 6750).
[[nodiscard]] HttpReply RefusalReply(const Status& status);

}  // namespace kvatlas::server
