// The size limits of names and JSON bodies that every request decoder applies, whichever
// way a request comes in (REST JSON, the binary protocol, the config file's publishers):
// one fixed, documented constant per kind of name (docs/limits.md §JSON bodies and names),
// so that a name accepted over one protocol is accepted over the other. Past a limit a
// decoder answers kInvalidArgument naming the field and the limit. The constants are hard
// maxima: a server's config can lower the name, salt and location limits (NameLimits,
// checked by its service layer), never raise them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"

namespace kvatlas {

// JSON bodies: containers nested deeper than this are refused before the document is built.
inline constexpr int kMaxJsonDepth = 64;

// Model, LoRA and tenant names, instance and backend ids, a medium: names of things.
inline constexpr size_t kMaxNameBytes = 256;
// additional_salt (cache_salt), a registration's ZMQ topic, and endpoints / addresses.
inline constexpr size_t kMaxSaltBytes = 1024;
inline constexpr size_t kMaxTopicBytes = 1024;
inline constexpr size_t kMaxEndpointBytes = 1024;
// One location descriptor of a stored block (a storage URL, a file path).
inline constexpr size_t kMaxLocationBytes = 4096;

// The name limits in force. Every decoder applies the defaults (the constants above, hard
// maxima); a server applies its configured ones (max_name_bytes, max_salt_bytes,
// max_location_bytes, each at most its constant) in its service layer, with `config_keys`
// set so that an error names the key to raise (docs/limits.md §JSON bodies and names).
struct NameLimits {
  size_t name_bytes = kMaxNameBytes;
  size_t salt_bytes = kMaxSaltBytes;
  size_t location_bytes = kMaxLocationBytes;
  bool config_keys = false;
};

// kInvalidArgument "<prefix><field>: N bytes, longer than the limit of M bytes" (then
// " (<key>)" when `key` is given). Callers compare sizes first and build this only on
// failure (ingest checks millions of names).
[[nodiscard]] inline Status TooLong(std::string_view prefix, std::string_view field, size_t size,
                                    size_t max_bytes, std::string_view key = {}) {
  std::string message = std::string(prefix) + std::string(field) + ": " + std::to_string(size) +
                        " bytes, longer than the limit of " + std::to_string(max_bytes) + " bytes";
  if (!key.empty()) message += " (" + std::string(key) + ")";
  return Status::InvalidArgument(std::move(message));
}

// OK when `value` is at most `max_bytes` long; else TooLong(prefix, field, ...). `prefix`
// is "" for a field of a request body, "events[3]." for a field of a list element.
[[nodiscard]] inline Status CheckLength(std::string_view prefix, std::string_view field,
                                        std::string_view value, size_t max_bytes,
                                        std::string_view key = {}) {
  if (value.size() <= max_bytes) return Status::Ok();
  return TooLong(prefix, field, value.size(), max_bytes, key);
}

// The wire names of a context's model and salt fields, which differ between dialects.
struct ContextFieldNames {
  std::string_view model = "model_name";
  std::string_view salt = "additional_salt";
};

// Checks the lengths of a context's names (tenant_id, model, lora_name: name_bytes; salt:
// salt_bytes), naming the field as "<prefix><field>".
[[nodiscard]] inline Status CheckContextLimits(const ContextKey& context, std::string_view prefix,
                                               ContextFieldNames names = {},
                                               const NameLimits& limits = {}) {
  const std::string_view name_key = limits.config_keys ? "max_name_bytes" : "";
  const std::string_view salt_key = limits.config_keys ? "max_salt_bytes" : "";
  if (Status s = CheckLength(prefix, "tenant_id", context.tenant, limits.name_bytes, name_key);
      !s.ok()) {
    return s;
  }
  if (Status s = CheckLength(prefix, names.model, context.model, limits.name_bytes, name_key);
      !s.ok()) {
    return s;
  }
  if (Status s = CheckLength(prefix, "lora_name", context.lora_name, limits.name_bytes, name_key);
      !s.ok()) {
    return s;
  }
  return CheckLength(prefix, names.salt, context.salt, limits.salt_bytes, salt_key);
}

}  // namespace kvatlas
