// Router: the REST route table, and HttpReply, the answer a route produces. It is separate
// from the HTTP server so that matching (404 vs 405) and the error mapping are testable
// without sockets. Immutable after setup: Find() is safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "server/api/http_request.h"
#include "server/peer/peer_auth.h"

namespace kvatlas::server {

struct Principal;  // server/service/auth.h
class HttpAccess;  // server/api/http_access.h

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  // A streamed answer (Server-Sent Events) instead of `body`: called again and again on
  // the request's thread; it sends with `write` (which returns false once the client is
  // gone) and returns false when the stream is over.
  using Write = std::function<bool(std::string_view)>;
  std::function<bool(const Write& write)> stream;
};

// The one mapping of a Status to an HTTP answer: HttpStatusOf(code) with the body
// {"code": "<wire name>", "message": "..."}. Every REST error goes through it.
[[nodiscard]] HttpReply ErrorReply(const Status& status);
// 200 with a JSON body.
[[nodiscard]] HttpReply JsonReply(std::string body);

// What a route handler sees: the request, the path segment captured by "{name}", for an
// internal call from another member (Router::PeerCalls) who sent it, and who sent it as a
// client (null when the router has no HttpAccess: unit tests).
struct RouteRequest {
  const HttpRequest& http;
  std::string_view path_param;
  const PeerCall* peer = nullptr;  // null: not a verified internal call
  const Principal* principal = nullptr;
};

// A handler returns its reply or a Status that becomes ErrorReply(status).
using RouteHandler = std::function<Result<HttpReply>(const RouteRequest&)>;

// Who may call a route (docs/security.md §Tokens and roles). With access control on, a
// token whose role is at least the route's is needed; kOpen routes need none.
enum class RouteAccess : uint8_t {
  kOpen,   // health probes: /healthz, /readyz
  kRead,   // lookups, routes, snapshots, watches, stats, streams, cluster status, metrics
  kWrite,  // events, heartbeats
  kAdmin,  // registrations, cluster membership, leadership transfer (audited)
  // Server-to-server calls (POST /v1/cluster/announce): no client token is asked for here.
  // Their authentication is the peers' (cluster membership), not a client role: the hook
  // for it is HttpAccess::AdmitInternal.
  kInternal,
};

struct Route {
  std::string method;   // "GET", "POST", ...
  std::string pattern;  // "/v1/stats", or "/v1/blocks/{key}" (one trailing parameter)
  RouteAccess access = RouteAccess::kRead;
  RouteHandler handler;
  // Empty: the body is JSON (below). Otherwise the one media type its body must declare: a
  // binary body of an internal call (POST /v1/cluster/apply, application/octet-stream, which
  // a browser cannot send cross-origin without a preflight).
  std::string body_type = {};

  // A POST route's body is JSON unless body_type says otherwise. On kWrite, kAdmin and kInternal
  // routes the server accepts only a JSON Content-Type (browser-borne requests, docs/security.md);
  // on kRead routes also none and curl's default (x-www-form-urlencoded).
  bool json_body() const { return method == "POST" && body_type.empty(); }
  bool strict_json() const {
    return json_body() && access != RouteAccess::kRead && access != RouteAccess::kOpen;
  }
};

struct RouteMatch {
  const Route* route = nullptr;  // null when no route has this method and path
  std::string_view path_param;
  // When route is null: the methods the path does have ("GET, POST"); empty = unknown path.
  std::string allowed;
};

class Router {
 public:
  // REQUIRES: a pattern has at most one "{name}" and only as its last segment.
  void Add(Route route);
  // GET, POST, etc.: the method as sent (HEAD is the caller's to map onto GET).
  [[nodiscard]] RouteMatch Find(std::string_view method, std::string_view path) const;
  // The route pattern serving `path` (any method), or "unmatched": a metrics label of
  // bounded cardinality.
  [[nodiscard]] std::string_view Label(std::string_view path) const;

  // Answers a route that failed with kNotLeader, instead of ErrorReply (a follower forwards
  // such requests to the leader: forwarding.h). `run_again` runs the route once more here
  // (kNotLeader means nothing was submitted, so that is safe), for a server that has become
  // the leader meanwhile. Unset: ErrorReply.
  using RunAgain = std::function<Result<HttpReply>()>;
  using NotLeaderHandler =
      std::function<HttpReply(const RouteRequest&, const Status&, const RunAgain&)>;
  void SetNotLeaderHandler(NotLeaderHandler handler) { not_leader_ = std::move(handler); }
  const NotLeaderHandler& not_leader_handler() const { return not_leader_; }

  // Access control of every request (Host, token and role, audit). Unset: none (tests).
  void SetAccess(std::shared_ptr<const HttpAccess> access) { access_ = std::move(access); }
  const HttpAccess* access() const { return access_.get(); }

  // Internal calls between the servers of a cluster (forwarding.h): `verify` checks a
  // request that carries kPeerAuthHeader before its route runs (its error is the answer);
  // `sign` signs the answer to a request it verified (kPeerReplyHeader). Unset: the header
  // is ignored (no cluster).
  struct PeerCalls {
    std::function<Result<PeerCall>(const HttpRequest&)> verify;
    std::function<void(const PeerCall&, HttpReply*)> sign;
  };
  void SetPeerCalls(PeerCalls calls) { peer_calls_ = std::move(calls); }
  const PeerCalls& peer_calls() const { return peer_calls_; }

 private:
  // The captured parameter when `pattern` matches `path`; false otherwise.
  static bool Matches(const Route& route, std::string_view path, std::string_view* param);

  std::vector<Route> routes_;
  NotLeaderHandler not_leader_;
  std::shared_ptr<const HttpAccess> access_;
  PeerCalls peer_calls_;
};

}  // namespace kvatlas::server
