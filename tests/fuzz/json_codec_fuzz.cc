// libFuzzer target for every REST request decoder (docs/api.md): the first input byte picks
// the decoder, the rest is the request body. Beyond "no crash, no sanitizer report, no
// exception", it checks the decoders' contract (json_codec.h):
//   - a refusal is kInvalidArgument (or kPayloadTooLarge) whose message starts with a field
//     path ("events[3].block_size: ...", "body: ...") and stays bounded, whatever the body
//     holds (error messages are logged and sent back; they must not echo a huge body);
//   - an accepted body decodes to a value that validates: every BlockEvent passes
//     ValidateBlockEvent, names are within limits.h, a lookup has block_size > 0 and one
//     query list, routing options pass ValidateRoutingOptions, and the value travels over
//     the binary protocol unchanged (what one protocol accepts, the other accepts too);
//   - decoding is deterministic.
//
// Seeds: tests/fuzz/corpus/json_codec_fuzz/ (scripts/fuzz starts from a copy of it).
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/limits.h"
#include "kvatlas/common/protocol.h"
#include "kvatlas/common/routing.h"
#include "server/api/registration_json.h"

namespace kvatlas {
namespace {

// The longest legitimate message: an endpoint of kMaxEndpointBytes quoted in its error, plus
// the path and the explanation. Anything longer echoes unbounded input.
constexpr size_t kMaxMessageBytes = kMaxEndpointBytes + 512;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "json_codec_fuzz: property violated: %s\n", what);
  std::abort();
}

// A refusal: the right code, and a message "<path>: ..." where the path starts with a
// field name ("body", "events", "model_name", ...) followed by ':', '.' or '['.
void CheckRefusal(const Status& status, const char* what) {
  Check(status.code() == StatusCode::kInvalidArgument ||
            status.code() == StatusCode::kPayloadTooLarge,
        what);
  const std::string& m = status.message();
  if (m.size() > kMaxMessageBytes) {
    std::fprintf(stderr, "json_codec_fuzz: %zu-byte message: %.200s...\n", m.size(), m.c_str());
  }
  Check(m.size() <= kMaxMessageBytes, "an error message longer than its bound");
  size_t name = 0;
  while (name < m.size() && (std::isalnum(static_cast<unsigned char>(m[name])) || m[name] == '_')) {
    ++name;
  }
  if (name == 0 || name == m.size() || (m[name] != ':' && m[name] != '.' && m[name] != '[') ||
      std::isdigit(static_cast<unsigned char>(m[0]))) {
    std::fprintf(stderr, "json_codec_fuzz: message without a field path: %.200s\n", m.c_str());
    Check(false, "an error message that does not start with a field path");
  }
}

void CheckContext(const ContextKey& context) {
  Check(CheckContextLimits(context, "").ok(), "a decoded context past its limits");
  Check(!context.model.empty(), "a decoded context without a model");
  Check(!context.tenant.empty(), "a decoded context without a tenant");
  Check(context.block_size > 0, "a decoded context with block_size 0");
}

void CheckLookup(const LookupRequest& request) {
  CheckContext(request.context);
  Check(request.instance_id.size() <= kMaxNameBytes, "a lookup instance_id past its limit");
  Check(request.by_hash ? request.token_ids.empty() : request.seq_hashes.empty(),
        "a lookup with both query lists");
}

bool SameLookup(const LookupRequest& a, const LookupRequest& b) {
  return a.context == b.context && a.by_hash == b.by_hash && a.token_ids == b.token_ids &&
         a.seq_hashes == b.seq_hashes && a.instance_id == b.instance_id &&
         a.include_locations == b.include_locations && a.min_revision == b.min_revision &&
         a.linearizable == b.linearizable;
}

// The binary protocol's lookup carries the context, the query and the two flags of the
// request as the kLookup frame defines them.
bool SameBinaryLookup(const LookupRequest& a, const LookupRequest& b) {
  return a.context == b.context && a.by_hash == b.by_hash && a.token_ids == b.token_ids &&
         a.seq_hashes == b.seq_hashes && a.instance_id == b.instance_id &&
         a.include_locations == b.include_locations;
}

void FuzzEventBatch(std::string_view body) {
  std::optional<WriterPosition> writer;
  const Result<std::vector<BlockEvent>> events = DecodeEventBatch(body, &writer);
  if (!events.has_value()) return CheckRefusal(events.error(), "event batch: error code");
  for (size_t i = 0; i < events->size(); ++i) {
    const BlockEvent& e = (*events)[i];
    Check(ValidateBlockEvent(e, "events[" + std::to_string(i) + "]").ok(),
          "a decoded event fails ValidateBlockEvent");
    CheckContext(e.context);
    Check(!e.holder.id.empty(), "a decoded event without a holder");
  }
  if (writer) Check(ValidateWriterPosition(*writer, "").ok(), "a decoded writer is invalid");
  const protocol::IngestRequest request{*events, writer};
  const Result<protocol::IngestRequest> binary =
      protocol::DecodeIngestRequest(protocol::EncodeIngestRequest(request));
  Check(binary.has_value(), "an accepted event batch is refused over the binary protocol");
  Check(*binary == request, "an event batch changed over the binary protocol");
  std::optional<WriterPosition> writer_again;
  const Result<std::vector<BlockEvent>> again = DecodeEventBatch(body, &writer_again);
  Check(again.has_value() && protocol::IngestRequest{*again, writer_again} == request,
        "event batch decoding is not deterministic");
}

