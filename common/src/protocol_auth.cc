// The kAuth payloads of the binary protocol (docs/protocol.md §kAuth).
#include <string>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {

std::string EncodeAuthRequest(const AuthRequest& request) {
  std::string out;
  PutLengthPrefixed(&out, request.token);
  return out;
}

Result<AuthRequest> DecodeAuthRequest(std::string_view payload) {
  PayloadReader in(payload);
  AuthRequest request;
  const std::string_view token = in.Bytes("token");
  if (in.ok() && token.empty()) in.Reject("token", "must not be empty");
  if (in.ok() && token.size() > kMaxTokenBytes) {
    in.Reject("token", std::to_string(token.size()) + " bytes, longer than the limit of " +
                           std::to_string(kMaxTokenBytes) + " bytes");
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  request.token = std::string(token);
  return request;
}

std::string EncodeAuthAnswer(const AuthAnswer& answer) {
  std::string out;
  out.push_back(static_cast<char>(answer.role));
  PutLengthPrefixed(&out, answer.name);
  return out;
}

Result<AuthAnswer> DecodeAuthAnswer(std::string_view payload) {
  PayloadReader in(payload);
  AuthAnswer answer;
  const uint8_t role = in.U8("role");
  if (in.ok() &&
      (role < static_cast<uint8_t>(Role::kRead) || role > static_cast<uint8_t>(Role::kAdmin))) {
    in.Reject("role", "must be 1 (read), 2 (write) or 3 (admin), got " + std::to_string(role));
  }
  answer.role = static_cast<Role>(role);
  answer.name = in.String("name");
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
