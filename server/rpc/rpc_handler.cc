#include "server/rpc/rpc_handler.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "kvatlas/common/not_leader.h"
#include "server/service/cluster_service.h"
#include "server/service/ingest_service.h"
#include "server/service/lease_service.h"
#include "server/service/load_service.h"
#include "server/service/lookup_service.h"
#include "server/service/placement_service.h"
#include "server/service/prediction_service.h"
#include "server/service/replica_audit_service.h"
#include "server/service/route_decision.h"
#include "server/service/stats_service.h"

namespace kvatlas::server {
namespace {

using protocol::Frame;
using protocol::MessageType;

// A request type the server serves (kError and unknown numbers are not).
bool KnownRequestType(MessageType type) { return RequiredRole(type).has_value(); }

Status RequireEmpty(const Frame& request, std::string_view what) {
  if (request.payload.empty()) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " request: the payload must be empty, got " +
                                 std::to_string(request.payload.size()) + " bytes");
}

// A block's copies are answered here only from replicas this server holds: those of the
// context's group, or every group's (replicas on some servers: kWrongGroup otherwise; the
// REST GET /v1/blocks/{key} asks the other groups' members).
Status CheckLocatable(const Services& services, const protocol::LocateRequest& request) {
  if (request.context) return CheckHostsGroup(ServicesFor(services, *request.context));
  const std::vector<GroupId> unhosted = UnhostedGroups(services);
  if (unhosted.empty()) return Status::Ok();
  std::string named;
  for (const GroupId id : unhosted) named += (named.empty() ? "" : ", ") + std::to_string(id);
  return Status::WrongGroup("this server holds no replica of groups " + named +
                            ": a block's copies in every context are listed by the REST "
                            "API's GET /v1/blocks/{key}, which asks their members");
}

// The kDirectory answer: group 1's copy of the directory and every announced binary-protocol
// address (servers that have not announced one are left out: a client sends their groups'
// reads elsewhere).
protocol::DirectoryAnswer Directory(const Services& services) {
  protocol::DirectoryAnswer answer;
  answer.groups = services.groups == nullptr ? 1 : static_cast<uint32_t>(services.groups->size());
  const StateMachine& cluster = ClusterState(services);
  answer.directory = *cluster.directory();
  for (const auto& [id, addresses] : cluster.ServerAddressMap()) {
    if (!addresses.rpc_address.empty()) answer.servers.push_back({id, addresses.rpc_address});
  }
  return answer;
}

protocol::LocateAnswer Locate(const Services& services, const protocol::LocateRequest& request) {
  BlockCopies found =
      LocateBlock(services, request.key, request.context ? &*request.context : nullptr);
  protocol::LocateAnswer answer;
  answer.revision = found.revision;
  answer.copies = std::move(found.copies);
  return answer;
}

}  // namespace

std::optional<PendingRequest> RpcHandler::Handle(const Frame& request, std::string* out) const {
  const protocol::FrameHeader& header = request.header;
  // Exceptions (allocation failure, a bug below) stop here: the request gets kInternal and
  // the connection and the server go on.
  const auto received = std::chrono::steady_clock::now();
  Result<std::optional<PendingRequest>> handled = Status::Internal("unhandled");
  try {
    handled = Dispatch(request, out);
  } catch (const std::exception& e) {
    handled = Status::Internal(std::string("request failed: ") + e.what());
  }
  if (handled.has_value() && handled->has_value()) {
    (*handled)->received = received;  // timed when answered (AppendIngestAnswer)
    return std::move(*handled);
  }
  const MessageType type =
      KnownRequestType(header.type) && !header.is_response() ? header.type : MessageType::kError;
  if (!handled.has_value()) AppendError(type, header.request_id, handled.error(), out);
  ObserveLatency(type, received);
  return std::nullopt;
}

void RpcHandler::ObserveLatency(MessageType type,
                                std::chrono::steady_clock::time_point received) const {
  services_->metrics->RecordRpcLatency(
      static_cast<uint8_t>(type),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count());
}

