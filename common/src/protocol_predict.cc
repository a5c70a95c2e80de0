// The kPredict payloads of the binary protocol (docs/protocol.md §kPredict): a router's
// local decision, recorded as a prediction by the server.
#include <string>
#include <string_view>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {

std::string EncodePredictRequest(const PredictRequest& request) {
  std::string out;
  PutContext(request.context, &out);
  PutHolder(request.holder, &out);
  PutVarint64(&out, request.keys.size());
  for (const BlockKey key : request.keys) PutFixed64(&out, key);
  return out;
}

Result<PredictRequest> DecodePredictRequest(std::string_view payload) {
  PayloadReader in(payload);
  PredictRequest request;
  request.context = ReadLookupContext(&in);
  request.holder = ReadHolder(&in);
  if (in.ok() && request.holder.id.empty()) in.Reject("backend_id", "must be a non-empty string");
  const uint64_t count = in.Count(8, "keys");
  if (in.ok() && count == 0) in.Reject("keys", "at least one block key is needed");
  if (in.ok() && count > kMaxPredictKeys) {
    in.Fail(Status::PayloadTooLarge("keys: " + std::to_string(count) +
                                    " block keys; one prediction holds at most " +
                                    std::to_string(kMaxPredictKeys)));
  }
  if (in.ok()) {
    request.keys.resize(count);
    for (BlockKey& key : request.keys) key = in.Fixed64("keys");
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return request;
}

std::string EncodePredictAnswer(const PredictAnswer& answer) {
  std::string out;
  PutVarint64(&out, answer.queued);
  return out;
}

Result<PredictAnswer> DecodePredictAnswer(std::string_view payload) {
  PayloadReader in(payload);
  PredictAnswer answer;
  answer.queued = in.Varint32("queued");
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
