// Access control of the binary protocol (docs/protocol.md §kAuth): RpcHandler::Admit and its
// helpers, apart from the request handlers of rpc_handler.cc.
#include <string>
#include <utility>

#include "server/rpc/rpc_handler.h"

namespace kvatlas::server {
namespace {

using protocol::Frame;
using protocol::MessageType;

std::string Described(MessageType type) {
  const std::string_view name = protocol::MessageTypeName(type);
  if (name != "other") return std::string(name);
  return "type " + std::to_string(static_cast<unsigned>(type));
}

}  // namespace

std::optional<Role> RequiredRole(MessageType type) {
  switch (type) {
    case MessageType::kIngest:
    case MessageType::kHeartbeat:
    case MessageType::kLoadReport:
    case MessageType::kPredict:
      return Role::kWrite;
    case MessageType::kLookup:
    case MessageType::kLocate:
    case MessageType::kStats:
    case MessageType::kPing:
    case MessageType::kRoute:
    case MessageType::kLoadView:
    case MessageType::kWatch:
    case MessageType::kSnapshot:
    case MessageType::kAuth:
    case MessageType::kDirectory:
      return Role::kRead;
    case MessageType::kError:
      break;
  }
  return std::nullopt;
}

bool RpcHandler::AwaitingAuth(const RpcSession& session) const {
  return services_->auth != nullptr && services_->auth->enabled() && !session.principal;
}

RpcHandler::Admission RpcHandler::Admit(const Frame& request, RpcSession* session,
                                        std::string* out) const {
  const protocol::FrameHeader& header = request.header;
  const Authenticator* auth = services_->auth;
  const bool enabled = auth != nullptr && auth->enabled();
  const std::string what = Described(header.type);
  const auto refuse = [&](AuthFailure reason, std::string_view name, const Status& status,
                          Admission admission) {
    if (services_->audit != nullptr) {
      services_->audit->Refused({"rpc", session->peer, what}, reason, name, status);
    }
    AppendError(header.is_response() ? MessageType::kError : header.type, header.request_id, status,
                out);
    return admission;
  };
  if (header.type == MessageType::kAuth && !header.is_response()) {
    if (enabled && session->principal) {
      AppendError(header.type, header.request_id,
                  Status::FailedPrecondition("this connection is already authenticated as \"" +
                                             session->principal->name +
                                             "\"; open a new connection for another token"),
                  out);
      return Admission::kAnswered;
    }
    Result<protocol::AuthRequest> decoded = protocol::DecodeAuthRequest(request.payload);
    Result<Principal> principal = Status::Internal("unset");
    if (!decoded) {
      principal = Status::Unauthenticated("kAuth: " + decoded.error().message());
    } else if (!enabled) {
      Principal anonymous;
      anonymous.name = "anonymous";
      anonymous.anonymous = true;
      principal = std::move(anonymous);
    } else {
      principal = auth->Authenticate(decoded->token);
    }
    if (!principal) {
      return refuse(AuthFailure::kInvalidToken, "", principal.error(), Admission::kClose);
    }
    session->principal = std::move(*principal);
    AppendAnswer(header.type, header.request_id,
                 protocol::EncodeAuthAnswer({session->principal->role, session->principal->name}),
                 out);
    return Admission::kAnswered;
  }
  if (!enabled) return Admission::kServe;
  if (!session->principal) {
    return refuse(AuthFailure::kMissingToken, "",
                  Status::Unauthenticated("this server requires a token: the connection's "
                                          "first frame must be kAuth (docs/protocol.md)"),
                  Admission::kClose);
  }
  if (Status s = Recheck(session); !s.ok()) {
    AppendError(header.is_response() ? MessageType::kError : header.type, header.request_id, s,
                out);
    return Admission::kClose;
  }
  // kError and unknown types: any authenticated connection gets their invalid_argument.
  const Role needed = RequiredRole(header.type).value_or(Role::kRead);
  if (Status s = Authenticator::Authorize(*session->principal, needed, what); !s.ok()) {
    return refuse(AuthFailure::kForbidden, session->principal->name, s, Admission::kAnswered);
  }
  return Admission::kServe;
}

Status RpcHandler::Recheck(RpcSession* session) const {
  if (!session->principal || services_->auth == nullptr) return Status::Ok();
  Result<Principal> current = services_->auth->Recheck(*session->principal);
  if (!current) {
    if (services_->audit != nullptr) {
      services_->audit->Refused({"rpc", session->peer, "connection"}, AuthFailure::kRevokedToken,
                                session->principal->name, current.error());
    }
    return current.error();
  }
  session->principal = std::move(*current);
  return Status::Ok();
}

}  // namespace kvatlas::server
