// SendPeerHttp: one HTTP/1.1 exchange with another member's REST listener (a follower's
// forward to the leader, an address announcement: forwarding.h), over plaintext or TLS as
// the cluster's members serve it, with Boost.Beast like the REST server itself.
//
// Writes and calls that change something go on a new connection each, closed after the
// answer ("Connection: close"): they are rare (writes that reach a follower, announcements,
// at most 20 prediction rounds per second per follower in approximate mode), a held
// request may go to another leader on its next attempt, and one that failed after it was
// sent is never sent again. Reads (PeerHttpRequest::idempotent: a lookup answered by a
// member of a group this server does not hold) are frequent, and reuse the connections
// earlier reads left open: each calling thread keeps up to kPeerKeptPerThread, for at most
// kPeerKeptIdle each (under a member's 5 s idle timeout), and a read whose kept connection
// the member had closed meanwhile is sent again on a new one. A streamed answer
// (OpenPeerHttpStream: a relayed watch or snapshot) has a connection of its own.
//
// Over TLS the certificate files are read for each new connection, so a reloaded
// certificate (SIGHUP) is used from then on; the member's certificate must chain to
// `peer.ca_file` (else the system's trust store) and name the host dialled.
//
// Blocking: runs an io_context on the calling thread (an HTTP worker, a group-forward
// thread or a policy loop's, e.g. the PredictionRecorder's; never the raft or applier
// threads): one of its own per write, the thread's own for reads. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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
  // Changes nothing on the member (a read): may go on a kept connection, and is sent again
  // on a new one when the kept connection turns out closed.
  bool idempotent = false;
};

// The connections a thread keeps open for reads, and for how long each may idle.
inline constexpr size_t kPeerKeptPerThread = 16;
inline constexpr std::chrono::milliseconds kPeerKeptIdle{2'000};

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

// How many bytes of a streamed answer PeerHttpStream::Next returns at most.
inline constexpr size_t kPeerStreamPieceBytes = 16u << 10;

// An answer read as it arrives (GET /v1/watch or /v1/snapshot relayed from a member of a
// group this server does not hold: forwarding.h), on a connection of its own, closed when
// the stream is destroyed, with its own io_context. One thread at a time.
class PeerHttpStream {
 public:
  struct Impl;
  ~PeerHttpStream();
  PeerHttpStream(const PeerHttpStream&) = delete;
  PeerHttpStream& operator=(const PeerHttpStream&) = delete;

  [[nodiscard]] int status() const;
  [[nodiscard]] const HttpHeaders& headers() const;
  // The body has been read to its end (its last chunk, or its Content-Length).
  [[nodiscard]] bool done() const;
  // The next bytes of the body (at most kPeerStreamPieceBytes), waiting at most `timeout`
  // for them; "" once done(). kUnavailable, naming the member's address, when the
  // connection broke or nothing arrived in time.
  [[nodiscard]] Result<std::string> Next(std::chrono::milliseconds timeout);

 private:
  friend Result<std::unique_ptr<PeerHttpStream>> OpenPeerHttpStream(const PeerHttpOptions&,
                                                                    const HostPort&,
                                                                    const PeerHttpRequest&,
                                                                    PeerHttpTimeouts, bool*);
  explicit PeerHttpStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sends `request` on a new connection and reads the answer's head within
// timeouts.exchange; the body is then read with PeerHttpStream::Next. Errors and
// `*nothing_sent` as SendPeerHttp's.
[[nodiscard]] Result<std::unique_ptr<PeerHttpStream>> OpenPeerHttpStream(
    const PeerHttpOptions& peer, const HostPort& to, const PeerHttpRequest& request,
    PeerHttpTimeouts timeouts, bool* nothing_sent = nullptr);

// Connections SendPeerHttp opened since the process started (every thread's).
[[nodiscard]] uint64_t PeerHttpConnectionsOpened();

}  // namespace kvatlas::server
