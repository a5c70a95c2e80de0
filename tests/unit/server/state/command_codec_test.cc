#include "server/model/command_codec.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>

#include "tests/support/bytes_literal.h"

namespace kvatlas::server {
namespace {

using Rng = std::mt19937_64;

std::string RandomString(Rng& rng, size_t max_len) {
  std::string s(rng() % (max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);  // any byte, NUL included
  return s;
}

// Integers that exercise every varint length and the edges.
uint64_t RandomInt(Rng& rng) {
  switch (rng() % 4) {
    case 0:
      return rng() % 128;
    case 1:
      return UINT64_MAX - rng() % 3;
    default:
      return rng() >> (rng() % 64);
  }
}

using kvatlas::testing::Bytes;

Tier RandomTier(Rng& rng) { return static_cast<Tier>(rng() % kNumTiers); }

ContextKey RandomContext(Rng& rng) {
  return {RandomString(rng, 12), RandomString(rng, 40), RandomString(rng, 8),
          static_cast<uint32_t>(RandomInt(rng)), RandomString(rng, 6)};
}

HolderKey RandomHolder(Rng& rng) {
  return {RandomString(rng, 20), static_cast<uint32_t>(RandomInt(rng))};
}

std::vector<uint64_t> RandomInts(Rng& rng, size_t max_len) {
  std::vector<uint64_t> v(rng() % (max_len + 1));
  for (uint64_t& x : v) x = RandomInt(rng);
  return v;
}

StoreCommand RandomStore(Rng& rng) {
  StoreCommand c;
  c.context = RandomContext(rng);
  c.holder = RandomHolder(rng);
  c.tier = RandomTier(rng);
  c.mode = static_cast<KeyMode>(rng() % 3);
  c.report = rng() % 4 == 0;
  if (rng() % 2) c.parent = RandomInt(rng);
  if (rng() % 2) c.base_depth = static_cast<uint32_t>(RandomInt(rng));
  c.hashes = RandomInts(rng, 20);
  if (rng() % 2) c.engine_hashes = RandomInts(rng, 20);
  if (rng() % 2) {
    c.locations.resize(rng() % 5);
    for (std::string& l : c.locations) l = RandomString(rng, 30);
  }
  return c;
}

RemoveCommand RandomRemove(Rng& rng) {
  RemoveCommand c;
  c.context = RandomContext(rng);
  c.holder = RandomHolder(rng);
  if (rng() % 2) c.tier = RandomTier(rng);
  c.hashes = RandomInts(rng, 20);
  return c;
}

ClearCommand RandomClear(Rng& rng) {
  ClearCommand c;
  c.holder = RandomHolder(rng);
  if (rng() % 2) c.context = RandomContext(rng);
  if (rng() % 2) c.tier = RandomTier(rng);
  if (rng() % 2) c.fanout = RandomInt(rng);
  return c;
}

RegisterCommand RandomRegister(Rng& rng) {
  RegisterCommand c;
  Registration& r = c.registration;
  r.endpoint = RandomString(rng, 20);
  r.replay_endpoint = RandomString(rng, 20);
  r.type = static_cast<EngineType>(rng() % 3);
  r.model = RandomString(rng, 10);
  r.lora_name = RandomString(rng, 5);
  r.tenant_id = RandomString(rng, 5);
  r.instance_id = RandomString(rng, 10);
  r.block_size = static_cast<uint32_t>(RandomInt(rng));
  r.dp_rank = static_cast<uint32_t>(RandomInt(rng));
  r.additional_salt = RandomString(rng, 5);
  r.topic = RandomString(rng, 5);
  return c;
}

ReplaceCopiesCommand RandomReplace(Rng& rng) {
  ReplaceCopiesCommand c;
  c.context = RandomContext(rng);
  c.blocks.resize(rng() % 4);
  for (MovedBlock& block : c.blocks) {
    block.key = RandomInt(rng);
    block.depth = static_cast<uint32_t>(RandomInt(rng));
    block.anew = rng() % 2 == 0;
    block.copies.resize(rng() % 3);
    for (HeldCopy& copy : block.copies) {
      copy = {RandomHolder(rng), RandomTier(rng), static_cast<uint32_t>(1 + rng() % 70'000),
              RandomInt(rng), rng() % 2 ? RandomString(rng, 20) : ""};
    }
  }
  return c;
}

CommandBatch RandomBatch(Rng& rng, size_t max_commands) {
  CommandBatch batch;
  const size_t n = rng() % (max_commands + 1);
  if (rng() % 3 == 0) {
    batch.position = StreamPosition{RandomString(rng, 12), RandomInt(rng), rng() % 2 == 0};
  }
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 17) {
      case 16:
        batch.commands.emplace_back(FenceContextCommand{RandomContext(rng), RandomInt(rng)});
        break;
      case 15:
        batch.commands.emplace_back(ImportContextCommand{RandomContext(rng)});
        break;
      case 14:
        batch.commands.emplace_back(DropContextCommand{RandomContext(rng)});
        break;
      case 13:
        batch.commands.emplace_back(RandomReplace(rng));
        break;
      case 12: {
        std::vector<uint64_t> members;
        for (uint64_t id = 1 + rng() % 3; members.size() < 1 + rng() % kMaxGroupMembers;
             id += 1 + rng() % 1'000) {
          members.push_back(id);
        }
        batch.commands.emplace_back(
            SetGroupMembersCommand{static_cast<GroupId>(1 + rng() % kMaxGroupId), members});
        break;
      }
      case 9:
        batch.commands.emplace_back(
            PlaceContextCommand{RandomContext(rng), static_cast<GroupId>(1 + rng() % kMaxGroupId)});
        break;
      case 10:
        batch.commands.emplace_back(SetGroupAcceptingCommand{
            static_cast<GroupId>(1 + rng() % kMaxGroupId), rng() % 2 == 0});
        break;
      case 11:
        batch.commands.emplace_back(DisownContextCommand{RandomContext(rng), RandomInt(rng)});
        break;
      case 8:
        batch.commands.emplace_back(
            AuditCommand{RandomInt(rng), RandomInt(rng), static_cast<uint32_t>(1 + rng() % 3)});
        break;
      case 7:
        batch.commands.emplace_back(ExpireHolderCommand{RandomHolder(rng), RandomInt(rng)});
        break;
      case 5:
        batch.commands.emplace_back(
            AnnounceCommand{RandomInt(rng), RandomString(rng, 20), RandomString(rng, 20)});
        break;
      case 6:
        batch.commands.emplace_back(ForgetServerCommand{RandomInt(rng)});
        break;
      case 3:
        batch.commands.emplace_back(RandomRegister(rng));
        break;
      case 4:
        batch.commands.emplace_back(UnregisterCommand{RandomString(rng, 10), RandomString(rng, 5),
                                                      static_cast<uint32_t>(RandomInt(rng))});
        break;
      case 0:
        batch.commands.emplace_back(RandomStore(rng));
        break;
      case 1:
        batch.commands.emplace_back(RandomRemove(rng));
        break;
      default:
        batch.commands.emplace_back(RandomClear(rng));
    }
  }
  return batch;
}

// Any decode either fails with kCorruption or yields a batch whose encoding is exactly the
// input (the encoding is canonical), so nothing is silently reinterpreted.
void CheckDecodeIsCanonicalOrCorruption(const std::string& bytes) {
  Result<CommandBatch> decoded = DecodeCommandBatch(bytes);
  if (decoded.has_value()) {
    CHECK(EncodeCommandBatch(*decoded) == bytes);
  } else {
    CHECK(decoded.error().code() == StatusCode::kCorruption);
  }
}

// AuditCommand{0x0102, 0x1122334455667788, any scheme} after the batch's version and count,
// up to its scheme: tag, checked_index, checked_digest.
std::string AuditBytes() {
  return Bytes(
      "\x09"                                // Audit
      "\x02\x01\x00\0\0\0\0\0"              // checked_index 0x0102
      "\x88\x77\x66\x55\x44\x33\x22\x11");  // checked_digest
}

TEST_SUITE("command_codec") {
  TEST_CASE("CommandCodec: every command variant round-trips with random content") {
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      CAPTURE(seed);
      Rng rng(seed);
      const CommandBatch batch = RandomBatch(rng, 8);
      const std::string bytes = EncodeCommandBatch(batch);
      Result<CommandBatch> decoded = DecodeCommandBatch(bytes);
      REQUIRE(decoded.has_value());
      CHECK(*decoded == batch);
      CHECK(EncodeCommandBatch(*decoded) == bytes);
    }
  }

