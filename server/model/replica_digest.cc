#include "server/model/replica_digest.h"

// Inlined (header-only mode): the entry element is hashed once or twice per applied copy,
// and a call through the shared library's PLT costs as much as the 50 bytes' hash.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/internal/bytes.h"
#include "server/model/value_codec.h"

namespace kvatlas::server {
namespace {

uint64_t Hash(std::string_view bytes) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kReplicaDigestSeed);
}

// Writes `v` little-endian at `p`; returns the position after it.
template <typename T>
unsigned char* PutLe(unsigned char* p, T v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof(T));
    return p + sizeof(T);
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) *p++ = static_cast<unsigned char>(v >> (8 * i));
    return p;
  }
}

}  // namespace

uint64_t ContextKeyDigest(const ContextKey& key) {
  std::string bytes;
  PutContextKey(&bytes, key);
  return Hash(bytes);
}

uint64_t HolderKeyDigest(const HolderKey& key) {
  std::string bytes;
  PutHolderKey(&bytes, key);
  return Hash(bytes);
}

uint64_t LocationDigest(std::string_view location) { return location.empty() ? 0 : Hash(location); }

uint64_t ContextElement(const ContextKey& key) {
  std::string bytes(1, 'C');
  PutContextKey(&bytes, key);
  return Hash(bytes);
}

uint64_t HolderElement(const HolderKey& key) {
  std::string bytes(1, 'H');
  PutHolderKey(&bytes, key);
  return Hash(bytes);
}

uint64_t EntryElement(const EntryDigestFields& e) {
  // On the apply path (every stored or removed copy): a fixed buffer, no allocation.
  unsigned char bytes[1 + 8 + 8 + 8 + 4 + 1 + 4 + 8 + 8];
  unsigned char* p = bytes;
  *p++ = 'T';
  p = PutLe(p, e.context_key_hash);
  p = PutLe(p, e.holder_key_hash);
  p = PutLe(p, e.block_key);
  p = PutLe(p, e.depth);
  *p++ = e.tier;
  p = PutLe(p, e.refcount);
  p = PutLe(p, e.engine_hash);
  p = PutLe(p, e.location_hash);
  static_assert(sizeof(bytes) == 50);
  return XXH3_64bits_withSeed(bytes, static_cast<size_t>(p - bytes), kReplicaDigestSeed);
}

uint64_t RegistrationElement(std::string_view key, const Registration& registration) {
  std::string bytes(1, 'R');
  PutLengthPrefixed(&bytes, key);
  PutRegistration(&bytes, registration);
  return Hash(bytes);
}

uint64_t StreamPositionElement(std::string_view stream, uint64_t sequence) {
  std::string bytes(1, 'S');
  PutLengthPrefixed(&bytes, stream);
  PutFixed64(&bytes, sequence);
  return Hash(bytes);
}

uint64_t ServerAddressesElement(uint64_t server_id, const ServerAddresses& addresses) {
  std::string bytes(1, 'A');
  PutFixed64(&bytes, server_id);
  PutLengthPrefixed(&bytes, addresses.http_address);
  PutLengthPrefixed(&bytes, addresses.rpc_address);
  return Hash(bytes);
}

uint64_t RegistryDigest(const Registry& registry) {
  uint64_t digest = 0;
  for (const auto& [key, registration] : registry.registrations) {
    digest += RegistrationElement(key, registration);
  }
  for (const auto& [stream, sequence] : registry.positions) {
    digest += StreamPositionElement(stream, sequence);
  }
  for (const auto& [id, addresses] : registry.servers) {
    digest += ServerAddressesElement(id, addresses);
  }
  return digest;
}

std::string ReplicaDigestHex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace kvatlas::server
