#include "server/storage/key_codec.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/bytes_literal.h"

namespace kvatlas::server {
namespace {

std::string BlockKeyBytes(uint32_t context, BlockKey key) {
  std::string out;
  AppendBlockKey(context, key, &out);
  return out;
}

std::string EntryKeyBytes(uint64_t stamp, uint32_t context, uint32_t holder, Tier tier) {
  std::string out;
  AppendEntryKey(stamp, context, holder, tier, &out);
  return out;
}

std::string Version3EntryKeyBytes(uint32_t context, BlockKey key, uint32_t holder, Tier tier) {
  std::string out;
  AppendVersion3EntryKey(context, key, holder, tier, &out);
  return out;
}

using kvatlas::testing::Bytes;

// True when `bytes` is not exactly one valid varint.
bool Varint64Fails(const std::string& bytes) {
  ByteReader in(bytes);
  in.Varint64();
  return !in.Done();
}

// The count read by ByteReader::Count, or nullopt when it fails.
std::optional<uint64_t> CountOf(const std::string& bytes, size_t min_element_bytes) {
  ByteReader in(bytes);
  const uint64_t n = in.Count(min_element_bytes);
  if (!in.ok()) return std::nullopt;
  return n;
}

TEST_SUITE("key_codec") {
  TEST_CASE("KeyCodec: record keys have the documented bytes") {
    std::string k;
    AppendMetaKey(kMetaAppliedIndex, &k);
    CHECK(k == "Mapplied_index");
    k.clear();
    AppendContextKey(0x01020304, &k);
    CHECK(k == Bytes("C\x01\x02\x03\x04"));
    k.clear();
    AppendHolderKey(7, &k);
    CHECK(k == Bytes("H\x00\x00\x00\x07"));
    CHECK(BlockKeyBytes(1, 0x0a0b0c0d0e0f1011ULL) ==
          Bytes("B\x00\x00\x00\x01\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11"));
    CHECK(EntryKeyBytes(0x0102, 2, 0x100, Tier::kShared) ==
          Bytes("T\x00\x00\x00\x00\x00\x00\x01\x02\x00\x00\x00\x02\x00\x00\x01\x00\x03"));
    CHECK(Version3EntryKeyBytes(2, 0xff, 0x100, Tier::kShared) ==
          Bytes("E\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\xff\x00\x00\x01\x00\x03"));
    CHECK(BlockKeyBytes(0, 0).size() == kBlockKeyBytes);
    CHECK(EntryKeyBytes(0, 0, 0, Tier::kGpu).size() == kEntryKeyBytes);
    CHECK(Version3EntryKeyBytes(0, 0, 0, Tier::kGpu).size() == kEntryKeyBytes);
  }

  TEST_CASE("KeyCodec: bytewise key order is numeric (stamp, context, holder, tier) order") {
    std::mt19937_64 rng(11);
    using Tuple = std::tuple<uint64_t, uint32_t, uint32_t, uint8_t>;
    std::vector<Tuple> tuples;
    // Values on both sides of every byte boundary, where a little-endian encoding would
    // sort wrongly.
    const uint64_t edges[] = {0, 1, 0xff, 0x100, 0xffff, 0x10000, 0x80000000ULL, UINT64_MAX};
    for (int i = 0; i < 400; ++i) {
      tuples.emplace_back(
          i % 2 ? rng() : edges[rng() % 8], static_cast<uint32_t>(edges[rng() % 7] + rng() % 2),
          static_cast<uint32_t>(edges[rng() % 7]), static_cast<uint8_t>(rng() % kNumTiers));
    }
    std::vector<std::pair<std::string, Tuple>> encoded;
    for (const Tuple& t : tuples) {
      encoded.emplace_back(EntryKeyBytes(std::get<0>(t), std::get<1>(t), std::get<2>(t),
                                         static_cast<Tier>(std::get<3>(t))),
                           t);
    }
    std::sort(encoded.begin(), encoded.end());
    for (size_t i = 1; i < encoded.size(); ++i) {
      CHECK(encoded[i - 1].second <= encoded[i].second);
    }
    // Block keys likewise, and all block keys of context c precede those of c + 1.
    CHECK(BlockKeyBytes(1, UINT64_MAX) < BlockKeyBytes(2, 0));
    CHECK(BlockKeyBytes(1, 0xff) < BlockKeyBytes(1, 0x100));
  }

  TEST_CASE("KeyCodec: record keys round-trip and reject malformed keys") {
    std::mt19937_64 rng(5);
    for (int i = 0; i < 200; ++i) {
      const auto ctx = static_cast<uint32_t>(rng());
      const uint64_t key = rng();
      const auto holder = static_cast<uint32_t>(rng());
      const auto tier = static_cast<Tier>(rng() % kNumTiers);
      std::string c;
      AppendContextKey(ctx, &c);
      CHECK(DecodeContextRecordKey(c).value() == ctx);
      std::string h;
      AppendHolderKey(holder, &h);
      CHECK(DecodeHolderRecordKey(h).value() == holder);
      CHECK(DecodeBlockRecordKey(BlockKeyBytes(ctx, key)).value() == BlockRecordKey{ctx, key});
      CHECK(DecodeEntryRecordKey(EntryKeyBytes(key, ctx, holder, tier)).value() ==
            EntryRecordKey{key, ctx, holder, tier});
      CHECK(DecodeVersion3EntryKey(Version3EntryKeyBytes(ctx, key, holder, tier)).value() ==
            Version3EntryKey{ctx, key, holder, tier});
    }
    // Same length, other type byte: neither layout reads the other's keys.
    CHECK(DecodeEntryRecordKey(Version3EntryKeyBytes(1, 2, 3, Tier::kCpu)).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeVersion3EntryKey(EntryKeyBytes(1, 2, 3, Tier::kCpu)).error().code() ==
          StatusCode::kCorruption);
    std::string entry = EntryKeyBytes(1, 2, 3, Tier::kCpu);
    CHECK(DecodeEntryRecordKey(entry.substr(0, entry.size() - 1)).error().code() ==
          StatusCode::kCorruption);
    entry.back() = kNumTiers;
    Result<EntryRecordKey> bad_tier = DecodeEntryRecordKey(entry);
    REQUIRE_FALSE(bad_tier.has_value());
    CHECK(bad_tier.error().code() == StatusCode::kCorruption);
    CHECK(bad_tier.error().message().find("tier=4") != std::string::npos);
    CHECK(DecodeBlockRecordKey(entry).error().code() == StatusCode::kCorruption);  // wrong type
    CHECK(DecodeContextRecordKey("").error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("KeyCodec: DescribeKey names every record readably") {
    std::string meta;
    AppendMetaKey(kMetaHashSeed, &meta);
    CHECK(DescribeKey(meta) == "M/hash_seed");
    std::string ctx;
    AppendContextKey(12, &ctx);
    CHECK(DescribeKey(ctx) == "C/ctx=12");
    CHECK(DescribeKey(EntryKeyBytes(9, 3, 7, Tier::kCpu)) == "T/stamp=9/ctx=3/holder=7/tier=CPU");
    CHECK(DescribeKey(Version3EntryKeyBytes(3, 0xab, 7, Tier::kCpu)) ==
          "E/ctx=3/key=0x00000000000000ab/holder=7/tier=CPU");
    CHECK(DescribeKey(BlockKeyBytes(3, 0xab)) == "B/ctx=3/key=0x00000000000000ab");
    CHECK(DescribeKey(Bytes("B\x01\x02")) == "B/raw=0x0102");
    CHECK(DescribeKey("") == "<empty key>");
  }

  TEST_CASE("KeyCodec: record values round-trip with random content") {
    std::mt19937_64 rng(3);
    auto random_string = [&](size_t max) {
      std::string s(rng() % (max + 1), '\0');
      for (char& ch : s) ch = static_cast<char>(rng());
      return s;
    };
    for (int i = 0; i < 200; ++i) {
      ContextKey context{random_string(10), random_string(300), random_string(5),
                         static_cast<uint32_t>(rng()), random_string(4)};
      std::string v;
      AppendContextValue(context, &v);
      CHECK(DecodeContextValue("k", v).value() == context);

      HolderKey holder{random_string(200), static_cast<uint32_t>(rng() >> (rng() % 32))};
      v.clear();
      AppendHolderValue(holder, &v);
      CHECK(DecodeHolderValue("k", v).value() == holder);

      BlockValue block{static_cast<uint32_t>(rng()), rng()};
      v.clear();
      AppendBlockValue(block.depth, block.stamp, &v);
      CHECK(v.size() == 12);
      CHECK(DecodeBlockValue("k", v).value() == block);

      EntryValue entry{static_cast<uint32_t>(rng()), rng(), static_cast<uint32_t>(rng()), rng(),
                       random_string(200)};
      v.clear();
      AppendEntryValue(entry.depth, entry.key, entry.refcount, entry.engine_hash, entry.location,
                       &v);
      CHECK(DecodeEntryValue("k", v).value() == entry);

      Version3EntryValue old{block, static_cast<uint32_t>(rng()), rng(), random_string(200)};
      v.clear();
      AppendVersion3EntryValue(old.block, old.refcount, old.engine_hash, old.location, &v);
      CHECK(DecodeVersion3EntryValue("k", v).value() == old);
    }
  }

  TEST_CASE("KeyCodec: values have the documented bytes") {
    std::string v;
    AppendBlockValue(2, 0x0102030405060708ULL, &v);
    CHECK(v == Bytes("\x02\x00\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01"));
    v.clear();
    AppendEntryValue(2, 0x0102030405060708ULL, 1, 0xff, "s3://b", &v);
    CHECK(v == Bytes("\x02\x00\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01"
                     "\x01\x00\x00\x00\xff\x00\x00\x00\x00\x00\x00\x00\x06s3://b"));
    // The version 3 entry value (read only by the upgrade): the stamp where version 4 has
    // the block key, so the same bytes.
    CHECK(DecodeVersion3EntryValue("k", v).value() ==
          Version3EntryValue{{2, 0x0102030405060708ULL}, 1, 0xff, "s3://b"});
    // The version 2 entry value: no block part.
    const std::string v2 = Bytes("\x01\x00\x00\x00\xff\x00\x00\x00\x00\x00\x00\x00\x06s3://b");
    CHECK(DecodeVersion2EntryValue("k", v2).value() == Version3EntryValue{{}, 1, 0xff, "s3://b"});
    CHECK(DecodeVersion2EntryValue("k", v).error().code() == StatusCode::kCorruption);
    CHECK(DecodeEntryValue("k", v2).error().code() == StatusCode::kCorruption);
    v.clear();
    AppendContextValue(ContextKey{"t", "m", "l", 300, "s"}, &v);
    CHECK(v == Bytes("\x01t\x01m\x01l\xac\x02\x01s"));
    v.clear();
    AppendHolderValue(HolderKey{"id", 1}, &v);
    CHECK(v == Bytes("\x02id\x01"));
  }

  TEST_CASE("KeyCodec: server addresses records have the documented bytes") {
    std::string key;
    AppendServerAddressesKey(0x0102, &key);
    CHECK(key == Bytes("A\x00\x00\x00\x00\x00\x00\x01\x02"));
    CHECK(DecodeServerAddressesRecordKey(key).value() == 0x0102);
    CHECK(DescribeKey(key) == "A/server=258");
    CHECK(DecodeServerAddressesRecordKey(key + "x").error().code() == StatusCode::kCorruption);
    CHECK(DecodeServerAddressesRecordKey(Bytes("C\0\0\0\0\0\0\0\x01")).error().code() ==
          StatusCode::kCorruption);
    std::string v;
    AppendServerAddressesValue(ServerAddresses{"h:1", "r:2"}, &v);
    CHECK(v == Bytes("\x03h:1\x03r:2"));
    CHECK(DecodeServerAddressesValue(key, v).value() == ServerAddresses{"h:1", "r:2"});
    Result<ServerAddresses> bad = DecodeServerAddressesValue(key, v + "x");
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().message().find("A/server=258") != std::string::npos);
    CHECK(DecodeServerAddressesValue(key, Bytes("\x03h:1")).error().code() ==
          StatusCode::kCorruption);
    // A draining server's record ends with 0x01 (a record without it: not draining).
    std::string drained;
    AppendServerAddressesValue(ServerAddresses{"h:1", "r:2", true}, &drained);
    CHECK(drained == v + Bytes("\x01"));
    CHECK(DecodeServerAddressesValue(key, drained).value() == ServerAddresses{"h:1", "r:2", true});
    CHECK(DecodeServerAddressesValue(key, v + Bytes("\x00")).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeServerAddressesValue(key, drained + Bytes("\x01")).error().code() ==
          StatusCode::kCorruption);
  }

  TEST_CASE("KeyCodec: the directory and disowned context records have the documented bytes") {
    std::string dir_key;
    AppendDirectoryKey(&dir_key);
    CHECK(dir_key == "P");
    CHECK(DescribeKey(dir_key) == "P/directory");
    PlacementDirectory dir;
    REQUIRE(dir.AddGroup({2, {}, true}).ok());
    REQUIRE(dir.Assign(ContextKey{"t", "m", "", 16, ""}, 2).ok());
    CHECK(DecodeDirectoryValue(dir_key, EncodePlacementDirectory(dir)).value() == dir);
    Result<PlacementDirectory> bad_dir =
        DecodeDirectoryValue(dir_key, EncodePlacementDirectory(dir) + "x");
    REQUIRE_FALSE(bad_dir.has_value());
    CHECK(bad_dir.error().code() == StatusCode::kCorruption);
    CHECK(bad_dir.error().message().find("P/directory") != std::string::npos);

    const ContextKey context{"t", "m", "", 16, ""};
    std::string key;
    AppendDisownedKey(context, &key);
    CHECK(key == Bytes("D\x01t\x01m\x00\x10\x00"));
    CHECK(DecodeContextRecordKey(key, RecordType::kDisowned).value() == context);
    CHECK(DescribeKey(key) == "D/" + context.ToString());
    CHECK(DecodeContextRecordKey(key + "x", RecordType::kDisowned).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeContextRecordKey(key.substr(0, key.size() - 1), RecordType::kDisowned)
              .error()
              .code() == StatusCode::kCorruption);
    CHECK(DecodeContextRecordKey("P" + key.substr(1), RecordType::kDisowned).error().code() ==
          StatusCode::kCorruption);
    std::string v;
    AppendDisownedValue(DisownedContext{0x0102, 7}, &v);
    CHECK(v == Bytes("\x02\x01\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00"));
    CHECK(DecodeDisownedValue(key, v).value() == DisownedContext{0x0102, 7});
    CHECK(DecodeDisownedValue(key, v + "x").error().code() == StatusCode::kCorruption);
    CHECK(DecodeDisownedValue(key, v.substr(0, 15)).error().code() == StatusCode::kCorruption);
    // An importing context's record: the same key after its own byte, le64 revision.
    std::string importing;
    AppendImportingKey(context, &importing);
    CHECK(importing == "I" + key.substr(1));
    CHECK(DecodeContextRecordKey(importing, RecordType::kImporting).value() == context);
    CHECK(DescribeKey(importing) == "I/" + context.ToString());
    CHECK(DecodeContextRecordKey(importing, RecordType::kDisowned).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeImportingValue(importing, v.substr(0, 8)).value() == 0x0102);
    CHECK(DecodeImportingValue(importing, v).error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("KeyCodec: a placed stream's position key keeps any byte") {
    // 'S' + the stream key as it is: the 0x1f separator and the context's bytes (NULs
    // included) come back whole.
    const std::string placed = PlacedStreamKey("a|default|0", ContextKey{"t\x1f", "m", "", 0, ""});
    std::string key;
    AppendStreamPositionKey(placed, &key);
    CHECK(key == "S" + placed);
    CHECK(DecodeNamedRecordKey(key, RecordType::kStreamPosition).value() == placed);
  }

  TEST_CASE("KeyCodec: truncated or padded values are kCorruption naming the key") {
    std::string key = EntryKeyBytes(0x1234, 9, 5, Tier::kDisk);
    std::string v;
    AppendEntryValue(7, 8, 3, 4, "loc", &v);
    for (size_t n = 0; n < v.size(); ++n) {
      Result<EntryValue> r = DecodeEntryValue(key, std::string_view(v).substr(0, n));
      REQUIRE_FALSE(r.has_value());
      CHECK(r.error().code() == StatusCode::kCorruption);
      CHECK(r.error().message().find("T/stamp=4660/ctx=9/holder=5/tier=DISK") != std::string::npos);
    }
    CHECK(DecodeEntryValue(key, v + "x").error().code() == StatusCode::kCorruption);
    CHECK(DecodeBlockValue(key, std::string(11, '\0')).error().code() == StatusCode::kCorruption);
    CHECK(DecodeBlockValue(key, std::string(13, '\0')).error().code() == StatusCode::kCorruption);
    CHECK(DecodeMetaFixed64(key, std::string(4, '\0')).error().code() == StatusCode::kCorruption);
    CHECK(DecodeMetaFixed32(key, std::string(8, '\0')).error().code() == StatusCode::kCorruption);
    // A string length beyond the value.
    CHECK(DecodeHolderValue(key, Bytes("\x05id\x01")).error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("ByteReader: varints are canonical and bounded") {
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                       uint64_t{UINT32_MAX}, uint64_t{UINT32_MAX} + 1, UINT64_MAX}) {
      std::string s;
      PutVarint64(&s, v);
      ByteReader in(s);
      CHECK(in.Varint64() == v);
      CHECK(in.Done());
    }
    CHECK(Varint64Fails(Bytes("\x80\x00")));                                        // overlong zero
    CHECK(Varint64Fails(Bytes("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02")));        // > 64 bits
    CHECK(Varint64Fails(Bytes("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x81\x01")));    // 11 bytes
    CHECK(Varint64Fails(Bytes("\x80\x80")));                                        // unterminated
    CHECK_FALSE(Varint64Fails(Bytes("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")));  // 2^64-1

    std::string too_big;
    PutVarint64(&too_big, uint64_t{UINT32_MAX} + 1);
    ByteReader in(too_big);
    in.Varint32();
    CHECK_FALSE(in.ok());
  }

  TEST_CASE("ByteReader: failure is sticky and counts are checked against the input") {
    const std::string two = Bytes("\x01\x02");
    ByteReader in(two);
    CHECK(in.Fixed32() == 0);
    CHECK_FALSE(in.ok());
    CHECK(in.U8() == 0);  // the two bytes are not read after a failure
    CHECK_FALSE(in.Done());

    CHECK(CountOf(Bytes("\x03xyz"), 1) == 3);
    CHECK_FALSE(CountOf(Bytes("\x04xyz"), 1).has_value());
    CHECK_FALSE(CountOf(Bytes("\x01uvwxyz_"), 8).has_value());  // a fixed64 needs 8, 7 remain
  }
}

}  // namespace
}  // namespace kvatlas::server
