// The kLoadReport payloads of the binary protocol (docs/protocol.md §kLoadReport).
#include <string>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

// The smallest entry: an empty instance id, a dp_rank and two varints.
constexpr size_t kMinLoadEntryBytes = 4;

}  // namespace

std::string EncodeLoadReportRequest(const LoadReport& report) {
  std::string out;
  PutLengthPrefixed(&out, report.router_id);
  PutVarint64(&out, report.ttl_ms);
  PutVarint64(&out, report.loads.size());
  for (const InstanceLoad& load : report.loads) {
    PutLengthPrefixed(&out, load.instance_id);
    PutVarint64(&out, load.dp_rank);
    PutVarint64(&out, load.prefill_blocks);
    PutVarint64(&out, load.decode_blocks);
  }
  return out;
}

Result<LoadReport> DecodeLoadReportRequest(std::string_view payload) {
  PayloadReader in(payload);
  LoadReport report;
  report.router_id = in.String("router_id");
  report.ttl_ms = in.Varint32("ttl_ms");
  const uint64_t n = in.Count(kMinLoadEntryBytes, "loads");
  if (in.ok() && n > kMaxLoadEntries) {
    return Status::PayloadTooLarge("loads: " + std::to_string(n) +
                                   " entries; one report holds at most " +
                                   std::to_string(kMaxLoadEntries));
  }
  for (uint64_t i = 0; in.ok() && i < n; ++i) {
    in.Scope("loads", i);
    InstanceLoad& load = report.loads.emplace_back();
    load.instance_id = in.String("instance_id");
    load.dp_rank = in.Varint32("dp_rank");
    load.prefill_blocks = in.Varint64("prefill_blocks");
    load.decode_blocks = in.Varint64("decode_blocks");
  }
  in.Scope({}, 0);
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  KVATLAS_RETURN_IF_ERROR(ValidateLoadReport(report));
  return report;
}

std::string EncodeLoadReportAnswer(const LoadReportAnswer& answer) {
  std::string out;
  PutVarint64(&out, answer.revision);
  PutVarint64(&out, answer.expires_at_ms);
  return out;
}

Result<LoadReportAnswer> DecodeLoadReportAnswer(std::string_view payload) {
  PayloadReader in(payload);
  LoadReportAnswer answer;
  answer.revision = in.Varint64("revision");
  answer.expires_at_ms = in.Varint64("expires_at_ms");
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

}  // namespace kvatlas::protocol
