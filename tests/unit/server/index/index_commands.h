// Commands the index tests apply, on the context they share.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/index/index.h"

namespace kvatlas::server::test {

inline const ContextKey kCtx{"default", "llama", "", 16, ""};

inline RemoveCommand Remove(const std::string& holder, std::optional<Tier> tier,
                            std::vector<uint64_t> hashes) {
  RemoveCommand c;
  c.context = kCtx;
  c.holder = {holder, 0};
  c.tier = tier;
  c.hashes = std::move(hashes);
  return c;
}

}  // namespace kvatlas::server::test
