#include "server/model/registration.h"

#include "common/internal/key_bytes.h"
#include "common/internal/names.h"

namespace kvatlas::server {

std::string_view EngineTypeName(EngineType type) {
  switch (type) {
    case EngineType::kVllm:
      return "vLLM";
    case EngineType::kSglang:
      return "SGLang";
    case EngineType::kMooncake:
      return "Mooncake";
  }
  return "vLLM";
}

std::optional<EngineType> ParseEngineType(std::string_view name) {
  for (EngineType type : {EngineType::kVllm, EngineType::kSglang, EngineType::kMooncake}) {
    if (EqualsIgnoreCase(name, EngineTypeName(type))) return type;
  }
  return std::nullopt;
}

std::string_view ReportModeName(ReportMode mode) {
  return mode == ReportMode::kFull ? "full" : "incremental";
}

std::optional<ReportMode> ParseReportMode(std::string_view name) {
  for (ReportMode mode : {ReportMode::kIncremental, ReportMode::kFull}) {
    if (EqualsIgnoreCase(name, ReportModeName(mode))) return mode;
  }
  return std::nullopt;
}

std::string ReportModeProblem(EngineType type, ReportMode mode) {
  if (mode == ReportMode::kIncremental || type == EngineType::kVllm) return "";
  return "\"" + std::string(ReportModeName(mode)) + "\" is a vLLM mode; " +
         std::string(EngineTypeName(type)) + " publishers have one meaning (docs/engine-events.md)";
}

std::string PlacedStreamKey(std::string_view stream, const ContextKey& context) {
  // The context's canonical encoding (length-prefixed strings and a varint, as in a `C`
  // record): self-delimiting, so a stream key without a separator and a context make one
  // key and only one. Any bytes may follow the separator; storage keeps the key as is.
  std::string key(stream);
  key.push_back(kPlacedStreamSeparator);
  PutContextKey(&key, context);
  return key;
}

std::string_view BaseStreamKey(std::string_view key) {
  return key.substr(0, key.find(kPlacedStreamSeparator));
}

}  // namespace kvatlas::server
