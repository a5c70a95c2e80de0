#include "server/api/router.h"

#include "kvatlas/common/json_codec.h"

namespace kvatlas::server {

HttpReply ErrorReply(const Status& status) {
  HttpReply reply;
  reply.status = HttpStatusOf(status.code());
  reply.body = EncodeErrorBody(status);
  return reply;
}

HttpReply JsonReply(std::string body) {
  HttpReply reply;
  reply.body = std::move(body);
  return reply;
}

void Router::Add(Route route) { routes_.push_back(std::move(route)); }

bool Router::Matches(const Route& route, std::string_view path, std::string_view* param) {
  const std::string_view pattern = route.pattern;
  const size_t brace = pattern.find('{');
  if (brace == std::string_view::npos) return path == pattern;
  // A parameter is one non-empty path segment.
  if (!path.starts_with(pattern.substr(0, brace))) return false;
  const std::string_view rest = path.substr(brace);
  if (rest.empty() || rest.find('/') != std::string_view::npos) return false;
  *param = rest;
  return true;
}

RouteMatch Router::Find(std::string_view method, std::string_view path) const {
  RouteMatch match;
  for (const Route& route : routes_) {
    std::string_view param;
    if (!Matches(route, path, &param)) continue;
    if (route.method == method) {
      match.route = &route;
      match.path_param = param;
      match.allowed.clear();
      return match;
    }
    if (!match.allowed.empty()) match.allowed += ", ";
    match.allowed += route.method;
  }
  return match;
}

std::string_view Router::Label(std::string_view path) const {
  for (const Route& route : routes_) {
    std::string_view param;
    if (Matches(route, path, &param)) return route.pattern;
  }
  return "unmatched";
}

}  // namespace kvatlas::server
