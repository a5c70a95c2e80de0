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

std::optional<EngineType> ParseEngineType(std::string_view name) {
  for (EngineType type : {EngineType::kVllm, EngineType::kSglang, EngineType::kMooncake}) {
    const std::string_view canonical = EngineTypeName(type);
    if (std::equal(name.begin(), name.end(), canonical.begin(), canonical.end(),
                   [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
      return type;
    }
  }
  return std::nullopt;
}

}  // namespace kvatlas::server
