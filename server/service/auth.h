// Access control (docs/security.md §Tokens and roles): bearer tokens, each configured by
// name with a role and only the SHA-256 of the token kept, and the Authenticator that checks
// a presented token against them. REST (Authorization: Bearer) and the binary protocol (the
// kAuth frame) both authenticate here; the adapters ask Authorize() whether the token's role
// allows the request. The set can be replaced at run time (SIGHUP) without touching
// connections that authenticated with a token that is still configured: a principal is
// re-checked against the current set with Recheck(), which is a single atomic load while
// the set is unchanged.
//
// Thread-safety: Authenticator is safe from any thread (the set is an immutable snapshot
// swapped under a mutex); the free functions are pure.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/result.h"
#include "kvatlas/common/role.h"
#include "kvatlas/common/status.h"

namespace kvatlas::server {

// SHA-256 of a token: all that the server keeps of it.
using TokenDigest = std::array<uint8_t, 32>;

// Limits of the token set (docs/limits.md §Access control).
inline constexpr size_t kMaxTokens = 10'000;
inline constexpr size_t kMaxTokenNameBytes = 64;

[[nodiscard]] TokenDigest DigestOfToken(std::string_view token);
// 64 lower-case hex digits.
[[nodiscard]] std::string DigestHex(const TokenDigest& digest);
// 64 hex digits (either case); kInvalidArgument otherwise.
[[nodiscard]] Result<TokenDigest> ParseDigestHex(std::string_view hex);
// A new random token: "kvt_" and 64 hex digits (256 bits from OpenSSL's RAND_bytes).
// kInternal if the random generator fails.
[[nodiscard]] Result<std::string> NewToken();

struct TokenEntry {
  std::string name;  // 1 … 64 bytes of [A-Za-z0-9._-]; appears in logs, never the token
  Role role = Role::kRead;
  TokenDigest digest{};
  friend bool operator==(const TokenEntry&, const TokenEntry&) = default;
};

// kInvalidArgument naming the problem for a name outside [A-Za-z0-9._-]{1,64}.
[[nodiscard]] Status ValidateTokenName(std::string_view name);
// The line "NAME:ROLE:SHA256HEX" of a token file (and of `kvatlas-server gen-token`).
[[nodiscard]] std::string TokenLine(const TokenEntry& entry);
// A token file: one "NAME:ROLE:SHA256HEX" per line; blank lines and lines starting with '#'
// are skipped, spaces around fields are trimmed. kInvalidArgument naming `source` and the
// line number for a malformed line.
[[nodiscard]] Result<std::vector<TokenEntry>> ParseTokenLines(std::string_view text,
                                                              std::string_view source);
// A token set is valid when names are unique, digests are unique (one token, one name) and
// it holds at most kMaxTokens entries.
[[nodiscard]] Status CheckTokenSet(const std::vector<TokenEntry>& tokens);

// Who a request comes from, once authenticated.
struct Principal {
  std::string name;  // the token's name; "anonymous" with access control off
  Role role = Role::kAdmin;
  TokenDigest digest{};     // to re-check the token after a reload
  uint64_t generation = 0;  // the token set it was checked against
  bool anonymous = false;   // access control is off: everything is allowed
};

class Authenticator {
 public:
  // `enabled` = access control on (tokens are configured). With it off every request is
  // the anonymous admin and the token set is ignored.
  Authenticator(bool enabled, std::vector<TokenEntry> tokens);

  bool enabled() const { return enabled_; }
  size_t size() const;

  // Replaces the token set (REQUIRES: CheckTokenSet passed). Principals authenticated with a
  // token that is no longer in the set fail Recheck from now on.
  void Replace(std::vector<TokenEntry> tokens);
  // Bumped by every Replace.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // The principal of `token` (nullopt: none presented). kUnauthenticated when access control
  // is on and the token is missing, too long (protocol::kMaxTokenBytes) or not configured.
  // The presented token is hashed and compared with every configured digest in constant
  // time per digest (CRYPTO_memcmp), without stopping at a match.
  [[nodiscard]] Result<Principal> Authenticate(std::optional<std::string_view> token) const;

  // OK when `principal`'s role allows `needed`; else kPermissionDenied naming the token, its
  // role, the role needed and `what` (the request: "POST /register", "ingest").
  [[nodiscard]] static Status Authorize(const Principal& principal, Role needed,
                                        std::string_view what);

  // After a reload: `principal` as the current set has it (its role may have changed), or
  // kUnauthenticated when its token was removed. Cheap while the set is unchanged.
  [[nodiscard]] Result<Principal> Recheck(const Principal& principal) const;

 private:
  using TokenSet = std::vector<TokenEntry>;
  std::shared_ptr<const TokenSet> Snapshot() const;
  Result<Principal> Find(const TokenDigest& digest, const TokenSet& set, uint64_t generation) const;

  const bool enabled_;
  mutable std::mutex mu_;  // guards set_
  std::shared_ptr<const TokenSet> set_;
  std::atomic<uint64_t> generation_{1};
};

}  // namespace kvatlas::server
