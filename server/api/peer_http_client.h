// SendPeerHttp: one HTTP/1.1 exchange with another member's REST listener (a follower's
// forward to the leader, an address announcement: forwarding.h), over plaintext or TLS as
// the cluster's members serve it, with Boost.Beast like the REST server itself.
//
// One connection per call, closed after the answer ("Connection: close"): calls are rare
// (writes that reach a follower, announcements, at most 20 prediction rounds per second per
// follower in approximate mode) and a held request may go to another leader on its next
// attempt. Over TLS the certificate files are read on each call, so a
// reloaded certificate (SIGHUP) is used from the next call on; the leader's certificate must
// chain to `peer.ca_file` (else the system's trust store) and name the host dialled.
//
// Blocking: runs its own io_context on the calling thread (an HTTP worker or a policy loop's
// thread, e.g. the PredictionRecorder's; never the raft or applier threads). Thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/internal/host_port.h"
#include "kvatlas/common/result.h"
#include "server/api/http_request.h"
#include "server/service/services.h"

namespace kvatlas::server {

struct PeerHttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // sent as it is (it was signed as it is): no encoding
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct PeerHttpAnswer {
  int status = 0;
  HttpHeaders headers;
  std::string body;
};

// The first value of an answer's header `name`, "" when it has none.
[[nodiscard]] inline std::string AnswerHeader(const PeerHttpAnswer& answer, std::string_view name) {
  const auto it = answer.headers.find(name);
  return it == answer.headers.end() ? std::string() : it->second;
}

// The largest answer body accepted; a larger one fails the call (kUnavailable).
inline constexpr size_t kMaxPeerAnswerBytes = size_t{256} << 20;

struct PeerHttpTimeouts {
  std::chrono::milliseconds connect;   // resolving and opening the connection
  std::chrono::milliseconds exchange;  // the TLS handshake, the request and the whole answer
};

// The answer, or kUnavailable naming the address and what failed. `*nothing_sent` (when
// given) is set when the call failed before any byte of the request left (the name did not
// resolve, the connection was refused or did not open in time): the caller may retry it
// elsewhere as it is.
[[nodiscard]] Result<PeerHttpAnswer> SendPeerHttp(const PeerHttpOptions& peer, const HostPort& to,
                                                  const PeerHttpRequest& request,
                                                  PeerHttpTimeouts timeouts,
                                                  bool* nothing_sent = nullptr);

}  // namespace kvatlas::server
