// The change feed's binary-protocol payloads (protocol_feed.cc; docs/protocol.md §kWatch,
// §kSnapshot): the documented bytes, random round trips, every truncation, garbage, and
// each validation rule.
#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/internal/bytes.h"
#include "kvatlas/common/protocol.h"
#include "tests/support/bytes_literal.h"
#include "tests/unit/common/codec_test_support.h"

namespace kvatlas::protocol {
namespace {

using kvatlas::testing::Bytes;

class Gen : public testing::RandomContent {
 public:
  using RandomContent::RandomContent;

  FeedFilter Filter() {
    FeedFilter f;
    if (Chance(2)) f.tenant = Str();
    if (Chance(2)) f.model = Str();
    if (Chance(3)) f.lora_name = Str();
    if (Chance(2)) f.block_size = U32();
    if (Chance(3)) f.salt = Str();
    if (Chance(2)) f.holder_id = Str();
    if (Chance(2)) f.dp_rank = U32();
    if (Chance(2)) f.tier = AnyTier();
    // Not `predicted`: a payload cut just before its optional trailer is still whole, so
    // the truncation test leaves it out (protocol_predicted_test.cc covers it).
    return f;
  }

  WatchRequest Watch() {
    WatchRequest r;
    if (Chance(5)) {
      r.cancel = true;
      return r;
    }
    if (Chance(2)) r.from = U64();
    r.filter = Filter();
    return r;
  }

  FeedRecord Record(Revision revision) {
    FeedRecord r;
    r.revision = revision;
    r.op = static_cast<FeedOp>(Below(6));
    r.context = Context();
    r.holder = Holder();
    r.tier = AnyTier();
    r.keys.resize(1 + Below(5));
    for (BlockKey& key : r.keys) key = U64();
    if (r.op == FeedOp::kStored && Chance(2)) {
      for (size_t i = 0; i < r.keys.size(); ++i) r.locations.push_back(Str(20));
    }
    if (r.op == FeedOp::kPredicted) r.expires_at_ms = U64();
    return r;
  }

  // A valid batch: revisions in order, all but possibly the last one <= through.
  WatchBatch Batch() {
    WatchBatch b;
    if (Chance(6)) {
      b.final = true;
      b.through = U64();
      return b;
    }
    Revision revision = 1 + Below(1000);
    for (uint64_t n = Below(5); n > 0; --n) {
      b.records.push_back(Record(revision));
      if (Chance(2)) revision += 1 + Below(3);
    }
    b.through = b.records.empty() ? Below(1000) : b.records.back().revision;
    if (!b.records.empty() && Chance(3)) b.through = b.records.back().revision - 1;  // split
    return b;
  }

  SnapshotCopy Copy() {
    SnapshotCopy c;
    c.key = U64();
    c.copy.context = ContextKey{"", "", "", 0, ""};  // not sent: decodes empty
    c.copy.holder = Holder();
    c.copy.tier = AnyTier();
    c.copy.depth = U32();
    c.copy.refcount = U32();
    c.copy.engine_hash = U64();
    c.copy.location = Str(30);
    return c;
  }