  TEST_CASE("CommandCodec: an empty batch is two bytes") {
    const std::string bytes = EncodeCommandBatch(CommandBatch{});
    CHECK(bytes == Bytes("\x01\x00"));
    Result<CommandBatch> decoded = DecodeCommandBatch(bytes);
    REQUIRE(decoded.has_value());
    CHECK(decoded->commands.empty());
  }

  TEST_CASE("CommandCodec: encodes the documented bytes") {
    SUBCASE("clear") {
      CommandBatch batch;
      batch.commands.emplace_back(ClearCommand{HolderKey{"h", 2}, std::nullopt, Tier::kCpu});
      CHECK(EncodeCommandBatch(batch) == Bytes("\x01\x01\x03\x01h\x02\x00\x01\x01"));
    }
    SUBCASE("store") {
      StoreCommand c;
      c.context = ContextKey{"t", "m", "", 16, ""};
      c.holder = HolderKey{"i", 0};
      c.parent = 0x0102030405060708ULL;
      c.base_depth = 300;
      c.hashes = {1};
      c.locations = {"x"};
      CommandBatch batch;
      batch.commands.emplace_back(c);
      const std::string expected = Bytes(
          "\x01\x01"                              // version, count
          "\x01"                                  // tag Store
          "\x01t\x01m\x00\x10\x00"                // context
          "\x01i\x00"                             // holder
          "\x00\x00"                              // tier GPU, mode kSequence
          "\x01\x08\x07\x06\x05\x04\x03\x02\x01"  // parent
          "\x01\xac\x02"                          // base_depth 300
          "\x01\x01\x00\x00\x00\x00\x00\x00\x00"  // hashes
          "\x00"                                  // engine_hashes
          "\x01\x01x");                           // locations
      CHECK(EncodeCommandBatch(batch) == expected);
    }
    SUBCASE("remove") {
      RemoveCommand c{ContextKey{"", "", "", 0, ""}, HolderKey{"", 1}, std::nullopt, {}};
      CommandBatch batch;
      batch.commands.emplace_back(c);
      CHECK(EncodeCommandBatch(batch) == Bytes("\x01\x01\x02\x00\x00\x00\x00\x00\x00\x01\x00\x00"));
    }
  }