Result<std::optional<PendingRequest>> RpcHandler::Dispatch(const Frame& request,
                                                           std::string* out) const {
  // "Answered here, nothing left for the applier." A function rather than a shared local:
  // g++ 12 -O2 reports a copied Result<optional<...>> as maybe-uninitialized.
  using Handled = Result<std::optional<PendingRequest>>;
  const auto answered = [] { return Handled(std::nullopt); };
  const protocol::FrameHeader& header = request.header;
  if (header.is_response()) {
    return Status::InvalidArgument("a response frame (flags has kFlagResponse) sent as a request");
  }
  const Services& services = *services_;
  switch (header.type) {
    case MessageType::kPing:
      KVATLAS_RETURN_IF_ERROR(RequireEmpty(request, "ping"));
      AppendAnswer(header.type, header.request_id, "", out);
      return answered();
    case MessageType::kStats:
      KVATLAS_RETURN_IF_ERROR(RequireEmpty(request, "stats"));
      AppendAnswer(header.type, header.request_id,
                   protocol::EncodeStatsAnswer({StatsDocument(services)}), out);
      return answered();
    case MessageType::kLookup:
    case MessageType::kRoute: {
      PendingRead read;
      read.type = header.type;
      if (header.type == MessageType::kLookup) {
        KVATLAS_ASSIGN_OR_RETURN(read.route.lookup,
                                 protocol::DecodeLookupRequestBinary(request.payload));
      } else {
        KVATLAS_ASSIGN_OR_RETURN(read.route, protocol::DecodeRouteRequestBinary(request.payload));
      }
      const LookupRequest& lookup = read.route.lookup;
      read.barrier = lookup.linearizable;
      read.wanted = lookup.min_revision.value_or(0);
      read.min_revision = read.wanted;
      // The context's group's revisions (docs/scaling.md §Groups on every server); a group
      // that gave the context away waits for the directory (AwaitReadConsistency's rule).
      const Services& group = ServicesFor(services, lookup.context);
      if (services.group_forwarder != nullptr && !HostsGroup(group)) {
        // Replicas on some servers: a member of the group answers it (consistency included).
        read.remote = true;
        read.payload = std::string(request.payload);
        return Handled(PendingRequest{header.request_id,
                                      {},
                                      {},
                                      std::move(read),
                                      std::chrono::steady_clock::time_point{},
                                      {}});
      }
      const bool wait = read.barrier || read.wanted > group.machine->applied_revision() ||
                        GaveAway(services, group, lookup.context);
      PendingRequest pending{
          header.request_id, {}, {}, std::move(read), std::chrono::steady_clock::time_point{}, {}};
      if (wait) return Handled(std::move(pending));
      AnswerRead(*pending.read, pending.request_id, out);
      return answered();
    }
    case MessageType::kDirectory:
      KVATLAS_RETURN_IF_ERROR(RequireEmpty(request, "directory"));
      AppendAnswer(header.type, header.request_id,
                   protocol::EncodeDirectoryAnswer(Directory(services)), out);
      return answered();
    case MessageType::kLocate: {
      KVATLAS_ASSIGN_OR_RETURN(protocol::LocateRequest locate,
                               protocol::DecodeLocateRequest(request.payload));
      KVATLAS_RETURN_IF_ERROR(ServesReads(services));
      KVATLAS_RETURN_IF_ERROR(CheckLocatable(services, locate));
      AppendAnswer(header.type, header.request_id,
                   protocol::EncodeLocateAnswer(Locate(services, locate)), out);
      return answered();
    }
    case MessageType::kIngest: {
      KVATLAS_ASSIGN_OR_RETURN(protocol::IngestRequest ingest,
                               protocol::DecodeIngestRequest(request.payload));
      KVATLAS_ASSIGN_OR_RETURN(PreparedIngest prepared,
                               PrepareIngest(services, ingest.events, ingest.writer));
      NoteUnknownMedia(services, ingest.events);
      PendingRequest pending{
          header.request_id, std::move(prepared.batch), prepared.answer, {}, {}, {}};
      // An empty batch changes nothing: it answers the current revision without a log entry.
      if (!pending.batch.commands.empty()) return Handled(std::move(pending));
      AppendIngestAnswer(pending, pending.answer.revision, out);
      return answered();
    }
    case MessageType::kWatch:
    case MessageType::kSnapshot:
      // Streams: their state is the connection's (RpcStreams), which answers them.
      return Status::Internal("kWatch and kSnapshot are served by the connection, not here");
    case MessageType::kHeartbeat: {
      KVATLAS_ASSIGN_OR_RETURN(protocol::HeartbeatRequest heartbeat,
                               protocol::DecodeHeartbeatRequest(request.payload));
      // kNotLeader from a follower is answered with the leader's address (AppendError).
      KVATLAS_ASSIGN_OR_RETURN(HeartbeatResult result, Heartbeat(services, heartbeat.holders));
      protocol::HeartbeatAnswer answer;
      answer.holders = static_cast<uint32_t>(result.holders);
      answer.ttl_seconds = static_cast<uint32_t>(result.ttl_seconds);
      AppendAnswer(header.type, header.request_id, protocol::EncodeHeartbeatAnswer(answer), out);
      return answered();
    }
    case MessageType::kLoadReport: {
      KVATLAS_ASSIGN_OR_RETURN(LoadReport report,
                               protocol::DecodeLoadReportRequest(request.payload));
      KVATLAS_ASSIGN_OR_RETURN(PreparedLoadReport prepared,
                               PrepareLoadReport(services, std::move(report)));
      // Committed like an ingest (a follower's Applier answers not_leader).
      PendingRequest pending{header.request_id,     std::move(prepared.batch), {}, {}, {},
                             prepared.expires_at_ms};
      return Handled(std::move(pending));
    }
    case MessageType::kLoadView:
      KVATLAS_RETURN_IF_ERROR(RequireEmpty(request, "load view"));
      AppendAnswer(header.type, header.request_id,
                   protocol::EncodeLoadViewAnswer(ViewLoads(services)), out);
      return answered();
    case MessageType::kPredict: {
      KVATLAS_ASSIGN_OR_RETURN(protocol::PredictRequest predict,
                               protocol::DecodePredictRequest(request.payload));
      // Queued for the recorder's next round (any server: followers forward): no commit to
      // wait for.
      KVATLAS_ASSIGN_OR_RETURN(
          const size_t queued,
          RecordDecision(services, predict.context, predict.holder, std::move(predict.keys)));
      AppendAnswer(header.type, header.request_id,
                   protocol::EncodePredictAnswer({static_cast<uint32_t>(queued)}), out);
      return answered();
    }
    case MessageType::kAuth:
      // Access control is the connection's (Admit), before any request is handled.
      return Status::Internal("kAuth is answered by RpcHandler::Admit, not here");
    case MessageType::kError:
      break;
  }
  return Status::InvalidArgument("unknown message type " +
                                 std::to_string(static_cast<unsigned>(header.type)));
}

