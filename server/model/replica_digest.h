// The replica digest (docs/replication.md §Replica audits): a 64-bit, order-independent
// digest of the replicated state, kept up to date by the state machine on every change so
// that replicas can compare their states at an agreed log index for next to nothing.
//
// It is a multiset hash: the sum, modulo 2^64, of one element per logical record (below). A
// change subtracts the old record's element and adds the new one's; the sum does not depend
// on the order of the records or of the changes, only on the set of records, so it equals
// a full recomputation over the state (Index::RecomputeReplicaDigest, RegistryDigest).
//
// What it covers is what every replica must agree on, named by keys rather than by this
// replica's interned ids or block stamps (both artefacts of its own history: a restarted
// replica continues stamps after its largest loaded one): contexts, holders, entries (with
// their block's key and depth), registrations, stream positions and server addresses. It
// leaves out the applied index (compared apart), the `M` records, and the order of blocks
// within a context (their FIFO, which a sum cannot see).
//
// Elements, digest scheme 2 (kReplicaDigestScheme). All but the entry's are XXH3-64 (seed
// kReplicaDigestSeed) of the record's canonical bytes (integers little-endian; str = varint
// length, bytes):
//   context  'C', context_key (docs/storage.md)
//   holder   'H', holder_key
//   registration  'R', str key, registration
//   stream position  'S', str stream key, le64 sequence
//   server addresses 'A', le64 server id, str http address, str rpc address (then 01 while
//                    draining)
//   directory  'P', the directory's EncodePlacementDirectory bytes; none (0) while the
//              directory is empty at epoch 0, as in every group but the directory group
//   disowned context  'D', context_key, le64 revision, le64 epoch
// An entry's element, computed on every stored, removed or recounted copy, is instead a
// multiply-fold over its fields as six 64-bit words (EntryElement): XXH3 of the 50 bytes the
// same fields made (scheme 1) cost ~20 ns, most of the digest's share of the apply.
//   w0 ContextKeyDigest, w1 HolderKeyDigest, w2 block key,
//   w3 depth | tier << 32 | refcount << 40, w4 engine hash, w5 LocationDigest;
//   element = Avalanche(kEntryTag + Fold(w0 ^ s0, w1 ^ s1) + Fold(w2 ^ s2, w3 ^ s3)
//                       + Fold(w4 ^ s4, w5 ^ s5))
// with Fold(a, b) the xor of the two halves of the 128-bit product a * b, s0..s5 fixed
// distinct odd constants, and Avalanche XXH3's finaliser (replica_digest.cc spells both out,
// so that the element does not change with the xxHash library). As in XXH3's own 16-byte
// mixing, a word equal to its constant zeroes its pair's product; the words are hashes and
// clients' block keys, and the audits look for faults, not adversaries.
//
// A build whose elements differ computes other digests for the same state: the scheme
// number says which elements a digest is made of, audits carry the leader's
// (AuditCommand::digest_scheme), and a replica compares only digests of its own scheme.
// Change kReplicaDigestScheme whenever any element changes. Adding the directory and disowned
// elements did not: a state without them has the digest it had before, and a build that
// knows no placement commands cannot apply a state that has them (command batch version 11).
// Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvatlas/common/types.h"
#include "server/model/registration.h"

namespace kvatlas::server {

inline constexpr uint64_t kReplicaDigestSeed = 0x6b76'6174'6c61'7321ULL;  // "kvatlas!"

// The elements this build computes (file comment). 1: every element XXH3 of canonical
// bytes; 2: the entry's a multiply-fold of its words.
inline constexpr uint32_t kReplicaDigestScheme = 2;

// XXH3-64 of the context's and holder's key bytes: what an entry element names them by,
// computed once per context or holder, not once per entry.
[[nodiscard]] uint64_t ContextKeyDigest(const ContextKey& key);
[[nodiscard]] uint64_t HolderKeyDigest(const HolderKey& key);
// XXH3-64 of a location's bytes; 0 for none (empty).
[[nodiscard]] uint64_t LocationDigest(std::string_view location);

// The element of each record (file comment).
[[nodiscard]] uint64_t ContextElement(const ContextKey& key);
[[nodiscard]] uint64_t HolderElement(const HolderKey& key);
struct EntryDigestFields {
  uint64_t context_key_hash = 0;
  uint64_t holder_key_hash = 0;
  uint64_t block_key = 0;
  uint32_t depth = 0;
  uint8_t tier = 0;
  uint16_t refcount = 0;  // the Index keeps 16 bits
  uint64_t engine_hash = 0;
  uint64_t location_hash = 0;
};
[[nodiscard]] uint64_t EntryElement(const EntryDigestFields& entry);
[[nodiscard]] uint64_t RegistrationElement(std::string_view key, const Registration& registration);
[[nodiscard]] uint64_t StreamPositionElement(std::string_view stream, uint64_t sequence);
[[nodiscard]] uint64_t ServerAddressesElement(uint64_t server_id, const ServerAddresses& addresses);
// 0 for an empty directory (epoch 0).
[[nodiscard]] uint64_t DirectoryElement(const PlacementDirectory& directory);
[[nodiscard]] uint64_t DisownedElement(const ContextKey& context, const DisownedContext& disowned);
[[nodiscard]] uint64_t HolderWideElement(const HolderKey& holder, const std::vector<uint64_t>& ids);
[[nodiscard]] uint64_t ImportingElement(const ContextKey& context, Revision since);

// The registry's part of the digest, recomputed from scratch: O(its records).
[[nodiscard]] uint64_t RegistryDigest(const Registry& registry);

// 16 lowercase hex digits, as GET /v1/cluster and the logs show a digest.
[[nodiscard]] std::string ReplicaDigestHex(uint64_t digest);

}  // namespace kvatlas::server