  TEST_CASE("CommandCodec: registry commands and positions use version 2") {
    CommandBatch batch;
    batch.commands.emplace_back(UnregisterCommand{"i", "t", 2});
    batch.position = StreamPosition{"s", 5, true};
    CHECK(EncodeCommandBatch(batch) == Bytes("\x02\x01"                         // version, count
                                             "\x05\x01i\x01t\x02"               // Unregister
                                             "\x01\x01s\x05\0\0\0\0\0\0\0\x01"  // position
                                             ));
    // A version-2 batch that version 1 could hold is not canonical.
    CHECK(DecodeCommandBatch(Bytes("\x02\x00\x00")).error().code() == StatusCode::kCorruption);
    // Version 1 has no registry tags.
    CHECK(DecodeCommandBatch(Bytes("\x01\x01\x05\x01i\x01t\x02")).error().code() ==
          StatusCode::kCorruption);
    RegisterCommand reg;
    reg.registration.instance_id = "i";
    CommandBatch with_register;
    with_register.commands.emplace_back(reg);
    const std::string bytes = EncodeCommandBatch(with_register);
    CHECK(bytes[0] == 2);
    CHECK(DecodeCommandBatch(bytes).value() == with_register);
  }

  TEST_CASE("CommandCodec: server address commands use version 3") {
    CommandBatch batch;
    batch.commands.emplace_back(AnnounceCommand{2, "h:1", "r:2"});
    batch.commands.emplace_back(ForgetServerCommand{0x0102});
    const std::string expected = Bytes(
        "\x03\x02"                  // version 3, count
        "\x06\x02\0\0\0\0\0\0\0"    // Announce, server_id 2
        "\x03h:1\x03r:2"            // http_address, rpc_address
        "\x07\x02\x01\0\0\0\0\0\0"  // ForgetServer 0x0102
        "\x00");                    // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Versions 1 and 2 have no server-address tags.
    std::string old = expected;
    old[0] = 2;
    CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(Bytes("\x01\x01\x07\x02\0\0\0\0\0\0\0")).error().code() ==
          StatusCode::kCorruption);
    // A version-3 batch that version 2 could hold is not canonical.
    CHECK(DecodeCommandBatch(Bytes("\x03\x01\x05\x01i\x01t\x02\x00")).error().code() ==
          StatusCode::kCorruption);
    // Old batches still decode as before.
    CHECK(DecodeCommandBatch(Bytes("\x02\x01\x05\x01i\x01t\x02\x00")).has_value());
  }

