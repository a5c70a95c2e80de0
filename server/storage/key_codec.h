// Byte-level encodings of kvatlas's persistent records (docs/storage.md §Layout), built on the
// value encodings the command-batch codec shares (server/model/value_codec.h). The byte primitives
// (PutFixed32, PutVarint64, ByteReader, ...) are common/internal/bytes.h, found from this
// namespace. Pure functions and a value-type reader: safe to use from any thread.
//
// Conventions: integers inside keys are big-endian so that RocksDB's bytewise order is the
// numeric order (entry records come out sorted by stamp, then context, holder and tier);
// integers inside values are little-endian fixed width or LEB128 varints; strings are a
// varint byte length followed by the bytes. Decoders are strict: a short read, a value out
// of range, a non-canonical varint or a trailing byte is a failure, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/internal/bytes.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/result.h"
#include "kvatlas/common/status.h"
#include "kvatlas/common/types.h"
#include "server/model/registration.h"
#include "server/model/value_codec.h"

namespace kvatlas::server {

// ---------------------------------------------------------------------------------------
// Record keys. The first byte is the record type.

enum class RecordType : char {
  kMeta = 'M',
  kContext = 'C',
  kHolder = 'H',
  kBlock = 'B',          // versions 1 and 2 only: read by the upgrade
  kVersion3Entry = 'E',  // versions 1 to 3 only: read by the upgrade
  kEntry = 'T',          // version 4: keyed by stamp, in the `entries` column family
  kRegistration = 'R',
  kStreamPosition = 'S',
  kServerAddresses = 'A',
  kDirectory = 'P',   // the placement directory: one record, the key is this byte alone
  kDisowned = 'D',    // a disowned context (DisownContextCommand)
  kHolderWide = 'W',  // a holder's holder-wide command ids (Registry::holder_wide)
  kImporting = 'I',   // a context the group imports in a move (Registry::importing)
};

// Meta record names (the rest of an `M` key).
inline constexpr std::string_view kMetaFormatVersion = "format_version";
inline constexpr std::string_view kMetaHashSeed = "hash_seed";
inline constexpr std::string_view kMetaAppliedIndex = "applied_index";

// The format this build writes (docs/storage.md §Versions). Older databases are upgraded at
// open: version 1 lacks the `R`/`S` records; versions 1 and 2 keep each block's depth and
// stamp in a `B` record of its own, which version 3 folds into the block's `E` records;
// version 4 keys entry records by stamp (`T`) in a column family of their own.
inline constexpr uint32_t kStorageFormatVersion = 4;
inline constexpr uint32_t kOldestStorageFormatVersion = 1;

inline constexpr size_t kContextKeyBytes = 1 + 4;
inline constexpr size_t kHolderKeyBytes = 1 + 4;
inline constexpr size_t kBlockKeyBytes = 1 + 4 + 8;
inline constexpr size_t kEntryKeyBytes = 1 + 8 + 4 + 4 + 1;
inline constexpr size_t kServerAddressesKeyBytes = 1 + 8;

// The encoders append to `out` (callers reuse one buffer per record).
void AppendMetaKey(std::string_view name, std::string* out);
void AppendContextKey(uint32_t context, std::string* out);
void AppendHolderKey(uint32_t holder, std::string* out);
void AppendBlockKey(uint32_t context, BlockKey key, std::string* out);
// `T` + be64 stamp + be32 context + be32 holder + tier (version 4).
void AppendEntryKey(uint64_t stamp, uint32_t context, uint32_t holder, Tier tier, std::string* out);
// `E` + be32 context + be64 block key + be32 holder + tier (versions 1 to 3).
void AppendVersion3EntryKey(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
                            std::string* out);
// `R` + registration key bytes; `S` + stream key bytes (both non-empty strings).
void AppendRegistrationKey(std::string_view registration_key, std::string* out);
void AppendStreamPositionKey(std::string_view stream, std::string* out);
// `A` + be64 raft server id.
void AppendServerAddressesKey(uint64_t server_id, std::string* out);
// `P` alone: the one placement directory record.
void AppendDirectoryKey(std::string* out);
// `D` + context_key (value_codec.h PutContextKey).
void AppendDisownedKey(const ContextKey& context, std::string* out);
void AppendImportingKey(const ContextKey& context, std::string* out);
// `W` + holder_key (value_codec.h PutHolderKey).
void AppendHolderWideKey(const HolderKey& holder, std::string* out);

struct BlockRecordKey {
  uint32_t context = 0;
  BlockKey key = 0;
  friend bool operator==(const BlockRecordKey&, const BlockRecordKey&) = default;
};

struct EntryRecordKey {
  uint64_t stamp = 0;
  uint32_t context = 0;
  uint32_t holder = 0;
  Tier tier = Tier::kGpu;
  friend bool operator==(const EntryRecordKey&, const EntryRecordKey&) = default;
};

struct Version3EntryKey {
  uint32_t context = 0;
  BlockKey key = 0;
  uint32_t holder = 0;
  Tier tier = Tier::kGpu;
  friend bool operator==(const Version3EntryKey&, const Version3EntryKey&) = default;
};

// Key decoders: kCorruption (naming the key) on a wrong type byte, length or tier.
[[nodiscard]] Result<uint32_t> DecodeContextRecordKey(std::string_view key);
[[nodiscard]] Result<uint32_t> DecodeHolderRecordKey(std::string_view key);
[[nodiscard]] Result<BlockRecordKey> DecodeBlockRecordKey(std::string_view key);
[[nodiscard]] Result<EntryRecordKey> DecodeEntryRecordKey(std::string_view key);
[[nodiscard]] Result<Version3EntryKey> DecodeVersion3EntryKey(std::string_view key);
// The name after the type byte of an `R` or `S` key; kCorruption when empty.
[[nodiscard]] Result<std::string_view> DecodeNamedRecordKey(std::string_view key, RecordType type);
[[nodiscard]] Result<uint64_t> DecodeServerAddressesRecordKey(std::string_view key);
// The context of a `D` key; kCorruption for another type, a malformed context or trailing bytes.
// The context of a record keyed by one (`type`: kDisowned, kImporting).
[[nodiscard]] Result<ContextKey> DecodeContextRecordKey(std::string_view key, RecordType type);
// The holder of a `W` key; kCorruption for another type, a malformed holder or trailing bytes.
[[nodiscard]] Result<HolderKey> DecodeHolderWideRecordKey(std::string_view key);

// A readable rendering of any record key, for error messages: "T/stamp=9/ctx=3/holder=7/
// tier=CPU", "M/applied_index", or the type followed by hex bytes when malformed.
std::string DescribeKey(std::string_view key);

// ---------------------------------------------------------------------------------------
// Record values.

struct BlockValue {
  uint32_t depth = 0;
  uint64_t stamp = 0;
  friend bool operator==(const BlockValue&, const BlockValue&) = default;
};

// Version 4: every entry carries its block's depth and key (equal in all the entries of a
// block, which share the stamp), so that a block costs no record of its own.
struct EntryValue {
  uint32_t depth = 0;
  BlockKey key = 0;
  uint32_t refcount = 0;
  uint64_t engine_hash = 0;
  std::string location;
  friend bool operator==(const EntryValue&, const EntryValue&) = default;
};

// Version 3: the block's depth and stamp in front; versions 1 and 2: no block part.
struct Version3EntryValue {
  BlockValue block;
  uint32_t refcount = 0;
  uint64_t engine_hash = 0;
  std::string location;
  friend bool operator==(const Version3EntryValue&, const Version3EntryValue&) = default;
};

// The encoders append to `out`. Decoders return kCorruption with a message naming `key`
// (the record's key, used only for the message) when the value is malformed.
void AppendContextValue(const ContextKey& context, std::string* out);
void AppendHolderValue(const HolderKey& holder, std::string* out);
void AppendBlockValue(uint32_t depth, uint64_t stamp, std::string* out);
void AppendEntryValue(uint32_t depth, BlockKey key, uint32_t refcount, uint64_t engine_hash,
                      std::string_view location, std::string* out);
// Versions 1 to 3 are only read by this build; tests write them to build old databases.
void AppendVersion3EntryValue(const BlockValue& block, uint32_t refcount, uint64_t engine_hash,
                              std::string_view location, std::string* out);
[[nodiscard]] Result<ContextKey> DecodeContextValue(std::string_view key, std::string_view value);
[[nodiscard]] Result<HolderKey> DecodeHolderValue(std::string_view key, std::string_view value);
[[nodiscard]] Result<BlockValue> DecodeBlockValue(std::string_view key, std::string_view value);
[[nodiscard]] Result<EntryValue> DecodeEntryValue(std::string_view key, std::string_view value);
[[nodiscard]] Result<Version3EntryValue> DecodeVersion3EntryValue(std::string_view key,
                                                                  std::string_view value);
// A version 1/2 entry value (no block part; `block` is left zero), for the upgrade.
[[nodiscard]] Result<Version3EntryValue> DecodeVersion2EntryValue(std::string_view key,
                                                                  std::string_view value);
[[nodiscard]] Result<Registration> DecodeRegistrationValue(std::string_view key,
                                                           std::string_view value);
// A stream position value is the fixed64 last applied sequence.
void AppendStreamPositionValue(uint64_t sequence, std::string* out);
[[nodiscard]] Result<uint64_t> DecodeStreamPositionValue(std::string_view key,
                                                         std::string_view value);
// A server addresses value: http_address, rpc_address (length-prefixed).
void AppendServerAddressesValue(const ServerAddresses& addresses, std::string* out);
[[nodiscard]] Result<ServerAddresses> DecodeServerAddressesValue(std::string_view key,
                                                                 std::string_view value);
// The directory record's value: EncodePlacementDirectory's bytes (kvatlas/common/placement.h);
// the decoder's kCorruption names the key.
[[nodiscard]] Result<PlacementDirectory> DecodeDirectoryValue(std::string_view key,
                                                              std::string_view value);
// A disowned context's value: le64 revision, le64 epoch.
void AppendDisownedValue(const DisownedContext& disowned, std::string* out);
[[nodiscard]] Result<DisownedContext> DecodeDisownedValue(std::string_view key,
                                                          std::string_view value);
// An importing context's value: le64 the revision its import started at.
[[nodiscard]] Result<Revision> DecodeImportingValue(std::string_view key, std::string_view value);
// A holder's holder-wide ids (value_codec.h PutHolderWideIds: what a kPutHolderWide
// mutation's `location` holds).
[[nodiscard]] Result<std::vector<uint64_t>> DecodeHolderWideValue(std::string_view key,
                                                                  std::string_view value);
// Meta values are fixed32 (format_version) or fixed64 (hash_seed, applied_index).
[[nodiscard]] Result<uint32_t> DecodeMetaFixed32(std::string_view key, std::string_view value);
[[nodiscard]] Result<uint64_t> DecodeMetaFixed64(std::string_view key, std::string_view value);

}  // namespace kvatlas::server