void RpcHandler::AppendIngestAnswer(const PendingRequest& ingest, const Result<Revision>& applied,
                                    std::string* out) const {
  if (ingest.load_expires_at_ms) {
    if (!applied.has_value()) {
      AppendError(MessageType::kLoadReport, ingest.request_id, applied.error(), out);
    } else {
      AppendAnswer(MessageType::kLoadReport, ingest.request_id,
                   protocol::EncodeLoadReportAnswer({*applied, *ingest.load_expires_at_ms}), out);
    }
    ObserveLatency(MessageType::kLoadReport, ingest.received);
    return;
  }
  if (!applied.has_value()) {
    AppendError(MessageType::kIngest, ingest.request_id, applied.error(), out);
  } else {
    IngestAnswer answer = ingest.answer;
    answer.revision = *applied;
    AppendAnswer(MessageType::kIngest, ingest.request_id,
                 protocol::EncodeIngestAnswerBinary(answer), out);
  }
  ObserveLatency(MessageType::kIngest, ingest.received);
}

void RpcHandler::AnswerRead(const PendingRead& read, uint64_t request_id, std::string* out) const {
  if (read.type == MessageType::kLookup) {
    Result<LookupAnswer> answer =
        LookupPrefix(ServicesFor(*services_, read.route.lookup.context), read.route.lookup);
    if (!answer.has_value()) {
      AppendError(read.type, request_id, answer.error(), out);
    } else {
      AppendAnswer(read.type, request_id, protocol::EncodeLookupAnswerBinary(*answer), out);
    }
  } else {
    Result<RoutingAnswer> answer = DecideRoute(*services_, read.route);
    if (!answer.has_value()) {
      AppendError(read.type, request_id, answer.error(), out);
    } else {
      // Predicted blocks are marked for the clients that asked in approximate mode only.
      AppendAnswer(read.type, request_id,
                   protocol::EncodeRouteAnswerBinary(
                       *answer, protocol::RouteRequestUsesApproximate(read.route)),
                   out);
    }
  }
}