  TEST_CASE("CommandCodec: a holder expiry uses version 4") {
    CommandBatch batch;
    batch.commands.emplace_back(ExpireHolderCommand{HolderKey{"h", 3}, 0x0102});
    const std::string expected = Bytes(
        "\x04\x01"                // version 4, count
        "\x08\x01h\x03"           // ExpireHolder, holder {"h", 3}
        "\x02\x01\x00\0\0\0\0\0"  // last_activity_revision 0x0102
        "\x00");                  // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Older versions have no expiry tag.
    for (const char version : {'\x01', '\x02', '\x03'}) {
      CAPTURE(static_cast<int>(version));
      std::string old = expected;
      old[0] = version;
      if (version == 1) old.pop_back();  // version 1 has no position flag
      CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    }
    // A version-4 batch that version 3 could hold is not canonical.
    CHECK(DecodeCommandBatch(Bytes("\x04\x01\x07\x02\0\0\0\0\0\0\0\x00")).error().code() ==
          StatusCode::kCorruption);
    // With an announcement and a position the batch is still version 4, and round-trips in
    // a log entry.
    batch.commands.emplace_back(AnnounceCommand{1, "h:1", "r:1"});
    batch.position = StreamPosition{"s", 9, false};
    CHECK(static_cast<uint8_t>(EncodeCommandBatch(batch)[0]) == 4);
    const CommandBatch* one[] = {&batch};
    Result<std::vector<CommandBatch>> entry = DecodeLogEntry(EncodeLogEntry(one));
    REQUIRE(entry.has_value());
    REQUIRE(entry->size() == 1);
    CHECK(entry->front() == batch);
  }

  TEST_CASE("CommandCodec: an audit point of digest scheme 1 uses version 6") {
    CommandBatch batch;
    batch.commands.emplace_back(AuditCommand{0x0102, 0x1122334455667788, 1});
    const std::string expected = Bytes("\x06\x01") + AuditBytes() + Bytes("\x00");  // no scheme: 1
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Older versions have no audit tag.
    for (const char version : {'\x01', '\x02', '\x03', '\x04', '\x05'}) {
      CAPTURE(static_cast<int>(version));
      std::string old = expected;
      old[0] = version;
      if (version == 1) old.pop_back();  // version 1 has no position flag
      CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    }
    // A version-6 batch that version 4 could hold is not canonical.
    CHECK(DecodeCommandBatch(Bytes("\x06\x01\x08\x01h\x03\x02\x01\x00\0\0\0\0\0\x00"))
              .error()
              .code() == StatusCode::kCorruption);
    // Beside a report store, still version 6; round-trips in a log entry.
    StoreCommand store;
    store.hashes = {1};
    store.report = true;
    batch.commands.emplace_back(std::move(store));
    CHECK(static_cast<uint8_t>(EncodeCommandBatch(batch)[0]) == 6);
    const CommandBatch* one[] = {&batch};
    Result<std::vector<CommandBatch>> entry = DecodeLogEntry(EncodeLogEntry(one));
    REQUIRE(entry.has_value());
    REQUIRE(entry->size() == 1);
    CHECK(entry->front() == batch);
  }

  TEST_CASE("CommandCodec: an audit point of another digest scheme uses version 7") {
    CommandBatch batch;
    batch.commands.emplace_back(AuditCommand{0x0102, 0x1122334455667788, 2});
    const std::string expected = Bytes("\x07\x01") + AuditBytes() +
                                 Bytes(
                                     "\x02"    // digest_scheme 2
                                     "\x00");  // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // What this build proposes.
    CommandBatch current;
    current.commands.emplace_back(AuditCommand{});
    CHECK(std::get<AuditCommand>(current.commands[0]).digest_scheme == kReplicaDigestScheme);
    CHECK(static_cast<uint8_t>(EncodeCommandBatch(current)[0]) == 7);
    // Read as version 6, the scheme byte is one too many; scheme 1 in version 7 is not
    // canonical alone; scheme 0 does not exist.
    const auto decode_with = [&expected](size_t at, char byte) {
      std::string bytes = expected;
      bytes[at] = byte;
      return DecodeCommandBatch(bytes);
    };
    CHECK(decode_with(0, '\x06').error().code() == StatusCode::kCorruption);
    CHECK(decode_with(19, '\x01').error().code() == StatusCode::kCorruption);
    CHECK(decode_with(19, '\x00').error().code() == StatusCode::kCorruption);
    // Beside an audit of scheme 2, one of scheme 1 carries its scheme byte too.
    batch.commands.emplace_back(AuditCommand{3, 4, 1});
    const std::string both = EncodeCommandBatch(batch);
    CHECK(both == Bytes("\x07\x02"
                        "\x09\x02\x01\x00\0\0\0\0\0\x88\x77\x66\x55\x44\x33\x22\x11\x02"
                        "\x09\x03\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0\x01"
                        "\x00"));
    CHECK(DecodeCommandBatch(both).value() == batch);
  }

