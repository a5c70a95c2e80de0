#include "server/api/feed_json.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kvatlas/common/json_codec.h"

namespace kvatlas::server {
namespace {

void AppendNumber(uint64_t value, std::string* out) {
  char digits[20];
  const auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  out->append(digits, end);
}

// "key":value, — every field but the last is followed by a comma.
void AppendKey(std::string_view key, std::string* out) {
  *out += '"';
  *out += key;
  *out += "\":";
}
void AppendString(std::string_view key, std::string_view value, std::string* out) {
  AppendKey(key, out);
  *out += DumpJson(nlohmann::json(value));  // escaping and UTF-8 repair: rare, short strings
  *out += ',';
}
void AppendUnsigned(std::string_view key, uint64_t value, std::string* out) {
  AppendKey(key, out);
  AppendNumber(value, out);
  *out += ',';
}

}  // namespace

void AppendFeedRecordJson(const FeedRecord& r, std::string* out) {
  // nlohmann orders an object's keys alphabetically: so do these lines.
  *out += '{';
  AppendString("additional_salt", r.context.salt, out);
  AppendString("backend_id", r.holder.id, out);
  AppendUnsigned("block_size", r.context.block_size, out);
  AppendUnsigned("dp_rank", r.holder.dp_rank, out);
  if (r.op == FeedOp::kPredicted) AppendUnsigned("expires_at_ms", r.expires_at_ms, out);
  AppendKey("keys", out);
  *out += '[';
  for (size_t i = 0; i < r.keys.size(); ++i) {
    if (i > 0) *out += ',';
    AppendNumber(r.keys[i], out);
  }
  *out += "],";
  if (!r.locations.empty()) {
    AppendKey("locations", out);
    *out += DumpJson(nlohmann::json(r.locations));
    *out += ',';
  }
  AppendString("lora_name", r.context.lora_name, out);
  // A predicted record has no tier: the guess is that the holder computed the blocks.
  if (r.op != FeedOp::kPredicted) AppendString("medium", TierName(r.tier), out);
  AppendString("model_name", r.context.model, out);
  AppendString("op", FeedOpName(r.op), out);
  AppendUnsigned("revision", r.revision, out);
  AppendKey("tenant_id", out);
  *out += DumpJson(nlohmann::json(r.context.tenant));
  *out += '}';
}

}  // namespace kvatlas::server
