// Mutation: one change to the persistent map, as decided by the Index while applying a
// command. Storage mirrors mutations into RocksDB; the change feed (later) publishes them.
// A Put carries the full new value of its record, so a consumer never needs to read first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvatlas/common/feed.h"
#include "kvatlas/common/types.h"
#include "server/model/registration.h"

namespace kvatlas::server {

enum class MutationKind : uint8_t {
  kPutContext = 1,   // context, context_key
  kPutHolder = 2,    // holder, holder_key
  kPutBlock = 3,     // context, key, depth, stamp
  kDeleteBlock = 4,  // context, key
  kPutEntry = 5,     // context, key, holder, tier, depth, stamp, refcount, engine_hash, location
  kDeleteEntry = 6,  // context, key, holder, tier, stamp
  // Registry records (registration.h); `location` holds the record's name.
  kPutRegistration = 7,         // location = registration key, registration
  kDeleteRegistration = 8,      // location = registration key
  kPutStreamPosition = 9,       // location = stream key, stamp = last applied sequence
  kDeleteStreamPosition = 10,   // location = stream key
  kPutServerAddresses = 11,     // stamp = raft server id, server_addresses
  kDeleteServerAddresses = 12,  // stamp = raft server id
  // Not stored (soft state): what an applied PredictCommand recorded in the PredictedTable,
  // for the change feed's predicted records (docs/feed.md). `predicted` holds it.
  kPredicted = 13,
  // Registry records of the placement (PlaceContextCommand, SetGroupAcceptingCommand,
  // DisownContextCommand; docs/storage.md §Layout).
  kPutDirectory = 14,  // location = the whole directory's EncodePlacementDirectory bytes
  kPutDisowned = 15,   // context_key = the disowned context, stamp = revision, key = epoch
  // holder_key = the holder, location = its holder-wide ids (Registry::holder_wide), each
  // a fixed64, oldest first.
  kPutHolderWide = 16,
  // context_key = a context the group imports (Registry::importing), stamp = the revision
  // its import started at; its end (ImportContextCommand, DropContextCommand).
  kPutImporting = 17,
  kDeleteImporting = 18,  // context_key
};

// Why a record went away (or came), for metrics and the change feed.
// kExpired: dropped by an ExpireHolderCommand (the holder's lease ran out, docs/leases.md).
enum class MutationCause : uint8_t {
  kStored = 0,
  kRemoved = 1,
  kCleared = 2,
  kEvicted = 3,
  kExpired = 4,
};

struct Mutation {
  MutationKind kind = MutationKind::kPutEntry;
  MutationCause cause = MutationCause::kStored;
  uint32_t context = 0;  // interned context id
  uint32_t holder = 0;   // interned holder id
  BlockKey key = 0;
  Tier tier = Tier::kGpu;
  uint32_t depth = 0;
  uint64_t stamp = 0;  // block creation order (index-wide; a context's eviction order)
  uint32_t refcount = 0;
  uint64_t engine_hash = 0;
  std::string location;
  // kPutContext / kPutHolder / kPutDisowned / kPutHolderWide / k*Importing only (null
  // otherwise): the records are rare, and
  // keeping five strings out of every Mutation halves the size of the list one apply group writes.
  std::shared_ptr<const ContextKey> context_key;
  std::shared_ptr<const HolderKey> holder_key;
  std::shared_ptr<const Registration> registration;         // kPutRegistration only
  std::shared_ptr<const ServerAddresses> server_addresses;  // kPutServerAddresses only
  // kPredicted only: the record to publish (its revision is set by the feed).
  std::shared_ptr<const FeedRecord> predicted;
};

using MutationList = std::vector<Mutation>;

}  // namespace kvatlas::server
