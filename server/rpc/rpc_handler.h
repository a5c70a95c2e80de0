// RpcHandler: answers binary-protocol requests (docs/protocol.md) with the service layer
// the REST routes use (server/service/), without sockets: a request frame in, answer frame bytes
// out. Lookup, locate, stats and ping are answered at once (reads run under the state machine's
// read lock and take microseconds); an ingest is decoded and converted here and handed back as a
// PendingRequest, because its answer waits for the Applier and the connection owns that
// asynchronous path and its deadline. Every answer is counted in the metrics. The streams (kWatch,
// kSnapshot) keep per-connection state and are served by RpcStreams instead.
//
// Immutable after construction: safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "kvatlas/common/protocol.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/routing.h"
#include "kvatlas/common/status.h"
#include "server/model/command.h"
#include "server/service/services.h"

namespace kvatlas::server {

// A kLookup or kRoute with read consistency (docs/protocol.md §kLookup): answered once this
// server has applied `wanted` (its min_revision) and, for a linearizable read, the empty
// barrier batch the Applier commits first.
struct PendingRead {
  protocol::MessageType type = protocol::MessageType::kLookup;  // or kRoute
  RoutingRequest route;       // a kLookup's request is route.lookup
  bool barrier = false;       // linearizable: the (empty) batch goes through the Applier first
  Revision wanted = 0;        // raised to the barrier's revision once it is applied
  Revision min_revision = 0;  // the request's own: `wanted` again when the group changes
  // A read of a group this server holds no replica of (replicas on some servers): sent to a
  // member as it came (`payload`, the request's), through Services::group_forwarder.
  bool remote = false;
  std::string payload;
};

// A request that cannot be answered at once: an ingest whose batch must go to the Applier,
// or a read (`read`) that waits for a revision.
struct PendingRequest {
  uint64_t request_id = 0;
  CommandBatch batch;
  IngestAnswer answer;  // revision is filled in from the Applier's result
  std::optional<PendingRead> read;
  std::chrono::steady_clock::time_point received;  // for the request latency metric
  // Set for a kLoadReport: its lease's end, answered with the revision instead of `answer`.
  std::optional<uint64_t> load_expires_at_ms;
};

// The role a request of `type` needs (docs/security.md §Tokens and roles); nullopt for
// kError and numbers that are no request type (rpc_auth.cc).
[[nodiscard]] std::optional<Role> RequiredRole(protocol::MessageType type);

// Who a binary-protocol connection is (RpcHandler::Admit): set by its kAuth frame, or
// anonymous on a server with access control off. One per connection, on its strand.
struct RpcSession {
  std::string peer;  // for audit lines
  std::optional<Principal> principal;
};

class RpcHandler {
 public:
  // What a connection does with a request frame after RpcHandler::Admit.
  enum class Admission {
    kServe,     // hand it to Handle (or the streams)
    kAnswered,  // Admit appended its answer (a kAuth answer, a permission_denied)
    kClose,     // Admit appended an error; close the connection once it is written
  };

  // `services` must outlive the handler.
  explicit RpcHandler(const Services* services) : services_(services) {}

  const Services& services() const { return *services_; }

  // Access control (docs/protocol.md §kAuth, docs/security.md), before every request frame:
  // answers a kAuth frame (authenticating `session`); with access control on, refuses any
  // other first frame (unauthenticated, close), re-checks the session's token after a
  // reload (unauthenticated, close when it was removed) and the role the frame's type needs
  // (permission_denied, the connection stays). Refusals are audited.
  [[nodiscard]] Admission Admit(const protocol::Frame& request, RpcSession* session,
                                std::string* out) const;

  // Whether `session` must still send its kAuth frame (access control on, none yet).
  [[nodiscard]] bool AwaitingAuth(const RpcSession& session) const;

  // After a token reload: OK while the session's token is still configured (its principal
  // refreshed), else kUnauthenticated (audited); the connection must then end.
  [[nodiscard]] Status Recheck(RpcSession* session) const;

  // Answers `request` by appending exactly one answer frame to *out and returning nullopt,
  // or, for an ingest that changes state or a read that must wait for a revision, appends
  // nothing and returns it for submission (RpcConnection).
  // Never throws and never touches state on bad input: a payload that does not decode, an
  // unknown type (answered as kError) or a response frame sent to the server is answered
  // with the error's status and its message as payload, under the request's id.
  [[nodiscard]] std::optional<PendingRequest> Handle(const protocol::Frame& request,
                                                     std::string* out) const;

  // Appends the answer of `ingest` once the Applier answered `applied` (or the deadline
  // passed: kDeadlineExceeded).
  void AppendIngestAnswer(const PendingRequest& ingest, const Result<Revision>& applied,
                          std::string* out) const;
  // Appends the answer of a pending read (`pending.read`) once its revision is applied, or
  // its error (`failed`: the barrier's failure or the deadline).
  void AppendReadAnswer(const PendingRequest& pending, std::string* out) const;
  // A remote read's answer: the member's answer payload, or its error.
  void AppendRemoteReadAnswer(const PendingRequest& pending, const Result<std::string>& answer,
                              std::string* out) const;
  void AppendReadFailure(const PendingRequest& pending, const Status& failed,
                         std::string* out) const;

  // Appends the error answer to a stream the FrameDecoder gave up on: under the failed
  // frame's id and type when its header could be read, else id 0 and kError.
  void AppendStreamError(const std::optional<protocol::FrameHeader>& header, const Status& status,
                         std::string* out) const;

 private:
  // Dispatches by type; errors come back as a Status for Handle to answer.
  Result<std::optional<PendingRequest>> Dispatch(const protocol::Frame& request,
                                                 std::string* out) const;
  void AppendAnswer(protocol::MessageType type, uint64_t request_id, std::string_view payload,
                    std::string* out) const;
  void AppendError(protocol::MessageType type, uint64_t request_id, const Status& status,
                   std::string* out) const;
  // Appends the answer (or error) of `read` at this server's applied state.
  void AnswerRead(const PendingRead& read, uint64_t request_id, std::string* out) const;
  // Records the request latency metric of a request of `type` received then.
  void ObserveLatency(protocol::MessageType type,
                      std::chrono::steady_clock::time_point received) const;

  const Services* services_;
};

}  // namespace kvatlas::server
