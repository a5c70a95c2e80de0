// REST access control (HttpAccess): Host names, tokens and roles, CORS, the audit counters,
// over real loopback sockets with stub routes.
#include "server/api/http_access.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api/http_server.h"
#include "server/service/auth.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

const std::string kReadToken = "read-secret";
const std::string kWriteToken = "write-secret";
const std::string kAdminToken = "admin-secret";

std::vector<TokenEntry> Tokens() {
  return {{"reader", Role::kRead, DigestOfToken(kReadToken)},
          {"writer", Role::kWrite, DigestOfToken(kWriteToken)},
          {"operator", Role::kAdmin, DigestOfToken(kAdminToken)}};
}

Router AccessRouter(const Services* services, std::vector<std::string> hosts) {
  Router router;
  const RouteHandler who = [](const RouteRequest& r) -> Result<HttpReply> {
    return JsonReply(json{{"principal", r.principal ? r.principal->name : "?"}}.dump());
  };
  router.Add({"GET", "/open", RouteAccess::kOpen, who});
  router.Add({"GET", "/read", RouteAccess::kRead, who});
  router.Add({"POST", "/write", RouteAccess::kWrite, who});
  router.Add({"POST", "/admin", RouteAccess::kAdmin, who});
  router.Add(
      {"POST", "/admin-fails", RouteAccess::kAdmin, [](const RouteRequest&) -> Result<HttpReply> {
         return Status::FailedPrecondition("busy");
       }});
  router.SetAccess(std::make_shared<HttpAccess>(services, HostAllowList(std::move(hosts))));
  return router;
}

