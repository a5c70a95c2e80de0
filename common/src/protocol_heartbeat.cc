// The kHeartbeat payloads of the binary protocol (docs/protocol.md §kHeartbeat).
#include <string>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

constexpr size_t kMinHolderBytes = 2;  // the smallest encoding: an empty id and a dp_rank

}  // namespace

std::string EncodeHeartbeatRequest(const HeartbeatRequest& request) {
  std::string out;
  PutVarint64(&out, request.holders.size());
  for (const HolderKey& holder : request.holders) PutHolder(holder, &out);
  return out;
}

Result<HeartbeatRequest> DecodeHeartbeatRequest(std::string_view payload) {
  PayloadReader in(payload);
  HeartbeatRequest request;
  const uint64_t n = in.Count(kMinHolderBytes, "holders");
  if (in.ok() && n > kMaxHeartbeatHolders) {
    return Status::PayloadTooLarge("holders: " + std::to_string(n) +
                                   " holders; one heartbeat names at most " +
                                   std::to_string(kMaxHeartbeatHolders));
  }
  for (uint64_t i = 0; in.ok() && i < n; ++i) {
    in.Scope("holders", i);
    request.holders.push_back(ReadHolder(&in));
    if (in.ok() && request.holders.back().id.empty()) in.Reject("backend_id", "must not be empty");
  }
  in.Scope({}, 0);
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return request;
}

std::string EncodeHeartbeatAnswer(const HeartbeatAnswer& answer) {
  std::string out;
  PutVarint64(&out, answer.holders);
  PutVarint64(&out, answer.ttl_seconds);
  return out;
}

Result<HeartbeatAnswer> DecodeHeartbeatAnswer(std::string_view payload) {
  PayloadReader in(payload);
  HeartbeatAnswer answer;
  answer.holders = in.Varint32("holders");
  answer.ttl_seconds = in.Varint32("ttl_seconds");
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
