#include "server/storage/key_codec.h"

#include <cstdio>
#include <utility>

namespace kvatlas::server {
namespace {

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    auto b = static_cast<uint8_t>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

std::string Hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Reads the fixed-layout part of a record key after checking its type byte and length.
Result<ByteReader> OpenKey(std::string_view key, RecordType type, size_t size) {
  if (key.size() != size || key[0] != static_cast<char>(type)) {
    return Status::Corruption("malformed record key " + DescribeKey(key));
  }
  return ByteReader(key.substr(1));
}

Status BadValue(std::string_view key, std::string_view what) {
  return Status::Corruption("record " + DescribeKey(key) + ": malformed " + std::string(what) +
                            " value");
}

// Decodes a whole value with `read`, which consumes a ByteReader; a value that does not
// decode to its last byte is kCorruption naming the key.
template <typename F>
auto DecodeValue(std::string_view key, std::string_view value, std::string_view what, F read)
    -> Result<decltype(read(std::declval<ByteReader*>()))> {
  ByteReader in(value);
  auto decoded = read(&in);
  if (!in.Done()) return BadValue(key, what);
  return decoded;
}

}  // namespace

// --- record keys ------------------------------------------------------------------------

void AppendMetaKey(std::string_view name, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kMeta));
  out->append(name);
}

void AppendContextKey(uint32_t context, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kContext));
  PutBigEndian32(out, context);
}

void AppendHolderKey(uint32_t holder, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kHolder));
  PutBigEndian32(out, holder);
}

void AppendBlockKey(uint32_t context, BlockKey key, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kBlock));
  PutBigEndian32(out, context);
  PutBigEndian64(out, key);
}

void AppendEntryKey(uint64_t stamp, uint32_t context, uint32_t holder, Tier tier,
                    std::string* out) {
  out->push_back(static_cast<char>(RecordType::kEntry));
  PutBigEndian64(out, stamp);
  PutBigEndian32(out, context);
  PutBigEndian32(out, holder);
  PutTier(out, tier);
}

void AppendVersion3EntryKey(uint32_t context, BlockKey key, uint32_t holder, Tier tier,
                            std::string* out) {
  out->push_back(static_cast<char>(RecordType::kVersion3Entry));
  PutBigEndian32(out, context);
  PutBigEndian64(out, key);
  PutBigEndian32(out, holder);
  PutTier(out, tier);
}

void AppendRegistrationKey(std::string_view registration_key, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kRegistration));
  out->append(registration_key);
}

void AppendStreamPositionKey(std::string_view stream, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kStreamPosition));
  out->append(stream);
}

void AppendServerAddressesKey(uint64_t server_id, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kServerAddresses));
  PutBigEndian64(out, server_id);
}

void AppendDirectoryKey(std::string* out) {
  out->push_back(static_cast<char>(RecordType::kDirectory));
}

void AppendDisownedKey(const ContextKey& context, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kDisowned));
  PutContextKey(out, context);
}

void AppendImportingKey(const ContextKey& context, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kImporting));
  PutContextKey(out, context);
}

void AppendHolderWideKey(const HolderKey& holder, std::string* out) {
  out->push_back(static_cast<char>(RecordType::kHolderWide));
  PutHolderKey(out, holder);
}

Result<HolderKey> DecodeHolderWideRecordKey(std::string_view key) {
  if (key.empty() || key[0] != static_cast<char>(RecordType::kHolderWide)) {
    return Status::Corruption("malformed record key " + DescribeKey(key));
  }
  ByteReader in(key.substr(1));
  HolderKey holder = ReadHolderKey(&in);
  if (!in.Done()) return Status::Corruption("malformed record key " + DescribeKey(key));
  return holder;
}

Result<ContextKey> DecodeContextRecordKey(std::string_view key, RecordType type) {
  if (key.empty() || key[0] != static_cast<char>(type)) {
    return Status::Corruption("malformed record key " + DescribeKey(key));
  }
  ByteReader in(key.substr(1));
  ContextKey context = ReadContextKey(&in);
  if (!in.Done()) return Status::Corruption("malformed record key " + DescribeKey(key));
  return context;
}

Result<uint64_t> DecodeServerAddressesRecordKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in,
                           OpenKey(key, RecordType::kServerAddresses, kServerAddressesKeyBytes));
  return in.BigEndian64();
}

Result<std::string_view> DecodeNamedRecordKey(std::string_view key, RecordType type) {
  if (key.size() < 2 || key[0] != static_cast<char>(type)) {
    return Status::Corruption("malformed record key " + DescribeKey(key));
  }
  return key.substr(1);
}

