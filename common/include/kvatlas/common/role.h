// Role: what a kvatlas access token may do (docs/security.md §Tokens and roles). Roles are
// ordered: admin implies write, which implies read. The numbers travel in the binary
// protocol's kAuth answer (docs/protocol.md §kAuth): never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvatlas {

enum class Role : uint8_t {
  kRead = 1,   // lookups, routes, snapshots, watches, stats, streams, cluster status
  kWrite = 2,  // and events, heartbeats (what engines and indexing adapters get)
  kAdmin = 3,  // and publisher registrations, cluster membership and leadership transfer
};

// "read", "write", "admin".
[[nodiscard]] constexpr std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kWrite:
      return "write";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

// The inverse of RoleName (exact, lower case); nullopt for anything else.
[[nodiscard]] constexpr std::optional<Role> ParseRole(std::string_view name) {
  if (name == "read") return Role::kRead;
  if (name == "write") return Role::kWrite;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

// Whether `held` allows what `needed` does (admin ⊇ write ⊇ read).
[[nodiscard]] constexpr bool RoleAllows(Role held, Role needed) {
  return static_cast<uint8_t>(held) >= static_cast<uint8_t>(needed);
}

}  // namespace kvatlas
