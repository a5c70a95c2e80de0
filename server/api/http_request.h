// HttpRequest: a REST request as the routes see it. HttpConnection reads it with Beast and
// fills it once (FromBeast in http_connection.cc); nothing else in the REST adapter parses
// HTTP. Header names compare case-insensitively (RFC 9110 §5.1); the query's parameters
// and the path are percent-decoded.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace kvatlas::server {

struct CaseInsensitiveLess {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const;
};

using HttpHeaders = std::multimap<std::string, std::string, CaseInsensitiveLess>;
using HttpParams = std::multimap<std::string, std::string, std::less<>>;

struct HttpRequest {
  std::string method;   // as sent: "GET", "POST", ...
  std::string target;   // the request target as sent: path and query, not decoded
  std::string path;     // the target's path, percent-decoded ('+' stays '+')
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  HttpHeaders headers;
  HttpParams params;  // the query's, decoded ('+' is a space); repeated names kept in order
  std::string body;
  std::string remote_addr;  // the peer's IP address, as text

  [[nodiscard]] bool HasHeader(std::string_view name) const;
  // The first value of header `name`, "" when it is absent.
  [[nodiscard]] std::string Header(std::string_view name) const;
  [[nodiscard]] size_t HeaderCount(std::string_view name) const;
  [[nodiscard]] bool HasParam(std::string_view name) const;
  // The first value of query parameter `name`, "" when it is absent.
  [[nodiscard]] std::string Param(std::string_view name) const;
};

// %XX sequences decoded (a malformed one is kept as it is); with `plus_is_space`, '+' too
// (the query's form encoding, not the path's).
[[nodiscard]] std::string PercentDecode(std::string_view text, bool plus_is_space);

// Sets `request`'s target, path and params from a request target ("/v1/x?a=1&b").
void SetTarget(std::string_view target, HttpRequest* request);

}  // namespace kvatlas::server
