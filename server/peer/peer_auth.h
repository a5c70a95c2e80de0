// PeerAuth: how the servers of one cluster prove to each other that they are members
// (docs/security.md §Peers, docs/replication.md §Peer handshake). Every proof is an
// HMAC-SHA256 under a key derived from the cluster secret, over the cluster id and the
// server ids involved, so a process without the secret, or of another cluster, can neither
// take part in raft (the raft transport's handshake, server/replication/tcp_transport.h)
// nor make internal HTTP calls (a member's address announcement, a write a follower
// forwards to the leader) nor answer them in the leader's name.
//
// Refusals are counted (counters(), exported by GET /metrics) and written to the log as
// audit lines; identical refusals (same channel, reason and peer host) within
// kAuditRepeatWindow are written once, with how many were folded into the next line.
//
// Thread-safe: the raft loop thread and the HTTP workers share one instance.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"

namespace kvatlas::server {

// The internal-call headers (docs/replication.md §Internal calls).
inline constexpr char kPeerAuthHeader[] = "X-Kvatlas-Peer-Auth";
inline constexpr char kPeerReplyHeader[] = "X-Kvatlas-Peer-Reply";

// A signed internal call is accepted only within this of the receiver's clock (so the
// servers' clocks must agree within it), and only once: its nonce is remembered.
inline constexpr std::chrono::seconds kPeerCallWindow{30};
// Nonces remembered; past it the oldest are forgotten and calls signed no later than the
// newest forgotten one are refused (never a replay let through).
inline constexpr size_t kPeerReplayCacheEntries = 65'536;
// Longest kPeerAuthHeader / kPeerReplyHeader value accepted.
inline constexpr size_t kMaxPeerHeaderBytes = 256;
// Shortest and longest cluster secret (bytes of the file, trailing whitespace removed).
inline constexpr size_t kMinClusterSecretBytes = 16;
inline constexpr size_t kMaxClusterSecretBytes = 4'096;
// Longest cluster id; it is made of [A-Za-z0-9._-].
inline constexpr size_t kMaxClusterIdBytes = 64;
inline constexpr std::chrono::seconds kAuditRepeatWindow{10};

using PeerMac = std::array<uint8_t, 32>;
using PeerNonce = std::array<uint8_t, 32>;
using ClusterFingerprint = std::array<uint8_t, 8>;

// Where a refusal happened: a raft connection this server accepted or opened, an internal
// HTTP call it received, or the answer to one it made.
enum class PeerChannel : uint8_t { kRaftIn, kRaftOut, kHttpIn, kHttpReply };
inline constexpr size_t kPeerChannels = 4;

enum class PeerRefusal : uint8_t {
  kBadProof,      // the HMAC does not verify: another secret (or a tampered message)
  kWrongCluster,  // the peer names another cluster id
  kNotMember,     // a valid proof, from a server id not in this server's configuration
  kWrongServer,   // the server reached is not the one that was dialled
  kMalformed,     // not the handshake or header format, or over its size limit
  kTimeout,       // the handshake did not complete in time
  kTooMany,       // too many handshakes in progress
  kStale,         // an internal call signed outside kPeerCallWindow
  kReplay,        // an internal call's nonce was already used
  kUnsigned,      // an internal-only call without kPeerAuthHeader (or an unsigned answer)
  kWrongSender,   // an announcement of another server's addresses
  kRefusedByPeer  // the peer refused this server's proof (its own log says why)
};
inline constexpr size_t kPeerRefusals = 12;

[[nodiscard]] std::string_view PeerChannelName(PeerChannel channel);
[[nodiscard]] std::string_view PeerRefusalName(PeerRefusal reason);

struct PeerCounters {
  uint64_t handshakes = 0;      // raft handshakes completed, both directions
  uint64_t calls_verified = 0;  // internal HTTP calls whose signature verified
  uint64_t refused[kPeerChannels][kPeerRefusals] = {};
};

// A verified internal call: who sent it and its nonce (the answer's signature covers it).
struct PeerCall {
  uint64_t sender = 0;
  std::string nonce;  // hex, as in the header
};

// A request to sign: the header value to send, and its nonce (to check the answer with).
struct SignedPeerRequest {
  std::string header;
  std::string nonce;
};

class PeerAuth {
 public:
  // `secret` empty: no cluster secret. A process with peers then uses a fixed, publicly
  // known key (the proofs still check the cluster id and the member ids, against mistakes,
  // not attackers), and a single server (`random_if_no_secret`) a random key of its own,
  // so that nobody can sign for it.
  PeerAuth(uint64_t self_id, std::string cluster_id, std::string_view secret,
           bool random_if_no_secret = false);
  PeerAuth(const PeerAuth&) = delete;
  PeerAuth& operator=(const PeerAuth&) = delete;

