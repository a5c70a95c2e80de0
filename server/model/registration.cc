#include "server/model/registration.h"

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

}  // namespace kvatlas::server
