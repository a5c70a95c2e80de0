// The kRoute payloads of the binary protocol (docs/protocol.md §kRoute). The request nests
// a kLookup request payload (length-prefixed), so that its validation is the lookup's.
#include <bit>
#include <cmath>
#include <string>
#include <utility>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

// Smallest encodings, for ByteReader::Count.
constexpr size_t kMinCandidateBytes = 4;  // instance_id, dp_rank?, two varints
constexpr size_t kMinScoredBytes = 70;    // index, id, dp_rank?, 2 + 8 varints, 7 f64
constexpr size_t kMaxRouteCandidates = 65536;

void PutDouble(std::string* out, double v) { PutFixed64(out, std::bit_cast<uint64_t>(v)); }

void PutCandidate(const RouteCandidate& c, std::string* out) {
  PutLengthPrefixed(out, c.instance_id);
  PutFlag(out, c.dp_rank.has_value());
  if (c.dp_rank) PutVarint64(out, *c.dp_rank);
  PutVarint64(out, c.queued_prefill_tokens);
  PutVarint64(out, c.active_decode_blocks);
}

RouteCandidate ReadCandidate(PayloadReader* in) {
  RouteCandidate c;
  c.instance_id = in->String("instance_id");
  if (in->ok() && c.instance_id.empty()) in->Reject("instance_id", "must be a non-empty string");
  if (in->Flag("dp_rank")) c.dp_rank = in->Varint32("dp_rank");
  c.queued_prefill_tokens = in->Varint64("queued_prefill_tokens");
  c.active_decode_blocks = in->Varint64("active_decode_blocks");
  return c;
}

void PutFour(std::string* out, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  for (uint32_t v : {a, b, c, d}) PutVarint64(out, v);
}

// Whether a request uses approximate mode (docs/routing.md §Approximate mode): then it
// carries the approximate trailer, and its answer the predicted trailer.
bool UsesApproximate(const RoutingRequest& request) {
  if (request.options.weights.predicted != TierWeights{}.predicted) return true;
  for (const RouteCandidate& c : request.candidates) {
    if (c.predict) return true;
  }
  return false;
}

// Whether the relative cost terms are at their defaults (then the terms trailer is left out).
bool HasDefaultTerms(const RoutingOptions& o) {
  return o.replica_credit == kDefaultReplicaCredit &&
         o.excess_queue_scale == kDefaultExcessQueueScale &&
         o.excess_queue_epsilon == kDefaultExcessQueueEpsilon;
}

}  // namespace

std::string EncodeRouteRequestBinary(const RoutingRequest& request) {
  std::string out;
  PutLengthPrefixed(&out, EncodeLookupRequestBinary(request.lookup));
  PutVarint64(&out, request.candidates.size());
  for (const RouteCandidate& c : request.candidates) PutCandidate(c, &out);
  const RoutingOptions& o = request.options;
  for (double v : {o.weights.gpu, o.weights.cpu, o.weights.disk, o.weights.shared, o.prefill_scale,
                   o.decode_scale, o.temperature}) {
    PutDouble(&out, v);
  }
  PutFlag(&out, o.seed.has_value());
  if (o.seed) PutFixed64(&out, *o.seed);
  // queue_scale is an optional trailer: a request with the default is the same bytes as
  // before queue_scale existed, so that servers without it still answer it.
  const bool approximate = UsesApproximate(request);
  const bool terms = !HasDefaultTerms(o);
  if (o.queue_scale != kDefaultQueueScale || approximate || terms) {
    PutFlag(&out, true);
    PutDouble(&out, o.queue_scale);
  }
  // Approximate mode, a second optional trailer (after queue_scale's): the PREDICTED
  // weight and the indexes of the candidates flagged predict; a lone 0x00 when only the
  // terms trailer follows.
  if (!approximate && terms) PutFlag(&out, false);
  if (approximate) {
    PutFlag(&out, true);
    PutDouble(&out, o.weights.predicted);
    size_t flagged = 0;
    for (const RouteCandidate& c : request.candidates) flagged += c.predict ? 1 : 0;
    PutVarint64(&out, flagged);
    for (size_t i = 0; i < request.candidates.size(); ++i) {
      if (request.candidates[i].predict) PutVarint64(&out, i);
    }
  }
  // The relative cost terms, a third optional trailer: written only when one differs from
  // its default, so that a request with the defaults is the same bytes as before them.
  if (terms) {
    PutFlag(&out, true);
    for (double v : {o.replica_credit, o.excess_queue_scale, o.excess_queue_epsilon}) {
      PutDouble(&out, v);
    }
  }
  return out;
}