  uint64_t self_id() const { return self_id_; }
  const std::string& cluster_id() const { return cluster_id_; }
  // First 8 bytes of SHA-256(cluster id): sent in the clear so that a peer of another
  // cluster is told apart from a peer with another secret.
  const ClusterFingerprint& fingerprint() const { return fingerprint_; }

  // --- raft transport handshake (docs/replication.md §Peer handshake) ---
  enum class Side : uint8_t { kConnector, kAcceptor };
  // The proof `side` sends: HMAC over the side's label, the cluster id, the connecting
  // server's id and raft address (as its preamble names them), the accepting server's id
  // and both nonces.
  [[nodiscard]] PeerMac RaftProof(Side side, uint64_t connector_id,
                                  std::string_view connector_address, uint64_t acceptor_id,
                                  const PeerNonce& acceptor_nonce,
                                  const PeerNonce& connector_nonce) const;
  [[nodiscard]] static PeerNonce NewNonce();

  // --- internal HTTP calls (docs/replication.md §Internal calls) ---
  [[nodiscard]] SignedPeerRequest SignRequest(std::string_view method, std::string_view target,
                                              std::string_view body) const;
  // Checks a kPeerAuthHeader value: format, cluster, HMAC, time window, replay, and that
  // `is_member(sender)`. On failure counts and logs the refusal (kHttpIn, naming `remote`)
  // and returns kUnauthenticated (kPermissionDenied for a non-member). `now_ms`: Unix ms
  // (tests); default the system clock.
  [[nodiscard]] Result<PeerCall> VerifyRequest(std::string_view header, std::string_view method,
                                               std::string_view target, std::string_view body,
                                               const std::function<bool(uint64_t)>& is_member,
                                               std::string_view remote,
                                               std::optional<int64_t> now_ms = std::nullopt);
  // The kPeerReplyHeader value for the answer (status, body) to `call`.
  [[nodiscard]] std::string SignReply(const PeerCall& call, int status,
                                      std::string_view body) const;
  // Checks that an answer was signed by server `responder` of this cluster for the request
  // with `nonce`. On failure counts and logs the refusal (kHttpReply, naming `remote`) and
  // returns kUnavailable.
  [[nodiscard]] Status VerifyReply(std::string_view header, uint64_t responder,
                                   std::string_view nonce, int status, std::string_view body,
                                   std::string_view remote);

  // Counts a refusal and writes its audit line (rate-limited, see the file comment).
  void Refuse(PeerChannel channel, PeerRefusal reason, std::string_view peer,
              std::string_view detail);
  void CountHandshake() { handshakes_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] PeerCounters counters() const;

 private:
  // Remembers `nonce` (signed at `ts_ms`); false if it was already seen, or is not newer
  // than the newest forgotten one.
  bool RememberNonce(const std::string& nonce, int64_t ts_ms, int64_t now_ms);

  const uint64_t self_id_;
  const std::string cluster_id_;
  ClusterFingerprint fingerprint_{};
  PeerMac raft_key_{};
  PeerMac http_key_{};

  std::atomic<uint64_t> handshakes_{0};
  std::atomic<uint64_t> calls_verified_{0};
  std::atomic<uint64_t> refused_[kPeerChannels][kPeerRefusals] = {};

  std::mutex replay_mu_;
  std::unordered_map<std::string, int64_t> seen_;  // nonce -> signing time; guarded
  std::deque<std::string> seen_order_;             // insertion order; guarded
  int64_t forgotten_up_to_ms_ = 0;                 // guarded

  struct AuditKey {
    uint8_t channel, reason;
    std::string host;
    auto operator<=>(const AuditKey&) const = default;
  };
  struct AuditState {
    std::chrono::steady_clock::time_point last;
    uint64_t folded = 0;
  };
  std::mutex audit_mu_;
  std::map<AuditKey, AuditState> audit_;  // guarded by audit_mu_
};

// Reads a cluster secret file: its bytes with trailing whitespace removed, between
// kMinClusterSecretBytes and kMaxClusterSecretBytes. kIOError / kInvalidArgument naming
// the file. Logs a warning when the file is readable by other users.
[[nodiscard]] Result<std::string> ReadClusterSecret(const std::string& path);

// "" or a cluster id: 1..kMaxClusterIdBytes of [A-Za-z0-9._-]; kInvalidArgument otherwise.
[[nodiscard]] Status CheckClusterId(std::string_view cluster_id);

}  // namespace kvatlas::server
