#include "server/model/registration.h"

#include <algorithm>
#include <cctype>

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

namespace {

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

}  // namespace

std::optional<EngineType> ParseEngineType(std::string_view name) {
  for (EngineType type : {EngineType::kVllm, EngineType::kSglang, EngineType::kMooncake}) {
    if (EqualsIgnoringCase(name, EngineTypeName(type))) return type;
  }
  return std::nullopt;
}

std::string_view ReportModeName(ReportMode mode) {
  return mode == ReportMode::kFull ? "full" : "incremental";
}

std::optional<ReportMode> ParseReportMode(std::string_view name) {
  for (ReportMode mode : {ReportMode::kIncremental, ReportMode::kFull}) {
    if (EqualsIgnoringCase(name, ReportModeName(mode))) return mode;
  }
  return std::nullopt;
}

}  // namespace kvatlas::server