void FuzzLookup(std::string_view body, Result<LookupRequest> (*decode)(std::string_view),
                const char* what) {
  const Result<LookupRequest> request = decode(body);
  if (!request.has_value()) return CheckRefusal(request.error(), what);
  CheckLookup(*request);
  const Result<LookupRequest> binary =
      protocol::DecodeLookupRequestBinary(protocol::EncodeLookupRequestBinary(*request));
  Check(binary.has_value() && SameBinaryLookup(*request, *binary),
        "an accepted lookup does not travel over the binary protocol");
  const Result<LookupRequest> again = decode(body);
  Check(again.has_value() && SameLookup(*request, *again), "lookup decoding is not deterministic");
}

void FuzzRoute(std::string_view body) {
  const Result<RoutingRequest> request = DecodeRouteRequest(body);
  if (!request.has_value()) return CheckRefusal(request.error(), "route request: error code");
  CheckLookup(request->lookup);
  Check(ValidateRoutingOptions(request->options).ok(), "decoded routing options are invalid");
  Check(!request->candidates.empty(), "a route request without candidates");
  for (const RouteCandidate& c : request->candidates) {
    Check(!c.instance_id.empty() && c.instance_id.size() <= kMaxNameBytes,
          "a candidate instance_id out of bounds");
  }
  const Result<RoutingRequest> binary =
      protocol::DecodeRouteRequestBinary(protocol::EncodeRouteRequestBinary(*request));
  Check(binary.has_value(), "an accepted route request is refused over the binary protocol");
  Check(binary->lookup.context == request->lookup.context &&
            binary->lookup.by_hash == request->lookup.by_hash &&
            binary->lookup.token_ids == request->lookup.token_ids &&
            binary->lookup.seq_hashes == request->lookup.seq_hashes &&
            binary->candidates == request->candidates && binary->options == request->options,
        "a route request changed over the binary protocol");
}

void FuzzParse(std::string_view body) {
  nlohmann::json doc;
  const Status parsed = ParseJsonBody(body, &doc);
  if (!parsed.ok()) return CheckRefusal(parsed, "ParseJsonBody: error code");
  // What the parser accepted, re-encoded, is accepted again with the same value.
  nlohmann::json again;
  Check(ParseJsonBody(DumpJson(doc), &again).ok(), "a parsed body does not re-parse");
  Check(again == doc, "a parsed body changed through DumpJson");
  (void)PreviewJson(doc);
}

void FuzzRegistration(std::string_view body) {
  using server::Registration;
  nlohmann::json doc;
  if (const Status parsed = ParseJsonBody(body, &doc); !parsed.ok()) {
    return CheckRefusal(parsed, "registration body: error code");
  }
  const Result<Registration> r = server::RegistrationFromJson(doc);
  if (!r.has_value()) return CheckRefusal(r.error(), "registration: error code");
  Check(!r->instance_id.empty() && r->instance_id.size() <= kMaxNameBytes &&
            r->instance_id.find('|') == std::string::npos,
        "a registration instance_id out of bounds");
  Check(!r->model.empty() && r->model.size() <= kMaxNameBytes, "a registration model");
  Check(!r->tenant_id.empty() && r->tenant_id.size() <= kMaxNameBytes, "a registration tenant");
  Check(r->lora_name.size() <= kMaxNameBytes, "a registration lora_name");
  Check(r->additional_salt.size() <= kMaxSaltBytes, "a registration salt");
  Check(r->topic.size() <= kMaxTopicBytes, "a registration topic");
  Check(!r->endpoint.empty() && r->endpoint.size() <= kMaxEndpointBytes, "an endpoint");
  Check(r->replay_endpoint.size() <= kMaxEndpointBytes, "a replay endpoint");
  Check(r->block_size > 0, "a registration with block_size 0");
  // GET /v1/registrations shows what POST /register reads back.
  const Result<Registration> shown = server::RegistrationFromJson(server::RegistrationToJson(*r));
  Check(shown.has_value() && *shown == *r, "RegistrationToJson does not read back");
}

void FuzzUnregister(std::string_view body) {
  nlohmann::json doc;
  if (const Status parsed = ParseJsonBody(body, &doc); !parsed.ok()) {
    return CheckRefusal(parsed, "unregister body: error code");
  }
  const Result<server::UnregisterRequest> r = server::UnregisterRequestFromJson(doc);
  if (!r.has_value()) return CheckRefusal(r.error(), "unregister: error code");
  Check(!r->instance_id.empty() && r->instance_id.size() <= kMaxNameBytes,
        "an unregister instance_id out of bounds");
  Check(!r->tenant_id.empty() && r->tenant_id.size() <= kMaxNameBytes, "an unregister tenant");
}

}  // namespace
}  // namespace kvatlas

// Input: one selector byte (its value modulo 8 picks the decoder), then the body.
//   0 DecodeEventBatch       (POST /v1/events)
//   1 DecodeLookupRequest    (POST /v1/lookup)
//   2 DecodeConductorQuery   (POST /query)
//   3 DecodeConductorQueryByHash (POST /query_by_hash)
//   4 DecodeRouteRequest     (POST /v1/route)
//   5 ParseJsonBody          (every JSON body)
//   6 RegistrationFromJson   (POST /register)
//   7 UnregisterRequestFromJson (POST /unregister)
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvatlas;
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
      FuzzEventBatch(body);
      break;
    case 1:
      FuzzLookup(body, DecodeLookupRequest, "lookup: error code");
      break;
    case 2:
      FuzzLookup(body, DecodeConductorQuery, "query: error code");
      break;
    case 3:
      FuzzLookup(body, DecodeConductorQueryByHash, "query_by_hash: error code");
      break;
    case 4:
      FuzzRoute(body);
      break;
    case 5:
      FuzzParse(body);
      break;
    case 6:
      FuzzRegistration(body);
      break;
    default:
      FuzzUnregister(body);
      break;
  }
  return 0;
}