struct AccessFixture {
  explicit AccessFixture(bool enabled = true, std::vector<std::string> hosts = {})
      : auth(enabled, Tokens()), audit(&metrics) {
    services.auth = &auth;
    services.audit = &audit;
    services.metrics = &metrics;
    HttpServerOptions options;
    options.port = 0;
    options.threads = 2;
    server =
        std::make_unique<HttpServer>(options, AccessRouter(&services, std::move(hosts)), &metrics);
    REQUIRE(server->Start().ok());
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", server->port()); }
  httplib::Headers Bearer(const std::string& token) const {
    return {{"Authorization", "Bearer " + token}};
  }

  Metrics metrics;
  Authenticator auth;
  AuditLog audit;
  Services services;
  std::unique_ptr<HttpServer> server;
};

// The answer's status, and for errors its JSON code.
std::pair<int, std::string> Outcome(const httplib::Result& result) {
  REQUIRE(result);
  const json body = json::parse(result->body, nullptr, false);
  const std::string code = body.is_object() && body.contains("code") ? body["code"] : "";
  return {result->status, code};
}

TEST_SUITE("HttpAccess") {
  TEST_CASE("HostAllowList: IP literals, localhost and configured names only") {
    const HostAllowList hosts({"kvatlas.internal", "Router.Example."});
    for (const char* ok : {"", "localhost", "LOCALHOST:7070", "localhost.", "127.0.0.1:7070",
                           "10.1.2.3", "[::1]:7070", "[fe80::1]", "kvatlas.internal:80",
                           "router.example", "ROUTER.EXAMPLE.:9"}) {
      CAPTURE(ok);
      CHECK(hosts.Allows(ok));
    }
    for (const char* refused :
         {"evil.example", "evil.example:7070", "127.0.0.1.nip.io", "localhost.evil.example", "::1",
          "[::1", "[zz]:1", "[::1]x", "kvatlas.internal.evil"}) {
      CAPTURE(refused);
      CHECK_FALSE(hosts.Allows(refused));
    }
    CHECK(HostAllowList({"*"}).Allows("anything.example"));
  }

  TEST_CASE("HttpAccess: no token 401, wrong token 401, low role 403, enough role 200") {
    AccessFixture f;
    auto client = f.Client();
    auto missing = client.Post("/write", "{}", "application/json");
    CHECK(Outcome(missing) == std::pair<int, std::string>{401, "unauthenticated"});
    CHECK(missing->get_header_value("WWW-Authenticate") == "Bearer realm=\"kvatlas\"");
    CHECK(Outcome(client.Post("/write", f.Bearer("nope"), "{}", "application/json")) ==
          std::pair<int, std::string>{401, "unauthenticated"});
    CHECK(Outcome(client.Post("/write", {{"Authorization", "Basic " + kWriteToken}}, "{}",
                              "application/json")) ==
          std::pair<int, std::string>{401, "unauthenticated"});
    auto low = client.Post("/write", f.Bearer(kReadToken), "{}", "application/json");
    CHECK(Outcome(low) == std::pair<int, std::string>{403, "permission_denied"});
    CHECK(json::parse(low->body)["message"].get<std::string>().find("\"reader\"") !=
          std::string::npos);
    auto ok = client.Post("/write", f.Bearer(kWriteToken), "{}", "application/json");
    CHECK(Outcome(ok).first == 200);
    CHECK(json::parse(ok->body)["principal"] == "writer");
    // Roles are ordered: admin may write and read; the scheme is case-insensitive.
    CHECK(
        client
            .Post("/write", {{"Authorization", "bearer " + kAdminToken}}, "{}", "application/json")
            ->status == 200);
    CHECK(client.Get("/read", f.Bearer(kWriteToken))->status == 200);
    CHECK(Outcome(client.Get("/read")).first == 401);
    CHECK(client.Get("/open")->status == 200);
    CHECK(Outcome(client.Post("/admin", f.Bearer(kWriteToken), "{}", "application/json")) ==
          std::pair<int, std::string>{403, "permission_denied"});
    // Access control comes before the body's checks: a refused request learns nothing else.
    CHECK(Outcome(client.Post("/write", "{}", "text/plain")).first == 401);

    const std::string metrics = f.metrics.Render({});
    CHECK(metrics.find("kvatlas_auth_failures_total{reason=\"missing_token\"} 3") !=
          std::string::npos);
    CHECK(metrics.find("kvatlas_auth_failures_total{reason=\"invalid_token\"} 2") !=
          std::string::npos);
    CHECK(metrics.find("kvatlas_auth_failures_total{reason=\"forbidden\"} 2") != std::string::npos);
  }

  TEST_CASE("HttpAccess: admin actions are counted with their outcome") {
    AccessFixture f;
    auto client = f.Client();
    CHECK(client.Post("/admin", f.Bearer(kAdminToken), "{}", "application/json")->status == 200);
    CHECK(client.Post("/admin-fails", f.Bearer(kAdminToken), "{}", "application/json")->status ==
          412);
    const std::string metrics = f.metrics.Render({});
    CHECK(metrics.find("kvatlas_admin_actions_total{action=\"POST /admin\",outcome=\"ok\"} 1") !=
          std::string::npos);
    CHECK(metrics.find("kvatlas_admin_actions_total{action=\"POST /admin-fails\",outcome="
                       "\"failed_precondition\"} 1") != std::string::npos);
  }

  TEST_CASE("HttpAccess: a reload takes effect on the next request") {
    AccessFixture f;
    auto client = f.Client();
    CHECK(client.Get("/read", f.Bearer(kReadToken))->status == 200);
    f.auth.Replace({{"reader2", Role::kRead, DigestOfToken("fresh")}});
    CHECK(client.Get("/read", f.Bearer(kReadToken))->status == 401);
    auto fresh = client.Get("/read", f.Bearer("fresh"));
    CHECK(fresh->status == 200);
    CHECK(json::parse(fresh->body)["principal"] == "reader2");
  }

  TEST_CASE("HttpAccess: a Host that is not this server's is refused on every path") {
    AccessFixture f(true, {"kvatlas.internal"});
    auto client = f.Client();
    const httplib::Headers evil = {{"Host", "evil.example:7070"}};
    CHECK(Outcome(client.Get("/open", evil)) ==
          std::pair<int, std::string>{403, "permission_denied"});
    CHECK(Outcome(client.Get("/nowhere", evil)).first == 403);
    httplib::Headers admin_evil = f.Bearer(kAdminToken);
    admin_evil.emplace("Host", "evil.example");
    CHECK(Outcome(client.Get("/read", admin_evil)).first == 403);
    CHECK(client.Get("/open", {{"Host", "kvatlas.internal:7070"}})->status == 200);
    CHECK(f.metrics.Render({}).find("kvatlas_auth_failures_total{reason=\"host_not_allowed\"} 3") !=
          std::string::npos);
  }

  TEST_CASE("HttpAccess: no CORS headers, and a preflight is not granted") {
    AccessFixture f(false);  // even with access control off
    auto client = f.Client();
    const httplib::Headers origin = {{"Origin", "http://evil.example"}};
    auto get = client.Get("/read", origin);
    REQUIRE(get);
    CHECK(get->status == 200);
    CHECK_FALSE(get->has_header("Access-Control-Allow-Origin"));
    auto answer = client.Options("/write", {{"Origin", "http://evil.example"},
                                            {"Access-Control-Request-Method", "POST"},
                                            {"Access-Control-Request-Headers", "content-type"}});
    REQUIRE(answer);
    CHECK(answer->status == 405);
    for (const auto& [name, value] : answer->headers) {
      CAPTURE(name);
      CHECK_FALSE(name.starts_with("Access-Control-"));
    }
  }

  TEST_CASE("HttpAccess: with access control off every route is open") {
    AccessFixture f(false);
    auto client = f.Client();
    auto admin = client.Post("/admin", "{}", "application/json");
    CHECK(admin->status == 200);
    CHECK(json::parse(admin->body)["principal"] == "anonymous");
  }
}

}  // namespace
}  // namespace kvatlas::server
