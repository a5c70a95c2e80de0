// Writes on a follower (docs/replication.md §Writes on followers): a REST route that needs
// the leader (a write, a membership change, a linearizable read) and fails here with
// kNotLeader is proxied to the leader's REST address, which every server knows from the
// replicated member addresses (AnnounceCommand, which only the member itself can make). A
// proxied request carries kForwardedHeader and is never forwarded again, so a request
// crosses at most one hop. It also carries the client's Authorization header: the leader
// authenticates and authorizes the forwarded request itself, with the same token.
//
// Internal calls (docs/replication.md §Internal calls): a proxied request and an address
// announcement are signed with the cluster secret (kPeerAuthHeader, PeerAuth), and the
// answer relayed or accepted must be signed by the server it was sent to, the leader this
// server knows from raft (kPeerReplyHeader): an answer from anyone else is never relayed,
// so a write is acknowledged only by the leader of this cluster. A signed request is
// never forwarded again either.
//
// Runs on HTTP worker threads only (never on the raft or applier threads): the proxy blocks
// its worker for up to twice options.apply_timeout (the hold, then the forward).
// Stateless: safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvatlas/common/status.h"
#include "server/api/peer_http_client.h"
#include "server/api/router.h"
#include "server/api/routes.h"
#include "server/peer/peer_auth.h"
#include "server/service/cluster_service.h"

namespace kvatlas::server {

// How often a request held for want of a leader (or a part held for its group's leader,
// group_forwarder.h) looks for the leader again.
inline constexpr std::chrono::milliseconds kForwardHoldPoll{5};
// How long a forward waits for the leader's connection to open. Nothing is sent before it
// opens, so a timeout is retried like a refusal: a leader cut off by a partition must not
// use up the whole hold on one attempt while a new leader is being elected.
inline constexpr std::chrono::milliseconds kForwardConnectTimeout{500};

// Set on a request a follower forwards (value: the follower's id). A request that carries
// it is answered 421 not_leader instead of being forwarded again.
inline constexpr char kForwardedHeader[] = "X-Kvatlas-Forwarded";
// Set on the answer a follower relays (value: the follower's id).
inline constexpr char kForwardedFromHeader[] = "X-Kvatlas-Forwarded-From";
// Set on a stream relayed from a group's member (StreamFromMember; value: the member's id).
inline constexpr char kRelayedFromHeader[] = "X-Kvatlas-Relayed-From";

// The answer to a request whose route failed with `not_leader` (a kNotLeader Status):
// the leader's answer (status and body, plus kForwardedFromHeader) once it can be
// forwarded. While no leader or no leader HTTP address is known, or the known leader's
// connection cannot be opened within 500 ms (nothing sent), or the server believed to lead
// answers 421 not_leader (it no longer leads and appended nothing: a leadership transfer),
// the request is held, FindLeader polled every 5 ms, for up to options.apply_timeout; past
// it, 503 unavailable naming the last reason.
// When the leader known is this server (elected while the request was held, or a status
// that predates losing leadership), the route runs again here via `run_again`: its answer,
// or, failing with kNotLeader again, the hold goes on.
// 421 with the body {"code": "not_leader", "message", "leader_id", "leader_http_address",
// "leader_rpc_address"} (0 and null when unknown; never this server) for an already
// forwarded request and an internal call (never held).
// A leader reached that fails mid-request is 503 unavailable naming it.
[[nodiscard]] HttpReply AnswerNotLeader(const Services& services, const RouteRequest& request,
                                        const Status& not_leader,
                                        const Router::RunAgain& run_again);

// A request about one group (`group`: its copy in Services::groups) on a server that holds
// no replica of it (HostsGroup false; docs/scaling.md §Replicas on some servers): the answer
// of one of the group's recorded members, to which the request is sent on as a forwarded
// request (one hop: kForwardedHeader, signed, the client's Authorization along; the answer
// relayed only when signed by that member) — the members in turn, from one the request's
// body picks, until one answers other than 421. nullopt when this server holds the group
// (answer here). 503 unavailable when no member answers; 421 not_leader naming a member
// for a request forwarded already or an internal call (never sent on).
[[nodiscard]] std::optional<HttpReply> AnswerFromMember(const Services& services,
                                                        const RouteRequest& request,
                                                        const Services& group);

// A streamed request (GET /v1/watch: `sse`; GET /v1/snapshot) about one group on a server
// that holds no replica of it: relayed from one of the group's recorded members as
// AnswerFromMember sends a request on (one hop, signed, the client's Authorization along,
// the members in turn), the member's answer passed on as it arrives on this server's
// HTTP worker, which it holds until the stream ends. The member's signature covers the
// status (and the whole body of an answer that is not a stream: an error, relayed as it
// is). `slot` is released when the relay ends. When the member's connection breaks or
// stays silent for 15 s (a watch sends a keep-alive every second) a watch ends with an
// `error` event (code unavailable, resume_from: the last `id:` relayed, else
// `resume_from`), a snapshot with its body unterminated. Only for a group this server does
// not hold (HostsGroup false); 503 unavailable when no member answers; 421 not_leader naming a
// member for a forwarded request or an internal call.
[[nodiscard]] HttpReply StreamFromMember(const Services& services, const RouteRequest& request,
                                         const Services& group, bool sse,
                                         std::optional<uint64_t> resume_from,
                                         std::shared_ptr<void> slot);

// POSTs `body` (JSON) to http(s)://<leader_http><path> (`peer`: plaintext or TLS), signed by
// `auth`. The answer's body on a 200 signed by server `leader_id`; otherwise an error naming
// the URL and the leader's status and error body, with the leader's error code when its
// answer is signed by it, else kUnavailable (also when unreachable or a 200 not authentic).
[[nodiscard]] Result<std::string> PostInternalCall(const PeerHttpOptions& peer, PeerAuth* auth,
                                                   uint64_t leader_id,
                                                   const std::string& leader_http,
                                                   const std::string& path, const std::string& body,
                                                   PeerHttpTimeouts timeouts);

// POSTs {"id", "http_address", "rpc_address", "groups", "replicas"} to
// http(s)://<leader_http>/v1/cluster/announce (`peer`: plaintext or TLS), signed by `auth`
// (whose server id must be `id`). OK on a 200 signed by server `leader_id`; otherwise the
// leader's error (kFailedPrecondition: `shape` is not the leader's), or kUnavailable when
// unreachable or when the answer is not authentic.
[[nodiscard]] Status PostAnnounce(const PeerHttpOptions& peer, PeerAuth* auth, uint64_t leader_id,
                                  const std::string& leader_http, uint64_t id,
                                  const std::string& http_address, const std::string& rpc_address,
                                  const ClusterShape& shape, std::chrono::milliseconds timeout);

// POST /v1/cluster/drain-self {"draining"} to the leader, signed: this server drains (or no
// longer) as it stops (docs/operations.md §Draining a server).
[[nodiscard]] Status PostDrainSelf(const PeerHttpOptions& peer, PeerAuth* auth, uint64_t leader_id,
                                   const std::string& leader_http, bool draining,
                                   std::chrono::milliseconds timeout);

// Router::PeerCalls over `services.peers`: a signed request from a current member is verified
// (PeerAuth::VerifyRequest), and the answer to it signed.
[[nodiscard]] Result<PeerCall> VerifyPeerCall(const Services& services, const HttpRequest& request);
void SignPeerReply(const Services& services, const PeerCall& call, HttpReply* reply);

}  // namespace kvatlas::server
