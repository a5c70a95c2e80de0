// The dashboard's routes (GET /, GET /dashboard/{file}) over a real loopback server: the
// embedded files, their headers (types, CSP, nosniff, caching), revalidation, and that the
// page needs nothing the policy forbids (inline script or style, other origins).
#include <doctest/doctest.h>
#include <httplib.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <regex>
#include <set>
#include <string>

#include "server/api/embedded_files.h"
#include "server/api/http_connection.h"
#include "server/api/http_server.h"
#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

struct DashboardServer {
  DashboardServer() : server(Options(), DashboardRouter(), &metrics) {
    REQUIRE(server.Start().ok());
  }
  static HttpServerOptions Options() {
    HttpServerOptions options;
    options.port = 0;
    options.threads = 1;
    return options;
  }
  static Router DashboardRouter() {
    Router router;
    AddDashboardRoutes(&router);
    return router;
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", server.port()); }

  Metrics metrics;
  HttpServer server;
};

std::string File(std::string_view name) {
  for (const EmbeddedFile& file : DashboardFiles()) {
    if (file.name == name) return std::string(file.bytes);
  }
  FAIL("no embedded file " << name);
  return "";
}

TEST_SUITE("Dashboard") {
  TEST_CASE("Dashboard: / and every file are served with their type and security headers") {
    DashboardServer s;
    httplib::Client client = s.Client();
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"/", "text/html; charset=utf-8"},
        {"/dashboard/index.html", "text/html; charset=utf-8"},
        {"/dashboard/app.js", "text/javascript; charset=utf-8"},
        {"/dashboard/app.css", "text/css; charset=utf-8"},
        {"/dashboard/favicon.svg", "image/svg+xml"}};
    for (const auto& [path, type] : cases) {
      CAPTURE(path);
      const auto reply = client.Get(path);
      REQUIRE(reply);
      CHECK(reply->status == 200);
      CHECK(reply->get_header_value("Content-Type") == type);
      CHECK(reply->get_header_value("X-Content-Type-Options") == "nosniff");
      CHECK(reply->get_header_value("Cache-Control") == "no-cache");
      CHECK(reply->get_header_value("ETag").size() == 18);  // 16 hex digits, quoted
      const std::string csp = reply->get_header_value("Content-Security-Policy");
      CHECK(csp.find("default-src 'none'") != std::string::npos);
      CHECK(csp.find("script-src 'self'") != std::string::npos);
      CHECK(csp.find("unsafe") == std::string::npos);
      CHECK_FALSE(reply->body.empty());
    }
    CHECK(client.Get("/")->body == File("index.html"));
    CHECK(client.Get("/dashboard/app.js")->body == File("app.js"));
    CHECK(client.Head("/dashboard/app.js")->status == 200);
  }

  // Over one keep-alive connection with Beast's client, which reads a 304 as RFC 9112 says
  // (no body, whatever the headers). cpp-httplib 0.11's client waits for the connection to
  // close instead: none of kvatlas's clients sends If-None-Match.
  TEST_CASE("Dashboard: an unchanged file is a 304 by its ETag, on a connection that goes on") {
    namespace http = boost::beast::http;
    DashboardServer s;
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), s.server.port()});
    boost::beast::flat_buffer buffer;
    const auto get = [&](const std::string& path, const std::string& if_none_match) {
      http::request<http::empty_body> request(http::verb::get, path, 11);
      request.set(http::field::host, "127.0.0.1");
      if (!if_none_match.empty()) request.set(http::field::if_none_match, if_none_match);
      http::write(socket, request);
      http::response<http::string_body> response;
      http::read(socket, buffer, response);
      return response;
    };
    const std::string etag(get("/dashboard/app.css", "")[http::field::etag]);
    const auto again = get("/dashboard/app.css", etag);
    CHECK(again.result_int() == 304);
    CHECK(again.body().empty());
    CHECK(again[http::field::etag] == etag);
    CHECK(again.count(http::field::content_length) == 0);
    CHECK(get("/dashboard/app.css", "\"0000\"").result_int() == 200);
    CHECK(get("/", etag).result_int() == 200);  // another file's tag
    CHECK(get("/dashboard/app.css", "W/" + etag + ", \"x\"").result_int() == 304);
    CHECK(get("/dashboard/app.css", "").body() == File("app.css"));  // the connection goes on
  }

  TEST_CASE("Dashboard: a 304 names no Content-Length") {
    HttpReply reply;
    reply.status = 304;
    const std::string text = SerializeReply(reply, false, true);
    CHECK(text.find("304 Not Modified") != std::string::npos);
    CHECK(text.find("Content-Length") == std::string::npos);
    reply.status = 200;
    CHECK(SerializeReply(reply, false, true).find("Content-Length: 0") != std::string::npos);
  }

  TEST_CASE("Dashboard: unknown files are 404, other methods 405") {
    DashboardServer s;
    httplib::Client client = s.Client();
    CHECK(client.Get("/dashboard/nope.js")->status == 404);
    CHECK(client.Get("/dashboard/")->status == 404);
    CHECK(client.Get("/dashboard/../app.js")->status == 404);
    CHECK(client.Post("/", "{}", "application/json")->status == 405);
  }

  TEST_CASE("Dashboard: the page uses only its own files, and nothing inline") {
    const std::string html = File("index.html");
    std::set<std::string> names;
    for (const EmbeddedFile& file : DashboardFiles()) names.insert(std::string(file.name));
    // Every src/href that loads something names an embedded file under /dashboard/.
    const std::regex reference(R"re((src|href)="([^"]*)")re");
    int references = 0;
    for (auto it = std::sregex_iterator(html.begin(), html.end(), reference);
         it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[2];
      CAPTURE(target);
      REQUIRE(target.starts_with("/dashboard/"));
      CHECK(names.contains(target.substr(std::string("/dashboard/").size())));
      ++references;
    }
    CHECK(references == 3);  // icon, style sheet, script
    // What the Content-Security-Policy would block: inline script, handlers, styles.
    CHECK(std::regex_search(html, std::regex("<script[^>]*src=")));
    CHECK_FALSE(std::regex_search(html, std::regex("<script(?![^>]*src=)")));
    CHECK_FALSE(std::regex_search(html, std::regex(R"re(\son[a-z]+=)re")));
    CHECK(html.find("<style") == std::string::npos);
    CHECK(html.find("style=") == std::string::npos);
    CHECK(File("app.js").find("innerHTML") == std::string::npos);  // data goes in as text
  }
}

}  // namespace
}  // namespace kvatlas::server
