// The CLI's REST client (cpp-httplib) for `cluster`, `watch` and lookup's hints: HTTP, or
// HTTPS under the TLS flags (args.h TlsFlags), one-shot requests, and the advice printed
// when the REST API cannot be reached.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>

#include "client/cli/args.h"

namespace kvatlas::cli {

// A client of the REST API at `host`:`port` (an IPv6 host without brackets). With TLS on,
// HTTPS: the server's certificate is verified against tls.ca_file (else the system's trust
// store) and must name `host`; tls.cert_file and key_file, when set, are presented.
[[nodiscard]] std::unique_ptr<httplib::Client> MakeRestClient(const std::string& host, int port,
                                                              const TlsFlags& tls);

// Where REST requests go and how: the address (HOST:PORT, RestAddress), TLS, the access
// token ("" = none) and the time a request may take.
struct RestTarget {
  std::string address;
  TlsFlags tls;
  std::string token;
  std::chrono::milliseconds timeout{30000};
};

// One answer: its HTTP status and body.
struct RestAnswer {
  int status = 0;
  std::string body;
};

// `method` ("GET", "POST", "DELETE") `path` (with its query string) with `body` (JSON, for
// POST). kUnavailable when no answer came: "cannot reach the kvatlas REST API at ADDRESS:
// <DescribeRestError>".
[[nodiscard]] Result<RestAnswer> RestRequest(const RestTarget& target, const std::string& method,
                                             const std::string& path, const std::string& body = "");

// A REST error answer's "<status> <code>: <message>" ("HTTP 410 compacted: from: ...");
// the body as it is when it is not a JSON error.
[[nodiscard]] std::string RestErrorText(const RestAnswer& answer);

// What went wrong, as a phrase ("the connection was refused or the address is unreachable"):
// cpp-httplib's own names ("Connection", "Read") say too little.
[[nodiscard]] std::string DescribeRestError(httplib::Error error);

// "  Is kvatlas-server running with --http-listen ADDRESS? Pick the server with ..." and,
// without TLS, how to turn it on; no trailing newline.
[[nodiscard]] std::string RestUnreachableAdvice(const std::string& address, const TlsFlags& tls);

}  // namespace kvatlas::cli