  SnapshotPart Part() {
    SnapshotPart p;
    p.last = Chance(2);
    p.revision = U64();
    p.part = U32();
    p.context = Context();
    p.copies.resize(Below(5));
    for (SnapshotCopy& c : p.copies) c = Copy();
    return p;
  }
};

using Codec = testing::Codec<Gen>;
using testing::ErrorOf;

template <typename T, typename Enc, typename Dec>
Codec MakeCodec(const char* name, std::function<T(Gen*)> random, Enc encode, Dec decode) {
  return Codec{name, [=](Gen* g) { return encode(random(g)); },
               [=](std::string_view p) { return decode(p).has_value(); },
               [=](std::string_view p) {
                 Result<T> first = decode(p);
                 if (!first) return true;
                 Result<T> second = decode(encode(*first));
                 return second.has_value() && *first == *second;
               }};
}

std::vector<Codec> FeedCodecs() {
  return {
      MakeCodec<WatchRequest>(
          "watch request", [](Gen* g) { return g->Watch(); }, EncodeWatchRequest,
          DecodeWatchRequest),
      MakeCodec<WatchBatch>(
          "watch batch", [](Gen* g) { return g->Batch(); }, EncodeWatchBatch, DecodeWatchBatch),
      MakeCodec<SnapshotRequest>(
          "snapshot request", [](Gen* g) { return SnapshotRequest{g->Context()}; },
          EncodeSnapshotRequest, DecodeSnapshotRequest),
      MakeCodec<SnapshotPart>(
          "snapshot part", [](Gen* g) { return g->Part(); }, EncodeSnapshotPart,
          DecodeSnapshotPart),
  };
}

const ContextKey kContext{"t", "m", "", 4, ""};

TEST_SUITE("protocol") {
  TEST_CASE("ProtocolFeed: payloads have the documented bytes") {
    SUBCASE("watch request: start after revision 40, model m, block size 4") {
      WatchRequest r;
      r.from = 40;
      r.filter.model = "m";
      r.filter.block_size = 4;
      CHECK(EncodeWatchRequest(r) == Bytes("\x00"                                  // start
                                           "\x01\x28\x00\x00\x00\x00\x00\x00\x00"  // from
                                           "\x00"                                  // tenant_id
                                           "\x01\x01m"                             // model_name
                                           "\x00"                                  // lora_name
                                           "\x01\x04"                              // block_size
                                           "\x00\x00\x00\x00"));  // salt, backend, rank, tier
      CHECK(EncodeWatchRequest(WatchRequest{true, 7, {}}) == Bytes("\x01"));  // cancel
      CHECK(EncodeWatchRequest(WatchRequest{}) ==
            Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"));
    }
    SUBCASE("watch batch: one stored record of revision 41") {
      WatchBatch b;
      b.through = 41;
      b.records.push_back(
          FeedRecord{41, FeedOp::kStored, kContext, HolderKey{"h", 0}, Tier::kGpu, {1}, {}});
      CHECK(EncodeWatchBatch(b) == Bytes("\x00"                                  // more
                                         "\x29\x00\x00\x00\x00\x00\x00\x00"      // through
                                         "\x01"                                  // 1 record
                                         "\x29\x00\x00\x00\x00\x00\x00\x00"      // revision
                                         "\x00"                                  // stored
                                         "\x01t\x01m\x00\x04\x00"                // context
                                         "\x01h\x00"                             // holder
                                         "\x00"                                  // GPU
                                         "\x01\x01\x00\x00\x00\x00\x00\x00\x00"  // keys
                                         "\x00"));                               // locations
      CHECK(EncodeWatchBatch(WatchBatch{true, 41, {}}) ==
            Bytes("\x01\x29\x00\x00\x00\x00\x00\x00\x00"));
    }
    SUBCASE("watch end") {
      CHECK(EncodeWatchEnd(Status(StatusCode::kWatchCut, "cut"),
                           {40, std::nullopt, std::nullopt}) == "cut\nresume_from=40");
      CHECK(EncodeWatchEnd(Status(StatusCode::kCompacted, "old"), {std::nullopt, 5, 9}) ==
            "old\noldest_revision=5\ncurrent_revision=9");
    }
    SUBCASE("snapshot request and part") {
      CHECK(EncodeSnapshotRequest(SnapshotRequest{kContext}) == Bytes("\x01t\x01m\x00\x04\x00"));
      SnapshotPart p;
      p.last = true;
      p.revision = 40;
      p.part = 2;
      p.context = kContext;
      SnapshotCopy c;
      c.key = 1;
      c.copy.holder = HolderKey{"h", 0};
      c.copy.tier = Tier::kCpu;
      c.copy.depth = 3;
      c.copy.refcount = 1;
      c.copy.engine_hash = 2;
      c.copy.location = "";
      p.copies.push_back(c);
      CHECK(EncodeSnapshotPart(p) == Bytes("\x01"                              // last
                                           "\x28\x00\x00\x00\x00\x00\x00\x00"  // revision
                                           "\x02"                              // part
                                           "\x01t\x01m\x00\x04\x00"            // context
                                           "\x01"                              // 1 copy
                                           "\x01\x00\x00\x00\x00\x00\x00\x00"  // key
                                           "\x01h\x00"                         // holder
                                           "\x01\x03\x01"  // CPU, depth, refcount
                                           "\x02\x00\x00\x00\x00\x00\x00\x00"  // engine_hash
                                           "\x00"));                           // location
    }
  }

  TEST_CASE("ProtocolFeed: every message round-trips with random content") {
    Gen g(20261201);
    for (int i = 0; i < 300; ++i) {
      CAPTURE(i);
      const WatchRequest watch = g.Watch();
      CHECK(DecodeWatchRequest(EncodeWatchRequest(watch)).value() == watch);
      const WatchBatch batch = g.Batch();
      const std::string encoded = EncodeWatchBatch(batch);
      CHECK(DecodeWatchBatch(encoded).value() == batch);
      if (!batch.final) {
        size_t record_bytes = 0;
        for (const FeedRecord& r : batch.records) record_bytes += WatchRecordBytes(r);
        CHECK(encoded.size() == 1 + 8 + 1 + record_bytes);  // marker, through, count (< 128)
      }
      const SnapshotRequest snapshot{g.Context()};
      CHECK(DecodeSnapshotRequest(EncodeSnapshotRequest(snapshot)).value() == snapshot);
      const SnapshotPart part = g.Part();
      const std::string part_bytes = EncodeSnapshotPart(part);
      CHECK(DecodeSnapshotPart(part_bytes).value() == part);
      size_t copy_bytes = 0;
      for (const SnapshotCopy& c : part.copies) copy_bytes += SnapshotCopyBytes(c);
      CHECK(part_bytes.size() ==
            EncodeSnapshotPart(SnapshotPart{part.last, part.revision, part.part, part.context, {}})
                    .size() +
                copy_bytes);
      const Status end(StatusCode::kWatchCut, g.Str(40));
      const WatchEndHint hint{g.Chance(2) ? std::optional<Revision>(g.U64()) : std::nullopt,
                              g.Chance(2) ? std::optional<Revision>(g.U64()) : std::nullopt,
                              g.Chance(2) ? std::optional<Revision>(g.U64()) : std::nullopt};
      const WatchEnd back = DecodeWatchEnd(end.code(), EncodeWatchEnd(end, hint));
      CHECK(back.hint == hint);
      if (end.message().find('\n') == std::string::npos) CHECK(back.status == end);
    }
  }

  TEST_CASE("ProtocolFeed: a watch end without hints is all message") {
    const WatchEnd end = DecodeWatchEnd(StatusCode::kUnavailable, "bye\nresume_from=x");
    CHECK(end.status == Status::Unavailable("bye\nresume_from=x"));
    CHECK_FALSE(end.hint.resume_from.has_value());
    CHECK(DecodeWatchEnd(StatusCode::kOk, "").status.code() == StatusCode::kInternal);
  }

  TEST_CASE("ProtocolFeed: the stream marker decides which frame is final") {
    CHECK_FALSE(IsFinalStreamFrame(StatusCode::kOk, EncodeWatchBatch(WatchBatch{})));
    CHECK(IsFinalStreamFrame(StatusCode::kOk, EncodeWatchBatch(WatchBatch{true, 3, {}})));
    CHECK(IsFinalStreamFrame(StatusCode::kOk, EncodeSnapshotPart(SnapshotPart{})));
    SnapshotPart more;
    more.last = false;
    CHECK_FALSE(IsFinalStreamFrame(StatusCode::kOk, EncodeSnapshotPart(more)));
    CHECK(IsFinalStreamFrame(StatusCode::kWatchCut, Bytes("\x00")));
    CHECK(IsFinalStreamFrame(StatusCode::kOk, ""));
  }

  TEST_CASE("ProtocolFeed: every payload decoder rejects every truncation") {
    testing::CheckRejectsEveryTruncation(FeedCodecs(), 99);
  }

  TEST_CASE("ProtocolFeed: payload decoders survive random garbage and bit flips") {
    testing::CheckSurvivesGarbage(FeedCodecs(), 4242);
  }

  TEST_CASE("ProtocolFeed: decoders name what is wrong") {
    SUBCASE("watch request") {
      CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x02")).message() ==
            "action: 2 is neither 0 (start) nor 1 (cancel)");
      CHECK(ErrorOf(DecodeWatchRequest, "").message() == "action: truncated or malformed");
      CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x01\x00")).message() ==
            "payload: 1 trailing bytes");
      CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x02")).message() ==
            "from: truncated or malformed");
      CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x04"))
                .message() == "filter.tier: 4 is not a tier (0-3)");
      CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x00\x00\x01\x05m")).message() ==
            "filter.model_name: truncated or malformed");
    }
    SUBCASE("watch batch") {
      const FeedRecord record{5,          FeedOp::kStored, kContext, HolderKey{"h", 0},
                              Tier::kGpu, {1, 2},          {}};
      const auto batch_of = [](Revision through, std::vector<FeedRecord> records) {
        return EncodeWatchBatch(WatchBatch{false, through, std::move(records)});
      };
      std::string bad_marker = batch_of(5, {});
      bad_marker[0] = 2;
      CHECK(ErrorOf(DecodeWatchBatch, bad_marker).message() ==
            "marker: 2 is neither 0 (more) nor 1 (final)");
      std::string bad_op = batch_of(5, {record});
      bad_op[1 + 8 + 1 + 8] = 6;
      CHECK(ErrorOf(DecodeWatchBatch, bad_op).message() ==
            "records[0].op: 6 is not a record op (0-5)");
      FeedRecord located = record;
      located.locations = {"a"};
      CHECK(ErrorOf(DecodeWatchBatch, batch_of(5, {located})).message() ==
            "records[0].locations: must be empty or one per key (2), got 1");
      FeedRecord earlier = record;
      earlier.revision = 4;
      CHECK(ErrorOf(DecodeWatchBatch, batch_of(5, {record, earlier})).message() ==
            "records[1].revision: records must be in revision order (4 after 5)");
      FeedRecord later = record;
      later.revision = 6;
      CHECK(ErrorOf(DecodeWatchBatch, batch_of(4, {record, later})).message() ==
            "records[1].revision: revision 5 is above through (4) but is not the frame's last");
      CHECK(DecodeWatchBatch(batch_of(5, {record, later})).has_value());  // 6 continues
      CHECK(DecodeWatchBatch(batch_of(4, {record, record})).has_value());
      CHECK(ErrorOf(DecodeWatchBatch, EncodeWatchBatch(WatchBatch{true, 1, {}}) + '\0').message() ==
            "payload: 1 trailing bytes");
    }
    SUBCASE("snapshot") {
      CHECK(ErrorOf(DecodeSnapshotRequest, EncodeSnapshotRequest({ContextKey{"", "", "", 4, ""}}))
                .message() == "model_name: must be a non-empty string");
      CHECK(ErrorOf(DecodeSnapshotRequest, EncodeSnapshotRequest({ContextKey{"", "m", "", 0, ""}}))
                .message() == "block_size: must be a positive integer");
      CHECK(DecodeSnapshotRequest(EncodeSnapshotRequest({ContextKey{"", "m", "", 4, ""}}))
                .value()
                .context.tenant == "default");
      SnapshotPart part;
      part.context = kContext;
      part.copies.resize(kMaxSnapshotPartCopies + 1);
      CHECK(ErrorOf(DecodeSnapshotPart, EncodeSnapshotPart(part)).message() ==
            "copies: 65537 in one part; at most 65536");
      part.copies.resize(kMaxSnapshotPartCopies);
      for (SnapshotCopy& c : part.copies) c.copy.context = ContextKey{"", "", "", 0, ""};
      CHECK(DecodeSnapshotPart(EncodeSnapshotPart(part)).value() == part);
      std::string bad_tier =
          EncodeSnapshotPart(SnapshotPart{true, 1, 0, kContext, {SnapshotCopy{}}});
      bad_tier[bad_tier.size() - 1 - 8 - 2 - 1] = 9;
      CHECK(ErrorOf(DecodeSnapshotPart, bad_tier).message() ==
            "copies[0].tier: 9 is not a tier (0-3)");
    }
  }

  TEST_CASE("ProtocolFeed: a huge count with few bytes fails before allocating") {
    std::string count;
    PutVarint64(&count, std::numeric_limits<uint64_t>::max() >> 1);
    CHECK(ErrorOf(DecodeWatchBatch, std::string(9, '\0') + count).message() ==
          "records: truncated or malformed");
    CHECK(ErrorOf(DecodeSnapshotPart, Bytes("\x01") + std::string(8, '\0') + Bytes("\x00") +
                                          EncodeSnapshotRequest({kContext}) + count)
              .message() == "copies: truncated or malformed");
  }
}

}  // namespace
}  // namespace kvatlas::protocol
