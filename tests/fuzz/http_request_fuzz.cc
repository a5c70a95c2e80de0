// libFuzzer target for the REST server's request handling without sockets: arbitrary bytes
// read as an HTTP/1.1 request by Boost.Beast's request parser with the server's limits
// (16 KiB of header, 16 MiB of body), delivered in up to three reads whose split points the
// input chooses, then the parsed target's path looked up in the Router holding every route
// of AddAllRoutes (server/api/router.h). The transport itself (server/api/http_server.cc) is
// not fuzzed here: only the parts that every transport shares.
//
// Properties, beyond "no crash, no sanitizer report": the parser never consumes more than
// it was given (each read is an exactly-sized heap copy, so ASan reports any over-read);
// a parsed body is no larger than the input; and for every parsed path, Router::Find and
// Router::Label agree: a path some route matches is labelled with a route pattern, any
// other path is labelled "unmatched", and a found route has the request's method and
// matches the path.
//
// Input: two bytes choosing the split points (each a fraction, in 256ths, of the rest),
// then the request bytes. Seeds: tests/fuzz/corpus/http_request_fuzz/.
#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "server/api/routes.h"

namespace kvatlas::server {
namespace {

namespace http = boost::beast::http;

// The REST server's limits (HttpServerOptions / docs/limits.md).
constexpr uint32_t kHeaderLimit = 16 * 1024;
constexpr uint64_t kBodyLimit = 16ull << 20;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_request_fuzz: property violated: %s\n", what);
  std::abort();
}

// Every route, as the server registers them. Routes are never called (Find only matches),
// so default-constructed Services (all null) are enough. Built once, never destroyed.
const Router& AllRoutes() {
  static const Router* router = [] {
    static const Services services;
    auto* r = new Router;
    AddAllRoutes(&services, r);
    return r;
  }();
  return *router;
}

void CheckRouting(std::string_view method, std::string_view path) {
  const Router& router = AllRoutes();
  const RouteMatch match = router.Find(method, path);
  const std::string_view label = router.Label(path);
  if (match.route == nullptr) {
    // No route for this method: the path is known to other methods or labelled unmatched.
    Check(match.allowed.empty() == (label == "unmatched"), "Find and Label disagree on a path");
    Check(match.path_param.empty(), "a parameter captured without a route");
    return;
  }
  Check(match.allowed.empty(), "a found route with a list of other methods");
  Check(match.route->method == method, "a route found for another method");
  Check(label != "unmatched", "a matched path labelled unmatched");
  const std::string_view pattern = match.route->pattern;
  const size_t brace = pattern.find('{');
  if (brace == std::string_view::npos) {
    Check(path == pattern && match.path_param.empty(), "a fixed route matched another path");
  } else {
    Check(path.substr(0, brace) == pattern.substr(0, brace) &&
              match.path_param == path.substr(brace) && !match.path_param.empty() &&
              match.path_param.find('/') == std::string_view::npos,
          "a parameter route captured something other than the last segment");
  }
}

// Hands `pending` to the parser as one read (an exactly-sized heap copy); drops what it
// consumed. False once the parser stops (done or failed, `*ec` says which).
bool Deliver(http::request_parser<http::string_body>* parser, std::string* pending,
             boost::beast::error_code* ec) {
  while (!pending->empty() && !parser->is_done()) {
    const std::unique_ptr<char[]> exact(new char[pending->size()]);
    std::memcpy(exact.get(), pending->data(), pending->size());
    const size_t used = parser->put(boost::asio::buffer(exact.get(), pending->size()), *ec);
    Check(used <= pending->size(), "the parser consumed more than it was given");
    pending->erase(0, used);
    if (*ec == http::error::need_more) {
      *ec = {};
      return true;  // wait for the next read, with the unconsumed bytes kept
    }
    if (*ec) return false;
    if (used == 0) return true;
  }
  return !parser->is_done();
}

}  // namespace
}  // namespace kvatlas::server

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvatlas::server;
  if (size < 2) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 2, size - 2);
  size_t a = data[0] * input.size() / 256;
  size_t b = data[1] * input.size() / 256;
  if (a > b) std::swap(a, b);
  const std::string_view reads[] = {input.substr(0, a), input.substr(a, b - a), input.substr(b)};

  http::request_parser<http::string_body> parser;
  parser.header_limit(kHeaderLimit);
  parser.body_limit(kBodyLimit);
  parser.eager(true);
  boost::beast::error_code ec;
  std::string pending;
  bool reading = true;
  for (const std::string_view read : reads) {
    pending.append(read);
    reading = Deliver(&parser, &pending, &ec);
    if (!reading) break;
  }
  if (reading && !parser.is_done()) parser.put_eof(ec);  // the client closed its side

  if (!parser.is_header_done()) return 0;
  const http::request<http::string_body>& request = parser.get();
  if (parser.is_done() && !ec) {
    Check(request.body().size() <= input.size(), "a body larger than the input");
  }
  const std::string_view target(request.target().data(), request.target().size());
  std::string_view method(request.method_string().data(), request.method_string().size());
  if (method == "HEAD") method = "GET";  // as the server maps it
  CheckRouting(method, target.substr(0, target.find('?')));
  return 0;
}