  TEST_CASE("CommandCodec: a load report uses version 8") {
    CommandBatch batch;
    batch.commands.emplace_back(
        LoadReportCommand{LoadReport{"r", 500, {{"a", 2, 3, 0x0102}}}, 0x0A0B});
    const std::string expected = Bytes(
        "\x08\x01"                          // version 8, count
        "\x0a"                              // tag LoadReport
        "\x01r"                             // router_id
        "\xf4\x03"                          // ttl_ms 500
        "\x0b\x0a\x00\x00\x00\x00\x00\x00"  // accepted_at_ms
        "\x01\x01"
        "a"
        "\x02"                              // one load: instance, rank
        "\x03\x00\x00\x00\x00\x00\x00\x00"  // prefill_blocks
        "\x02\x01\x00\x00\x00\x00\x00\x00"  // decode_blocks
        "\x00");                            // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Older versions have no load reports.
    std::string old = expected;
    old[0] = 7;
    CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    // Truncated anywhere: refused.
    for (size_t n = 1; n < expected.size(); ++n) {
      CHECK(!DecodeCommandBatch(expected.substr(0, n)).has_value());
    }
  }

  TEST_CASE("CommandCodec: a prediction uses version 9") {
    CommandBatch batch;
    batch.commands.emplace_back(
        PredictCommand{ContextKey{"t", "m", "", 16, ""}, HolderKey{"a", 2}, 500, 0x0A0B, {7, 8}});
    const std::string encoded = EncodeCommandBatch(batch);
    CHECK(encoded[0] == 9);
    CHECK(encoded[2] == 0x0b);  // tag Predict
    CHECK(DecodeCommandBatch(encoded).value() == batch);
    // The tail: ttl_ms, accepted_at_ms, two hashes, no position.
    CHECK(encoded.substr(encoded.size() - 28) ==
          Bytes("\xf4\x03"                          // ttl_ms 500
                "\x0b\x0a\x00\x00\x00\x00\x00\x00"  // accepted_at_ms
                "\x02"                              // two hashes
                "\x07\x00\x00\x00\x00\x00\x00\x00"
                "\x08\x00\x00\x00\x00\x00\x00\x00"
                "\x00"));  // no position
    // Older versions have no predictions.
    std::string old = encoded;
    old[0] = 8;
    CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    for (size_t n = 1; n < encoded.size(); ++n) {
      CHECK(!DecodeCommandBatch(encoded.substr(0, n)).has_value());
    }
  }

  TEST_CASE("CommandCodec: a drain uses version 10") {
    CommandBatch batch;
    batch.commands.emplace_back(DrainCommand{0x0102, true});
    batch.commands.emplace_back(DrainCommand{3, false});
    const std::string expected = Bytes(
        "\x0a\x02"                                  // version 10, two commands
        "\x0c\x02\x01\x00\x00\x00\x00\x00\x00\x01"  // tag Drain, server 0x0102, draining
        "\x0c\x03\x00\x00\x00\x00\x00\x00\x00\x00"  // server 3, not draining
        "\x00");                                    // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Older versions have no drains; a flag other than 0 or 1 is refused.
    std::string old = expected;
    old[0] = 9;
    CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    std::string bad_flag = expected;
    bad_flag[11] = 2;
    CHECK(DecodeCommandBatch(bad_flag).error().code() == StatusCode::kCorruption);
    for (size_t n = 1; n < expected.size(); ++n) {
      CHECK(!DecodeCommandBatch(expected.substr(0, n)).has_value());
    }
  }

  TEST_CASE("CommandCodec: a group's members use version 12") {
    CommandBatch batch;
    batch.commands.emplace_back(SetGroupMembersCommand{3, {2, 0x0102}});
    const std::string expected = Bytes(
        "\x0c\x01"                          // version 12, one command
        "\x10\x03\x02"                      // SetGroupMembers, group 3, two members
        "\x02\x00\x00\x00\x00\x00\x00\x00"  // server 2
        "\x02\x01\x00\x00\x00\x00\x00\x00"  // server 0x0102
        "\x00");                            // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Version 11 and older have no such tag.
    for (uint8_t version = 2; version <= 11; ++version) {
      std::string old = expected;
      old[0] = static_cast<char>(version);
      CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    }
    // Members out of order, repeated, 0, none or more than kMaxGroupMembers are refused.
    const auto members_of = [](std::vector<uint64_t> members) {
      CommandBatch one;
      one.commands.emplace_back(SetGroupMembersCommand{3, std::move(members)});
      return EncodeCommandBatch(one);
    };
    CHECK(DecodeCommandBatch(members_of({2, 1})).error().code() == StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(members_of({2, 2})).error().code() == StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(members_of({0, 2})).error().code() == StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(members_of({})).error().code() == StatusCode::kCorruption);
    std::vector<uint64_t> many;
    for (uint64_t id = 1; id <= kMaxGroupMembers; ++id) many.push_back(id);
    CHECK(DecodeCommandBatch(members_of(many)).has_value());
    many.push_back(kMaxGroupMembers + 1);
    CHECK(DecodeCommandBatch(members_of(many)).error().code() == StatusCode::kCorruption);
    for (size_t n = 1; n < expected.size(); ++n) {
      CHECK(!DecodeCommandBatch(expected.substr(0, n)).has_value());
    }
  }

