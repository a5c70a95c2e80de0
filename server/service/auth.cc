#include "server/service/auth.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <set>
#include <utility>

#include "kvatlas/common/protocol.h"

namespace kvatlas::server {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Hex(const uint8_t* bytes, size_t n) {
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kHexDigits[bytes[i] >> 4];
    out += kHexDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

TokenDigest DigestOfToken(std::string_view token) {
  TokenDigest digest;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

std::string DigestHex(const TokenDigest& digest) { return Hex(digest.data(), digest.size()); }

Result<TokenDigest> ParseDigestHex(std::string_view hex) {
  TokenDigest digest{};
  if (hex.size() != 2 * digest.size()) {
    return Status::InvalidArgument("sha256: must be 64 hex digits, got " +
                                   std::to_string(hex.size()) + " characters");
  }
  for (size_t i = 0; i < digest.size(); ++i) {
    const int high = HexValue(hex[2 * i]);
    const int low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) return Status::InvalidArgument("sha256: must be 64 hex digits");
    digest[i] = static_cast<uint8_t>(high << 4 | low);
  }
  return digest;
}

Result<std::string> NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return Status::Internal("the random generator (OpenSSL RAND_bytes) failed");
  }
  std::string token = "kvt_" + Hex(bytes, sizeof(bytes));
  OPENSSL_cleanse(bytes, sizeof(bytes));
  return token;
}

Status ValidateTokenName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTokenNameBytes) {
    return Status::InvalidArgument("name: must be 1 to " + std::to_string(kMaxTokenNameBytes) +
                                   " bytes, got " + std::to_string(name.size()));
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("name: only letters, digits, '.', '_' and '-'");
  }
  return Status::Ok();
}

std::string TokenLine(const TokenEntry& entry) {
  return entry.name + ":" + std::string(RoleName(entry.role)) + ":" + DigestHex(entry.digest);
}

Result<std::vector<TokenEntry>> ParseTokenLines(std::string_view text, std::string_view source) {
  std::vector<TokenEntry> tokens;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = Trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(std::string(source) + ":" + std::to_string(line_no) + ": " +
                                     why + " (expected NAME:ROLE:SHA256HEX)");
    };
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) return bad("not three fields");
    TokenEntry entry;
    entry.name = std::string(Trim(line.substr(0, first)));
    if (Status s = ValidateTokenName(entry.name); !s.ok()) return bad(s.message());
    const std::string_view role = Trim(line.substr(first + 1, second - first - 1));
    const std::optional<Role> parsed = ParseRole(role);
    if (!parsed) return bad("role must be read, write or admin, got \"" + std::string(role) + "\"");
    entry.role = *parsed;
    Result<TokenDigest> digest = ParseDigestHex(Trim(line.substr(second + 1)));
    if (!digest) return bad(digest.error().message());
    entry.digest = *digest;
    tokens.push_back(std::move(entry));
  }
  return tokens;
}

Status CheckTokenSet(const std::vector<TokenEntry>& tokens) {
  if (tokens.size() > kMaxTokens) {
    return Status::InvalidArgument("tokens: " + std::to_string(tokens.size()) +
                                   " configured, more than the limit of " +
                                   std::to_string(kMaxTokens));
  }
  std::set<std::string_view> names;
  std::set<TokenDigest> digests;
  for (const TokenEntry& t : tokens) {
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument("tokens: the name \"" + t.name + "\" is configured twice");
    }
    if (!digests.insert(t.digest).second) {
      return Status::InvalidArgument("tokens: \"" + t.name +
                                     "\" has the same sha256 as another token (one token, "
                                     "one name)");
    }
  }
  return Status::Ok();
}

Authenticator::Authenticator(bool enabled, std::vector<TokenEntry> tokens)
    : enabled_(enabled), set_(std::make_shared<const TokenSet>(std::move(tokens))) {}

size_t Authenticator::size() const { return Snapshot()->size(); }

std::shared_ptr<const Authenticator::TokenSet> Authenticator::Snapshot() const {
  std::lock_guard lock(mu_);
  return set_;
}

void Authenticator::Replace(std::vector<TokenEntry> tokens) {
  auto set = std::make_shared<const TokenSet>(std::move(tokens));
  std::lock_guard lock(mu_);
  set_ = std::move(set);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

Result<Principal> Authenticator::Find(const TokenDigest& digest, const TokenSet& set,
                                      uint64_t generation) const {
  // Every digest is compared, in constant time each, so that the time taken does not tell
  // which (or whether an early) entry matched.
  const TokenEntry* found = nullptr;
  for (const TokenEntry& entry : set) {
    if (CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0) found = &entry;
  }
  if (found == nullptr) return Status::Unauthenticated("the token is not valid on this server");
  Principal principal;
  principal.name = found->name;
  principal.role = found->role;
  principal.digest = digest;
  principal.generation = generation;
  return principal;
}

Result<Principal> Authenticator::Authenticate(std::optional<std::string_view> token) const {
  if (!enabled_) {
    Principal anonymous;
    anonymous.name = "anonymous";
    anonymous.anonymous = true;
    return anonymous;
  }
  if (!token || token->empty()) {
    return Status::Unauthenticated(
        "a token is required (Authorization: Bearer <token>, or the "
        "binary protocol's kAuth frame)");
  }
  if (token->size() > protocol::kMaxTokenBytes) {
    return Status::Unauthenticated("the token is longer than " +
                                   std::to_string(protocol::kMaxTokenBytes) + " bytes");
  }
  // The generation before the snapshot: a Replace in between makes the principal look
  // older than its set, which only costs one more Recheck.
  const uint64_t generation = this->generation();
  return Find(DigestOfToken(*token), *Snapshot(), generation);
}

Status Authenticator::Authorize(const Principal& principal, Role needed, std::string_view what) {
  if (principal.anonymous || RoleAllows(principal.role, needed)) return Status::Ok();
  return Status::PermissionDenied(
      std::string(what) + " needs the " + std::string(RoleName(needed)) + " role; the token \"" +
      principal.name + "\" has " + std::string(RoleName(principal.role)));
}

Result<Principal> Authenticator::Recheck(const Principal& principal) const {
  if (principal.anonymous) return principal;
  const uint64_t generation = this->generation();
  if (principal.generation == generation) return principal;
  Result<Principal> current = Find(principal.digest, *Snapshot(), generation);
  if (!current) {
    return Status::Unauthenticated("the token \"" + principal.name +
                                   "\" was removed from this server's tokens");
  }
  return current;
}

}  // namespace kvatlas::server