Result<RoutingRequest> DecodeRouteRequestBinary(std::string_view payload) {
  PayloadReader in(payload);
  RoutingRequest request;
  const std::string_view lookup = in.Bytes("lookup");
  if (in.ok()) {
    Result<LookupRequest> decoded = DecodeLookupRequestBinary(lookup);
    if (decoded) {
      request.lookup = std::move(*decoded);
      request.lookup.instance_id.clear();
      request.lookup.include_locations = false;
    } else {
      in.Fail(decoded.error().WithContext("lookup"));
    }
  }
  const uint64_t count = in.Count(kMinCandidateBytes, "candidates");
  if (in.ok() && count == 0) in.Reject("candidates", "at least one is needed");
  if (in.ok() && count > kMaxRouteCandidates) {
    in.Reject("candidates", "at most " + std::to_string(kMaxRouteCandidates) + " candidates");
  }
  for (uint64_t i = 0; i < count && in.ok(); ++i) {
    in.Scope("candidates", i);
    request.candidates.push_back(ReadCandidate(&in));
  }
  in.Scope({}, 0);
  RoutingOptions& o = request.options;
  o.weights.gpu = in.Double("weights.GPU");
  o.weights.cpu = in.Double("weights.CPU");
  o.weights.disk = in.Double("weights.DISK");
  o.weights.shared = in.Double("weights.SHARED");
  o.prefill_scale = in.Double("prefill_scale");
  o.decode_scale = in.Double("decode_scale");
  o.temperature = in.Double("temperature");
  if (in.Flag("seed")) o.seed = in.Fixed64("seed");
  if (in.ok() && !in.AtEnd()) {
    if (in.Flag("queue_scale")) {
      o.queue_scale = in.Double("queue_scale");
    } else if (in.ok()) {
      in.Reject("queue_scale", "must be 0x01 when present");
    }
  }
  if (in.ok() && !in.AtEnd()) {
    if (in.Flag("approximate")) {
      o.weights.predicted = in.Double("weights.PREDICTED");
      const uint64_t flagged = in.Count(1, "predict");
      for (uint64_t i = 0; i < flagged && in.ok(); ++i) {
        const uint64_t index = in.Varint64("predict");
        if (in.ok() && index >= request.candidates.size()) {
          in.Reject("predict", "index " + std::to_string(index) + " is not a candidate");
        } else if (in.ok()) {
          request.candidates[index].predict = true;
        }
      }
    } else if (in.ok() && in.AtEnd()) {
      in.Reject("approximate", "0x00 only when the terms trailer follows");
    }
  }
  if (in.ok() && !in.AtEnd()) {
    if (in.Flag("terms")) {
      o.replica_credit = in.Double("replica_credit");
      o.excess_queue_scale = in.Double("excess_queue_scale");
      o.excess_queue_epsilon = in.Double("excess_queue_epsilon");
    } else if (in.ok()) {
      in.Reject("terms", "must be 0x01 when present");
    }
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  KVATLAS_RETURN_IF_ERROR(ValidateRoutingOptions(o));
  return request;
}

bool RouteRequestUsesApproximate(const RoutingRequest& request) { return UsesApproximate(request); }

std::string EncodeRouteAnswerBinary(const RoutingAnswer& answer) {
  return EncodeRouteAnswerBinary(answer, false);
}

std::string EncodeRouteAnswerBinary(const RoutingAnswer& answer, bool predicted) {
  std::string out;
  PutFixed64(&out, answer.revision);
  PutVarint64(&out, answer.prompt_blocks);
  PutVarint64(&out, answer.blocks_found);
  PutVarint64(&out, answer.ranked.size());
  for (const ScoredCandidate& s : answer.ranked) {
    PutVarint64(&out, s.index);
    PutCandidate(s.candidate, &out);
    PutFour(&out, s.matched.gpu, s.matched.cpu, s.matched.disk, s.matched.shared);
    PutFour(&out, s.gpu_blocks, s.cpu_blocks, s.disk_blocks, s.shared_blocks);
    for (double v : {s.credit, s.new_prefill_blocks, s.queued_prefill_blocks, s.prefill_cost,
                     s.decode_cost, s.cost, s.probability}) {
      PutDouble(&out, v);
    }
  }
  // The predicted trailer: flag 0x01, then per ranked candidate its predicted prefix and
  // predicted blocks (answers to requests that carried the approximate trailer only, so
  // that older clients never see it).
  if (predicted) {
    PutFlag(&out, true);
    for (const ScoredCandidate& s : answer.ranked) {
      PutVarint64(&out, s.matched.predicted);
      PutVarint64(&out, s.predicted_blocks);
    }
  }
  return out;
}

Result<RoutingAnswer> DecodeRouteAnswerBinary(std::string_view payload) {
  PayloadReader in(payload);
  RoutingAnswer answer;
  answer.revision = in.Fixed64("revision");
  answer.prompt_blocks = in.Varint32("prompt_blocks");
  answer.blocks_found = in.Varint32("blocks_found");
  const uint64_t count = in.Count(kMinScoredBytes, "ranked");
  for (uint64_t i = 0; i < count && in.ok(); ++i) {
    in.Scope("ranked", i);
    ScoredCandidate s;
    s.index = in.Varint64("index");
    s.candidate = ReadCandidate(&in);
    s.matched.gpu = in.Varint32("matched.gpu");
    s.matched.cpu = in.Varint32("matched.cpu");
    s.matched.disk = in.Varint32("matched.disk");
    s.matched.shared = in.Varint32("matched.shared");
    s.gpu_blocks = in.Varint32("gpu_blocks");
    s.cpu_blocks = in.Varint32("cpu_blocks");
    s.disk_blocks = in.Varint32("disk_blocks");
    s.shared_blocks = in.Varint32("shared_blocks");
    s.credit = in.Double("credit");
    s.new_prefill_blocks = in.Double("new_prefill_blocks");
    s.queued_prefill_blocks = in.Double("queued_prefill_blocks");
    s.prefill_cost = in.Double("prefill_cost");
    s.decode_cost = in.Double("decode_cost");
    s.cost = in.Double("cost");
    s.probability = in.Double("probability");
    answer.ranked.push_back(std::move(s));
  }
  in.Scope({}, 0);
  if (in.ok() && !in.AtEnd()) {
    if (in.Flag("predicted")) {
      for (ScoredCandidate& s : answer.ranked) {
        s.matched.predicted = in.Varint32("matched.predicted");
        s.predicted_blocks = in.Varint32("predicted_blocks");
      }
    } else if (in.ok()) {
      in.Reject("predicted", "must be 0x01 when present");
    }
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