  TEST_CASE("CommandCodec: a holder-wide command's fan-out id uses version 13") {
    CommandBatch batch;
    ClearCommand clear{HolderKey{"h", 0}, std::nullopt, std::nullopt};
    clear.fanout = 0x0102;
    batch.commands.emplace_back(clear);
    batch.commands.emplace_back(ClearCommand{HolderKey{"g", 0}, std::nullopt, std::nullopt});
    UnregisterCommand unregister{"i", "t", 2};
    unregister.fanout = 3;
    batch.commands.emplace_back(unregister);
    const std::string expected = Bytes(
        "\x0d\x03"                          // version 13, three commands
        "\x03\x01h\x00\x00\x00"             // Clear: holder h/0, no context, no tier
        "\x02\x01\x00\x00\x00\x00\x00\x00"  //   its fan-out id 0x0102
        "\x03\x01g\x00\x00\x00"             // Clear of holder g/0
        "\x00\x00\x00\x00\x00\x00\x00\x00"  //   without an id: 0 in version 13
        "\x05\x01i\x01t\x02"                // Unregister i, tenant t, rank 2
        "\x03\x00\x00\x00\x00\x00\x00\x00"  //   its fan-out id 3
        "\x00");                            // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Without ids the batch is written as before (version 2: an unregistration).
    CommandBatch without = batch;
    std::get<ClearCommand>(without.commands[0]).fanout = 0;
    std::get<UnregisterCommand>(without.commands[2]).fanout = 0;
    const std::string old = EncodeCommandBatch(without);
    CHECK(old[0] == 2);
    CHECK(DecodeCommandBatch(old).value() == without);
    // Version 13 with every id 0 is not canonical; an older version has no id field.
    std::string zeros = expected;
    for (size_t at : {size_t{8}, size_t{36}}) {
      for (size_t i = 0; i < 8; ++i) zeros[at + i] = 0;
    }
    CHECK(DecodeCommandBatch(zeros).error().code() == StatusCode::kCorruption);
    std::string older = expected;
    older[0] = 12;
    CHECK(DecodeCommandBatch(older).error().code() == StatusCode::kCorruption);
    for (size_t n = 1; n < expected.size(); ++n) {
      CHECK(!DecodeCommandBatch(expected.substr(0, n)).has_value());
    }
  }

  TEST_CASE("CommandCodec: a move's commands use version 14") {
    ReplaceCopiesCommand replace;
    replace.context = ContextKey{"t", "m", "", 16, ""};
    replace.blocks.push_back({0x0102, 3, {{HolderKey{"h", 1}, Tier::kShared, 2, 5, "s3://x"}}});
    replace.blocks.push_back({0x0a, 0, {}, true});
    CommandBatch batch;
    batch.commands.emplace_back(replace);
    const std::string expected = Bytes(
        "\x0e\x01"                              // version 14, one command
        "\x11\x01t\x01m\x00\x10\x00"            // ReplaceCopies in context t/m, block size 16
        "\x02"                                  // two blocks
        "\x02\x01\x00\x00\x00\x00\x00\x00\x03"  // key 0x0102, depth 3
        "\x01\x01h\x01\x03\x02"                 //   one copy: h/1, shared, refcount 2 (byte 25)
        "\x05\x00\x00\x00\x00\x00\x00\x00"      //   engine hash 5
        "\x06s3://x\x00"                        //   its location; not anew
        "\x0a\x00\x00\x00\x00\x00\x00\x00\x00"  // key 0x0a, depth 0
        "\x00\x01"                              //   no copies, anew
        "\x00");                                // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // A copy of refcount 0 is no copy: refused, as the tag in an older version.
    std::string zero = expected;
    zero[25] = 0;
    CHECK(DecodeCommandBatch(zero).error().code() == StatusCode::kCorruption);
    std::string older = expected;
    older[0] = 13;
    CHECK(DecodeCommandBatch(older).error().code() == StatusCode::kCorruption);
    // The other move commands: a context (and the fence's epoch, a varint).
    CommandBatch steps;
    steps.commands.emplace_back(FenceContextCommand{replace.context, 300});
    steps.commands.emplace_back(ImportContextCommand{replace.context});
    steps.commands.emplace_back(DropContextCommand{replace.context});
    CHECK(EncodeCommandBatch(steps) == Bytes("\x0e\x03"
                                             "\x12\x01t\x01m\x00\x10\x00\xac\x02"
                                             "\x13\x01t\x01m\x00\x10\x00"
                                             "\x14\x01t\x01m\x00\x10\x00"
                                             "\x00"));
  }

