// The CLI's REST client (cpp-httplib) for `cluster` and `watch`: HTTP, or HTTPS under the
// TLS flags (args.h TlsFlags), and the advice printed when the REST API cannot be reached.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "client/cli/args.h"

namespace kvatlas::cli {

// A client of the REST API at `host`:`port` (an IPv6 host without brackets). With TLS on,
// HTTPS: the server's certificate is verified against tls.ca_file (else the system's trust
// store) and must name `host`; tls.cert_file and key_file, when set, are presented.
[[nodiscard]] std::unique_ptr<httplib::Client> MakeRestClient(const std::string& host, int port,
                                                              const TlsFlags& tls);

// What went wrong, as a phrase ("the connection was refused or the address is unreachable"):
// cpp-httplib's own names ("Connection", "Read") say too little.
[[nodiscard]] std::string DescribeRestError(httplib::Error error);

// "  Is kvatlas-server running with --http-listen ADDRESS? Pick the server with ..." and,
// without TLS, how to turn it on; no trailing newline.
[[nodiscard]] std::string RestUnreachableAdvice(const std::string& address, const TlsFlags& tls);

}  // namespace kvatlas::cli