Result<uint32_t> DecodeContextRecordKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in, OpenKey(key, RecordType::kContext, kContextKeyBytes));
  return in.BigEndian32();
}

Result<uint32_t> DecodeHolderRecordKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in, OpenKey(key, RecordType::kHolder, kHolderKeyBytes));
  return in.BigEndian32();
}

Result<BlockRecordKey> DecodeBlockRecordKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in, OpenKey(key, RecordType::kBlock, kBlockKeyBytes));
  BlockRecordKey out;
  out.context = in.BigEndian32();
  out.key = in.BigEndian64();
  return out;
}

Result<EntryRecordKey> DecodeEntryRecordKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in, OpenKey(key, RecordType::kEntry, kEntryKeyBytes));
  EntryRecordKey out;
  out.stamp = in.BigEndian64();
  out.context = in.BigEndian32();
  out.holder = in.BigEndian32();
  out.tier = ReadTier(&in);
  if (!in.Done()) return Status::Corruption("malformed record key " + DescribeKey(key));
  return out;
}

Result<Version3EntryKey> DecodeVersion3EntryKey(std::string_view key) {
  KVATLAS_ASSIGN_OR_RETURN(ByteReader in, OpenKey(key, RecordType::kVersion3Entry, kEntryKeyBytes));
  Version3EntryKey out;
  out.context = in.BigEndian32();
  out.key = in.BigEndian64();
  out.holder = in.BigEndian32();
  out.tier = ReadTier(&in);
  if (!in.Done()) return Status::Corruption("malformed record key " + DescribeKey(key));
  return out;
}

std::string DescribeKey(std::string_view key) {
  if (key.empty()) return "<empty key>";
  const auto type = static_cast<RecordType>(key[0]);
  ByteReader in(key.substr(1));
  std::string out(1, key[0]);
  switch (type) {
    case RecordType::kMeta: {
      std::string_view name = key.substr(1);
      bool printable = true;
      for (char c : name) printable = printable && c >= 0x20 && c < 0x7f;
      if (!printable) break;
      return out + "/" + std::string(name);
    }
    case RecordType::kRegistration:
    case RecordType::kStreamPosition:
      return out + "/" + std::string(key.substr(1));
    case RecordType::kDirectory:
      if (key.size() != 1) break;
      return out + "/directory";
    case RecordType::kDisowned:
    case RecordType::kImporting: {
      ContextKey context = ReadContextKey(&in);
      if (!in.Done()) break;
      return out + "/" + context.ToString();
    }
    case RecordType::kHolderWide: {
      HolderKey holder = ReadHolderKey(&in);
      if (!in.Done()) break;
      return out + "/" + holder.ToString();
    }
    case RecordType::kServerAddresses:
      if (key.size() != kServerAddressesKeyBytes) break;
      return out + "/server=" + std::to_string(in.BigEndian64());
    case RecordType::kContext:
    case RecordType::kHolder:
      if (key.size() != kContextKeyBytes) break;
      return out + (type == RecordType::kContext ? "/ctx=" : "/holder=") +
             std::to_string(in.BigEndian32());
    case RecordType::kBlock:
    case RecordType::kVersion3Entry:
    case RecordType::kEntry: {
      if (key.size() != (type == RecordType::kBlock ? kBlockKeyBytes : kEntryKeyBytes)) break;
      if (type == RecordType::kEntry) {
        out += "/stamp=" + std::to_string(in.BigEndian64());
        out += "/ctx=" + std::to_string(in.BigEndian32());
      } else {
        out += "/ctx=" + std::to_string(in.BigEndian32());
        out += "/key=" + Hex64(in.BigEndian64());
        if (type == RecordType::kBlock) return out;
      }
      out += "/holder=" + std::to_string(in.BigEndian32());
      uint8_t tier = in.U8();
      return out + "/tier=" +
             (tier < kNumTiers ? std::string(TierName(static_cast<Tier>(tier)))
                               : std::to_string(tier));
    }
  }
  return out + "/raw=0x" + Hex(key.substr(1));
}

// --- record values ----------------------------------------------------------------------

void AppendContextValue(const ContextKey& context, std::string* out) {
  PutContextKey(out, context);
}

void AppendHolderValue(const HolderKey& holder, std::string* out) { PutHolderKey(out, holder); }

void AppendBlockValue(uint32_t depth, uint64_t stamp, std::string* out) {
  PutFixed32(out, depth);
  PutFixed64(out, stamp);
}