void RpcHandler::AppendReadAnswer(const PendingRequest& pending, std::string* out) const {
  AnswerRead(*pending.read, pending.request_id, out);
  ObserveLatency(pending.read->type, pending.received);
}

void RpcHandler::AppendRemoteReadAnswer(const PendingRequest& pending,
                                        const Result<std::string>& answer, std::string* out) const {
  if (!answer.has_value()) {
    AppendError(pending.read->type, pending.request_id, answer.error(), out);
  } else {
    AppendAnswer(pending.read->type, pending.request_id, *answer, out);
  }
  ObserveLatency(pending.read->type, pending.received);
}

void RpcHandler::AppendReadFailure(const PendingRequest& pending, const Status& failed,
                                   std::string* out) const {
  AppendError(pending.read->type, pending.request_id, failed, out);
  ObserveLatency(pending.read->type, pending.received);
}

void RpcHandler::AppendStreamError(const std::optional<protocol::FrameHeader>& header,
                                   const Status& status, std::string* out) const {
  const bool known = header && KnownRequestType(header->type) && !header->is_response();
  AppendError(known ? header->type : MessageType::kError, header ? header->request_id : 0, status,
              out);
}

void RpcHandler::AppendAnswer(MessageType type, uint64_t request_id, std::string_view payload,
                              std::string* out) const {
  if (payload.size() > protocol::kMaxPayloadBytes) {
    AppendError(type, request_id,
                Status::ResourceExhausted("the answer (" + std::to_string(payload.size()) +
                                          " bytes) exceeds the protocol's largest frame"),
                out);
    return;
  }
  protocol::FrameHeader header;
  header.type = type;
  header.flags = protocol::kFlagResponse;
  header.request_id = request_id;
  protocol::AppendFrame(header, payload, out);
  services_->metrics->RecordRpcRequest(static_cast<uint8_t>(type), StatusCode::kOk);
}

void RpcHandler::AppendError(MessageType type, uint64_t request_id, const Status& status,
                             std::string* out) const {
  protocol::FrameHeader header;
  header.type = type;
  header.flags = protocol::kFlagResponse;
  header.status = status.code();
  header.request_id = request_id;
  if (status.code() == StatusCode::kNotLeader) {
    // Tell the client where to go (docs/protocol.md §Not leader).
    const LeaderAddresses leader = FindLeaderForRedirect(*services_);
    const Status hinted(
        status.code(), protocol::AppendNotLeaderHint(status.message(),
                                                     {leader.id, leader.rpc_address.value_or("")}));
    protocol::AppendFrame(header, protocol::EncodeErrorPayload(hinted), out);
  } else {
    protocol::AppendFrame(header, protocol::EncodeErrorPayload(status), out);
  }
  services_->metrics->RecordRpcRequest(static_cast<uint8_t>(type), status.code());
}

}  // namespace kvatlas::server