  TEST_CASE("CommandCodec: the placement commands use version 11") {
    const ContextKey context{"t", "m", "", 16, ""};
    CommandBatch batch;
    batch.commands.emplace_back(PlaceContextCommand{context, 300});
    batch.commands.emplace_back(SetGroupAcceptingCommand{kMaxGroupId, false});
    batch.commands.emplace_back(DisownContextCommand{context, 0x81});
    const std::string expected = Bytes(
        "\x0b\x03"                            // version 11, three commands
        "\x0d\x01t\x01m\x00\x10\x00\xac\x02"  // PlaceContext, context, group 300
        "\x0e\xff\xff\x03\x00"                // SetGroupAccepting 65535, not accepting
        "\x0f\x01t\x01m\x00\x10\x00\x81\x01"  // DisownContext, context, epoch 0x81
        "\x00");                              // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Version 10 and older have none of the three tags, whatever the content.
    for (uint8_t version = 2; version <= 10; ++version) {
      std::string old = expected;
      old[0] = static_cast<char>(version);
      CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    }
    for (const std::string& one :
         {Bytes("\x0a\x01\x0d\x01t\x01m\x00\x10\x00\x01\x00"), Bytes("\x0a\x01\x0e\x01\x01\x00"),
          Bytes("\x0a\x01\x0f\x01t\x01m\x00\x10\x00\x01\x00")}) {
      CHECK(DecodeCommandBatch(one).error().code() == StatusCode::kCorruption);
      std::string current = one;
      current[0] = 11;
      CHECK(DecodeCommandBatch(current).has_value());
    }
    // A group id of 0 or past kMaxGroupId is refused, in either command.
    CHECK(DecodeCommandBatch(Bytes("\x0b\x01\x0e\x00\x01\x00")).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(Bytes("\x0b\x01\x0e\x80\x80\x04\x01\x00")).error().code() ==
          StatusCode::kCorruption);  // 65536
    CHECK(DecodeCommandBatch(Bytes("\x0b\x01\x0d\x01t\x01m\x00\x10\x00\x00\x00")).error().code() ==
          StatusCode::kCorruption);
    // A flag other than 0 or 1, a non-canonical epoch varint, truncations, trailing bytes.
    CHECK(DecodeCommandBatch(Bytes("\x0b\x01\x0e\x01\x02\x00")).error().code() ==
          StatusCode::kCorruption);
    CHECK(DecodeCommandBatch(Bytes("\x0b\x01\x0f\x01t\x01m\x00\x10\x00\x81\x00\x00"))
              .error()
              .code() == StatusCode::kCorruption);
    for (size_t n = 1; n < expected.size(); ++n) {
      CHECK(!DecodeCommandBatch(expected.substr(0, n)).has_value());
    }
    CHECK(DecodeCommandBatch(expected + Bytes("\x00")).error().code() == StatusCode::kCorruption);
    // The smallest command: a batch of many fits the count check.
    CommandBatch small;
    for (int i = 0; i < 100; ++i) small.commands.emplace_back(SetGroupAcceptingCommand{1, true});
    CHECK(EncodeCommandBatch(small).size() == 1 + 1 + 300 + 1);
    CHECK(DecodeCommandBatch(EncodeCommandBatch(small)).value() == small);
    // A batch with a drain but no placement command stays version 10.
    CommandBatch drain;
    drain.commands.emplace_back(DrainCommand{1, true});
    CHECK(EncodeCommandBatch(drain)[0] == 10);
  }

