#include "server/model/replica_digest.h"

// Inlined (header-only mode): LocationDigest runs for every element of a copy with a
// location, and a call through the shared library's PLT costs as much as a short hash.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>
#include <string>

#include "common/internal/bytes.h"
#include "server/model/value_codec.h"

namespace kvatlas::server {
namespace {

uint64_t Hash(std::string_view bytes) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), kReplicaDigestSeed);
}

// EntryElement's constants (replica_digest.h): fixed for digest scheme 2, like the functions
// below; any change is a new kReplicaDigestScheme.
constexpr uint64_t kEntryTag = kReplicaDigestSeed ^ 'T';
constexpr uint64_t kEntrySecret[6] = {0xa076'1d64'78bd'642fULL, 0xe703'7ed1'a0b4'28dbULL,
                                      0x8ebc'6af0'9c88'c6e3ULL, 0x5899'65cc'7537'4cc3ULL,
                                      0x1d8e'4e27'c47d'124fULL, 0x9e37'79b9'7f4a'7c15ULL};

// The xor of the two halves of the 128-bit product (XXH3_mul128_fold64).
__extension__ using Uint128 = unsigned __int128;  // GCC and Clang: one mul on x86-64 and arm64
uint64_t Fold(uint64_t a, uint64_t b) {
  const Uint128 product = static_cast<Uint128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

// XXH3's finaliser (XXH3_avalanche): every input bit affects every output bit.
uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x1656'6791'9e37'79f9ULL;
  return h ^ (h >> 32);
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
  // On the apply path (every stored, removed or recounted copy): three multiplies and the
  // finaliser, no memory.
  const uint64_t packed = uint64_t{e.depth} | uint64_t{e.tier} << 32 | uint64_t{e.refcount} << 40;
  return Avalanche(kEntryTag +
                   Fold(e.context_key_hash ^ kEntrySecret[0], e.holder_key_hash ^ kEntrySecret[1]) +
                   Fold(e.block_key ^ kEntrySecret[2], packed ^ kEntrySecret[3]) +
                   Fold(e.engine_hash ^ kEntrySecret[4], e.location_hash ^ kEntrySecret[5]));
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
  if (addresses.draining) bytes.push_back(1);  // as before drains for a server not draining
  return Hash(bytes);
}

uint64_t DirectoryElement(const PlacementDirectory& directory) {
  // Every change advances the epoch: epoch 0 is the empty directory, which adds nothing.
  if (directory.epoch() == 0) return 0;
  std::string bytes(1, 'P');
  bytes += EncodePlacementDirectory(directory);
  return Hash(bytes);
}

uint64_t DisownedElement(const ContextKey& context, const DisownedContext& disowned) {
  std::string bytes(1, 'D');
  PutContextKey(&bytes, context);
  PutFixed64(&bytes, disowned.revision);
  PutFixed64(&bytes, disowned.epoch);
  return Hash(bytes);
}

uint64_t HolderWideElement(const HolderKey& holder, const std::vector<uint64_t>& ids) {
  std::string bytes(1, 'W');
  PutHolderKey(&bytes, holder);
  PutHolderWideIds(&bytes, ids);
  return Hash(bytes);
}

uint64_t ImportingElement(const ContextKey& context, Revision since) {
  std::string bytes(1, 'I');
  PutContextKey(&bytes, context);
  PutFixed64(&bytes, since);
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
  digest += DirectoryElement(registry.directory);
  for (const auto& [context, disowned] : registry.disowned) {
    digest += DisownedElement(context, disowned);
  }
  for (const auto& [holder, ids] : registry.holder_wide) {
    digest += HolderWideElement(holder, ids);
  }
  for (const auto& [context, since] : registry.importing) {
    digest += ImportingElement(context, since);
  }
  return digest;
}

std::string ReplicaDigestHex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

}  // namespace kvatlas::server
