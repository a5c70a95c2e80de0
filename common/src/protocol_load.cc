// The kLoadReport and kLoadView payloads of the binary protocol (docs/protocol.md
// §kLoadReport, §kLoadView).
#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "payload_reader.h"

namespace kvatlas::protocol {
namespace {

// The smallest entry: an empty instance id, a dp_rank and two varints.
constexpr size_t kMinLoadEntryBytes = 4;

// The smallest router of a kLoadView answer: an empty id, a varint and an empty list.
constexpr size_t kMinViewRouterBytes = 3;

void PutLoads(const std::vector<InstanceLoad>& loads, std::string* out) {
  PutVarint64(out, loads.size());
  for (const InstanceLoad& load : loads) {
    PutLengthPrefixed(out, load.instance_id);
    PutVarint64(out, load.dp_rank);
    PutVarint64(out, load.prefill_blocks);
    PutVarint64(out, load.decode_blocks);
  }
}

// Reads a list<Load>; a count past kMaxLoadEntries fails the reader (kPayloadTooLarge).
std::vector<InstanceLoad> GetLoads(PayloadReader& in) {
  std::vector<InstanceLoad> loads;
  const uint64_t n = in.Count(kMinLoadEntryBytes, "loads");
  if (in.ok() && n > kMaxLoadEntries) {
    in.Fail(Status::PayloadTooLarge("loads: " + std::to_string(n) +
                                    " entries; one report holds at most " +
                                    std::to_string(kMaxLoadEntries)));
    return loads;
  }
  for (uint64_t i = 0; in.ok() && i < n; ++i) {
    in.Scope("loads", i);
    InstanceLoad& load = loads.emplace_back();
    load.instance_id = in.String("instance_id");
    load.dp_rank = in.Varint32("dp_rank");
    load.prefill_blocks = in.Varint64("prefill_blocks");
    load.decode_blocks = in.Varint64("decode_blocks");
  }
  in.Scope({}, 0);
  return loads;
}

// A report's head and loads: the router id, one number (a report's ttl_ms, a viewed
// report's expires_in_ms) and list<Load>. kLoadReport and kLoadView share it.
void PutRouter(std::string_view router_id, uint64_t number, const std::vector<InstanceLoad>& loads,
               std::string* out) {
  PutLengthPrefixed(out, router_id);
  PutVarint64(out, number);
  PutLoads(loads, out);
}

template <typename Number>
void GetRouter(PayloadReader& in, std::string_view number_field, std::string* router_id,
               Number* number, std::vector<InstanceLoad>* loads) {
  *router_id = in.String("router_id");
  if constexpr (sizeof(Number) == 4) {
    *number = in.Varint32(number_field);
  } else {
    *number = in.Varint64(number_field);
  }
  *loads = GetLoads(in);
}

}  // namespace

std::string EncodeLoadReportRequest(const LoadReport& report) {
  std::string out;
  PutRouter(report.router_id, report.ttl_ms, report.loads, &out);
  return out;
}

Result<LoadReport> DecodeLoadReportRequest(std::string_view payload) {
  PayloadReader in(payload);
  LoadReport report;
  GetRouter(in, "ttl_ms", &report.router_id, &report.ttl_ms, &report.loads);
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

std::string EncodeLoadViewAnswer(const LoadViewAnswer& answer) {
  std::string out;
  PutVarint64(&out, answer.revision);
  PutVarint64(&out, answer.routers.size());
  for (const LoadViewRouter& router : answer.routers) {
    PutRouter(router.router_id, router.expires_in_ms, router.loads, &out);
  }
  return out;
}

Result<LoadViewAnswer> DecodeLoadViewAnswer(std::string_view payload) {
  PayloadReader in(payload);
  LoadViewAnswer answer;
  answer.revision = in.Varint64("revision");
  const uint64_t n = in.Count(kMinViewRouterBytes, "routers");
  for (uint64_t i = 0; in.ok() && i < n; ++i) {
    LoadViewRouter& router = answer.routers.emplace_back();
    GetRouter(in, "expires_in_ms", &router.router_id, &router.expires_in_ms, &router.loads);
  }
  KVATLAS_RETURN_IF_ERROR(in.Finish());
  return answer;
}

void LoadViewAnswer::FillTable(FleetLoadTable* table, FleetLoadTable::Clock::time_point now) const {
  table->Clear();
  for (const LoadViewRouter& router : routers) {
    LoadReport report{router.router_id, 0, router.loads};
    table->Replace(report, now + std::chrono::milliseconds(router.expires_in_ms));
  }
}

}  // namespace kvatlas::protocol