  TEST_CASE("CommandCodec: a report store and a full-mode registration use version 5") {
    StoreCommand c;
    c.context = ContextKey{"t", "m", "", 16, ""};
    c.holder = HolderKey{"i", 0};
    c.mode = KeyMode::kLocal;
    c.hashes = {1};
    c.report = true;
    CommandBatch batch;
    batch.commands.emplace_back(c);
    const std::string expected = Bytes(
        "\x05\x01"                              // version 5, count
        "\x01"                                  // tag Store
        "\x01t\x01m\x00\x10\x00"                // context
        "\x01i\x00"                             // holder
        "\x00\x81"                              // tier GPU, mode kLocal | report bit
        "\x00\x00"                              // no parent, no base_depth
        "\x01\x01\x00\x00\x00\x00\x00\x00\x00"  // hashes
        "\x00\x00"                              // engine_hashes, locations
        "\x00");                                // no position
    CHECK(EncodeCommandBatch(batch) == expected);
    CHECK(DecodeCommandBatch(expected).value() == batch);
    // Without the report bit the same store is the version-1 bytes of before.
    c.report = false;
    CommandBatch copy;
    copy.commands.emplace_back(c);
    CHECK(EncodeCommandBatch(copy)[0] == 1);
    // Older versions have no report bit, and a version-5 batch version 4 could hold is not
    // canonical.
    std::string old = expected;
    old[0] = 4;
    CHECK(DecodeCommandBatch(old).error().code() == StatusCode::kCorruption);
    std::string plain = expected;
    plain[14] = '\x01';
    CHECK(DecodeCommandBatch(plain).error().code() == StatusCode::kCorruption);
    // An unknown mode with the report bit is still unknown.
    std::string unknown = expected;
    unknown[14] = '\x83';
    CHECK(DecodeCommandBatch(unknown).error().code() == StatusCode::kCorruption);

    RegisterCommand reg;
    reg.registration.instance_id = "i";
    reg.registration.report_mode = ReportMode::kFull;
    CommandBatch with_register;
    with_register.commands.emplace_back(reg);
    const std::string bytes = EncodeCommandBatch(with_register);
    CHECK(bytes[0] == 5);
    CHECK(DecodeCommandBatch(bytes).value() == with_register);
    reg.registration.report_mode = ReportMode::kIncremental;
    CommandBatch incremental;
    incremental.commands.emplace_back(reg);
    CHECK(EncodeCommandBatch(incremental)[0] == 2);
  }

  TEST_CASE("CommandCodec: truncation at every byte offset is kCorruption") {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      Rng rng(seed);
      CommandBatch batch = RandomBatch(rng, 4);
      batch.commands.emplace_back(RandomStore(rng));  // never empty
      const std::string bytes = EncodeCommandBatch(batch);
      for (size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        Result<CommandBatch> decoded = DecodeCommandBatch(std::string_view(bytes).substr(0, n));
        REQUIRE_FALSE(decoded.has_value());
        CHECK(decoded.error().code() == StatusCode::kCorruption);
      }
    }
  }

  TEST_CASE("CommandCodec: trailing bytes are kCorruption") {
    Rng rng(7);
    const std::string bytes = EncodeCommandBatch(RandomBatch(rng, 3));
    Result<CommandBatch> decoded = DecodeCommandBatch(bytes + std::string(1, '\0'));
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().code() == StatusCode::kCorruption);
    CHECK(decoded.error().message().find("trailing") != std::string::npos);
  }

  TEST_CASE("CommandCodec: unknown versions, tags and enum values are kCorruption") {
    CommandBatch batch;
    batch.commands.emplace_back(ClearCommand{HolderKey{"h", 0}, std::nullopt, Tier::kDisk});
    const std::string good = EncodeCommandBatch(batch);
    REQUIRE(DecodeCommandBatch(good).has_value());

    std::string bad = good;
    SUBCASE("version") { bad[0] = 2; }
    SUBCASE("tag") { bad[2] = 4; }
    SUBCASE("tag zero") { bad[2] = 0; }
    SUBCASE("presence flag other than 0/1") { bad[6] = 2; }
    SUBCASE("tier out of range") { bad[8] = kNumTiers; }
    SUBCASE("non-canonical varint rank") { bad = Bytes("\x01\x01\x03\x01h\x80\x00\x00\x00"); }
    Result<CommandBatch> decoded = DecodeCommandBatch(bad);
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("CommandCodec: a count larger than the input is rejected before allocating") {
    // version, count = 2^63, one tag byte: a decoder trusting the count would reserve
    // exabytes.
    const std::string huge_batch = Bytes("\x01\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x01");
    CHECK(DecodeCommandBatch(huge_batch).error().code() == StatusCode::kCorruption);
    // A Remove whose hash count claims 2^56 fixed64s.
    const std::string huge_hashes = Bytes(
        "\x01\x01\x02\x00\x00\x00\x00\x00\x00\x01\x00"  // Remove up to its hash count
        "\x80\x80\x80\x80\x80\x80\x80\x80\x01");
    CHECK(DecodeCommandBatch(huge_hashes).error().code() == StatusCode::kCorruption);
  }

  TEST_CASE("CommandCodec: random garbage and bit flips never crash") {
    Rng rng(42);
    for (int i = 0; i < 3000; ++i) {
      std::string garbage = RandomString(rng, 64);
      if (!garbage.empty() && rng() % 2) garbage[0] = 1;  // get past the version byte
      CheckDecodeIsCanonicalOrCorruption(garbage);
    }
    for (int i = 0; i < 300; ++i) {
      std::string bytes = EncodeCommandBatch(RandomBatch(rng, 3));
      bytes[rng() % bytes.size()] ^= static_cast<char>(1u << (rng() % 8));
      CheckDecodeIsCanonicalOrCorruption(bytes);
    }
  }
}

}  // namespace
}  // namespace kvatlas::server
