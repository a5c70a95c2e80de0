// The dashboard (docs/operations.md §Dashboard): GET / (its page) and GET /dashboard/{file}
// (its script, style sheet and icon), served from bytes built into the binary
// (embedded_files.h). They hold no data and need no token: the page reads the cluster's
// state with fetch() from the read routes, with the token the user typed in.

#include <string>
#include <string_view>

#include "server/api/embedded_files.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

// Scripts, styles, images and fetch() only from this origin; no inline script or style,
// no plugins, no framing, no forms. The page needs nothing more.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string ContentType(std::string_view name) {
  const auto ends = [name](std::string_view suffix) { return name.ends_with(suffix); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

// Whether an If-None-Match header names `etag` (a list of quoted tags, weak ones included,
// or "*").
bool NamesTag(std::string_view if_none_match, std::string_view etag) {
  if (if_none_match.find('*') != std::string_view::npos) return true;
  return !if_none_match.empty() && if_none_match.find(etag) != std::string_view::npos;
}

// The file, revalidated on every load (no-cache): an unchanged one is a 304 by its ETag, a
// new build's is fetched at once.
Result<HttpReply> ServeFile(const RouteRequest& request, std::string_view name) {
  for (const EmbeddedFile& file : DashboardFiles()) {
    if (file.name != name) continue;
    HttpReply reply;
    const std::string etag = "\"" + std::string(file.sha256) + "\"";
    if (NamesTag(request.http.Header("If-None-Match"), etag)) {
      reply.status = 304;
    } else {
      reply.body = std::string(file.bytes);
    }
    reply.content_type = ContentType(name);
    reply.headers = {{"ETag", etag},
                     {"Cache-Control", "no-cache"},
                     {"X-Content-Type-Options", "nosniff"},
                     {"Content-Security-Policy", std::string(kContentSecurityPolicy)},
                     {"Referrer-Policy", "no-referrer"},
                     {"X-Frame-Options", "DENY"}};
    return reply;
  }
  return Status::NotFound("no dashboard file " + std::string(name));
}

}  // namespace

void AddDashboardRoutes(Router* router) {
  router->Add({"GET", "/", RouteAccess::kOpen,
               [](const RouteRequest& request) { return ServeFile(request, "index.html"); }});
  router->Add({"GET", "/dashboard/{file}", RouteAccess::kOpen,
               [](const RouteRequest& request) { return ServeFile(request, request.path_param); }});
}

}  // namespace kvatlas::server