void AppendEntryValue(uint32_t depth, BlockKey key, uint32_t refcount, uint64_t engine_hash,
                      std::string_view location, std::string* out) {
  PutFixed32(out, depth);
  PutFixed64(out, key);
  PutFixed32(out, refcount);
  PutFixed64(out, engine_hash);
  PutLengthPrefixed(out, location);
}

void AppendVersion3EntryValue(const BlockValue& block, uint32_t refcount, uint64_t engine_hash,
                              std::string_view location, std::string* out) {
  AppendBlockValue(block.depth, block.stamp, out);
  PutFixed32(out, refcount);
  PutFixed64(out, engine_hash);
  PutLengthPrefixed(out, location);
}

Result<ContextKey> DecodeContextValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "context", ReadContextKey);
}

Result<HolderKey> DecodeHolderValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "holder", ReadHolderKey);
}

Result<BlockValue> DecodeBlockValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "block", [](ByteReader* in) {
    BlockValue v;
    v.depth = in->Fixed32();
    v.stamp = in->Fixed64();
    return v;
  });
}

Result<EntryValue> DecodeEntryValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "entry", [](ByteReader* in) {
    EntryValue v;
    v.depth = in->Fixed32();
    v.key = in->Fixed64();
    v.refcount = in->Fixed32();
    v.engine_hash = in->Fixed64();
    v.location = in->LengthPrefixed();
    return v;
  });
}

Result<Version3EntryValue> DecodeVersion3EntryValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "version 3 entry", [](ByteReader* in) {
    Version3EntryValue v;
    v.block.depth = in->Fixed32();
    v.block.stamp = in->Fixed64();
    v.refcount = in->Fixed32();
    v.engine_hash = in->Fixed64();
    v.location = in->LengthPrefixed();
    return v;
  });
}

Result<Version3EntryValue> DecodeVersion2EntryValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "version 2 entry", [](ByteReader* in) {
    Version3EntryValue v;
    v.refcount = in->Fixed32();
    v.engine_hash = in->Fixed64();
    v.location = in->LengthPrefixed();
    return v;
  });
}

Result<Registration> DecodeRegistrationValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "registration", ReadRegistration);
}

void AppendStreamPositionValue(uint64_t sequence, std::string* out) { PutFixed64(out, sequence); }

Result<uint64_t> DecodeStreamPositionValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "stream position", [](ByteReader* in) { return in->Fixed64(); });
}

void AppendServerAddressesValue(const ServerAddresses& addresses, std::string* out) {
  PutLengthPrefixed(out, addresses.http_address);
  PutLengthPrefixed(out, addresses.rpc_address);
  // Only while draining: a record written before drains existed is a server not draining.
  if (addresses.draining) out->push_back(1);
}

Result<ServerAddresses> DecodeServerAddressesValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "server addresses", [](ByteReader* in) {
    ServerAddresses a;
    a.http_address = std::string(in->LengthPrefixed());
    a.rpc_address = std::string(in->LengthPrefixed());
    if (in->remaining() > 0) {
      a.draining = true;
      if (in->U8() != 1) in->Fail();  // one encoding per record
    }
    return a;
  });
}

Result<PlacementDirectory> DecodeDirectoryValue(std::string_view key, std::string_view value) {
  Result<PlacementDirectory> dir = DecodePlacementDirectory(value);
  if (!dir.has_value()) return dir.status().WithContext("record " + DescribeKey(key));
  return dir;
}

void AppendDisownedValue(const DisownedContext& disowned, std::string* out) {
  PutFixed64(out, disowned.revision);
  PutFixed64(out, disowned.epoch);
}

Result<DisownedContext> DecodeDisownedValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "disowned context", [](ByteReader* in) {
    DisownedContext d;
    d.revision = in->Fixed64();
    d.epoch = in->Fixed64();
    return d;
  });
}

Result<Revision> DecodeImportingValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "importing context", [](ByteReader* in) { return in->Fixed64(); });
}

Result<std::vector<uint64_t>> DecodeHolderWideValue(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "holder-wide ids", ReadHolderWideIds);
}

Result<uint32_t> DecodeMetaFixed32(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "meta", [](ByteReader* in) { return in->Fixed32(); });
}

Result<uint64_t> DecodeMetaFixed64(std::string_view key, std::string_view value) {
  return DecodeValue(key, value, "meta", [](ByteReader* in) { return in->Fixed64(); });
}

}  // namespace kvatlas::server
