// Names read from outside without regard to ASCII case: engine payloads and JSON bodies
// spell the same value "stored" / "Stored", "REUSED" / "reused". Locale-free. Header-only.
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>

#include "kvatlas/common/events.h"

namespace kvatlas {

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [&](char x, char y) { return lower(x) == lower(y); });
}

// "new" / "reused" in any case (vLLM sends "NEW" / "REUSED"); nullopt for anything else.
inline std::optional<BlockOrigin> ParseBlockOrigin(std::string_view name) {
  for (const BlockOrigin origin : {BlockOrigin::kNew, BlockOrigin::kReused}) {
    if (EqualsIgnoreCase(name, BlockOriginName(origin))) return origin;
  }
  return std::nullopt;
}

}  // namespace kvatlas
