#include "server/model/value_codec.h"

namespace kvatlas::server {

void PutTier(std::string* out, Tier tier) { out->push_back(static_cast<char>(tier)); }

Tier ReadTier(ByteReader* in) {
  uint8_t b = in->U8();
  if (b >= kNumTiers) {
    in->Fail();
    return Tier::kGpu;
  }
  return static_cast<Tier>(b);
}

void PutRegistration(std::string* out, const Registration& r) {
  PutLengthPrefixed(out, r.endpoint);
  PutLengthPrefixed(out, r.replay_endpoint);
  // The type byte: engine type in the low nibble, report mode in the high one (0 for
  // incremental, so a registration without a report mode keeps its old bytes).
  out->push_back(
      static_cast<char>(static_cast<uint8_t>(r.type) | static_cast<uint8_t>(r.report_mode) << 4));
  PutLengthPrefixed(out, r.model);
  PutLengthPrefixed(out, r.lora_name);
  PutLengthPrefixed(out, r.tenant_id);
  PutLengthPrefixed(out, r.instance_id);
  PutVarint64(out, r.block_size);
  PutVarint64(out, r.dp_rank);
  PutLengthPrefixed(out, r.additional_salt);
  PutLengthPrefixed(out, r.topic);
}

Registration ReadRegistration(ByteReader* in) {
  Registration r;
  r.endpoint = in->LengthPrefixed();
  r.replay_endpoint = in->LengthPrefixed();
  const uint8_t byte = in->U8();
  const uint8_t type = byte & 0x0f;
  const uint8_t report_mode = byte >> 4;
  if (type > static_cast<uint8_t>(EngineType::kMooncake) || report_mode > kMaxReportMode) {
    in->Fail();
  }
  r.type = static_cast<EngineType>(type);
  r.report_mode = static_cast<ReportMode>(report_mode);
  r.model = in->LengthPrefixed();
  r.lora_name = in->LengthPrefixed();
  r.tenant_id = in->LengthPrefixed();
  r.instance_id = in->LengthPrefixed();
  r.block_size = in->Varint32();
  r.dp_rank = in->Varint32();
  r.additional_salt = in->LengthPrefixed();
  r.topic = in->LengthPrefixed();
  return r;
}

void PutHolderWideIds(std::string* out, const std::vector<uint64_t>& ids) {
  PutVarint64(out, ids.size());
  for (uint64_t id : ids) PutFixed64(out, id);
}

std::vector<uint64_t> ReadHolderWideIds(ByteReader* in) {
  std::vector<uint64_t> ids;
  const uint64_t n = in->Count(sizeof(uint64_t));
  if (n == 0 || n > kHolderWideKept) in->Fail();
  for (uint64_t i = 0; i < n && in->ok(); ++i) {
    ids.push_back(in->Fixed64());
    if (ids.back() == 0) in->Fail();
  }
  return ids;
}

}  // namespace kvatlas::server
