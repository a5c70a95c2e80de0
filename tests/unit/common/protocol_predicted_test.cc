// Approximate mode's binary-protocol payloads (docs/protocol.md §kWatch options, predicted
// records, §kPredict): the documented bytes, round trips, every truncation, garbage, and
// each validation rule. A watch without options is the same bytes as before they existed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kvatlas/common/protocol.h"
#include "tests/support/bytes_literal.h"
#include "tests/unit/common/codec_test_support.h"

namespace kvatlas::protocol {
namespace {

using kvatlas::testing::Bytes;

class Gen : public testing::RandomContent {
 public:
  using RandomContent::RandomContent;

  PredictRequest Predict() {
    PredictRequest r{Context(), Holder(), {}};
    r.keys.resize(1 + Below(6));
    for (BlockKey& key : r.keys) key = U64();
    return r;
  }
};

using Codec = testing::Codec<Gen>;
using testing::ErrorOf;

std::vector<Codec> PredictCodecs() {
  const auto stable = [](auto decode, auto encode) {
    return [=](std::string_view p) {
      auto first = decode(p);
      if (!first) return true;
      auto second = decode(encode(*first));
      return second.has_value() && *first == *second;
    };
  };
  return {
      Codec{"predict request", [](Gen* g) { return EncodePredictRequest(g->Predict()); },
            [](std::string_view p) { return DecodePredictRequest(p).has_value(); },
            stable(DecodePredictRequest, EncodePredictRequest)},
      Codec{"predict answer",
            [](Gen* g) { return EncodePredictAnswer({static_cast<uint32_t>(g->U32())}); },
            [](std::string_view p) { return DecodePredictAnswer(p).has_value(); },
            stable(DecodePredictAnswer, EncodePredictAnswer)},
  };
}

const ContextKey kContext{"t", "m", "", 4, ""};

TEST_SUITE("protocol") {
  TEST_CASE("ProtocolPredicted: a watch asking for predictions ends with the options byte") {
    WatchRequest r;
    r.filter.predicted = true;
    const std::string bytes = EncodeWatchRequest(r);
    CHECK(bytes == Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"  // as without options
                         "\x01"));                                   // options: predicted
    CHECK(DecodeWatchRequest(bytes).value() == r);
    // Without the flag: no options byte at all (what every server reads).
    CHECK(EncodeWatchRequest(WatchRequest{}) == Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"));
    CHECK_FALSE(DecodeWatchRequest(Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
                    .value()
                    .filter.predicted);
    // An options byte of 0, unknown bits and bytes after it are refused.
    CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
              .message() == "options: 0 sets no option (leave the byte out)");
    CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03"))
              .message() == "options: unknown option bits 2 (known: 1 = predicted)");
    CHECK(ErrorOf(DecodeWatchRequest, Bytes("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00"))
              .message() == "payload: 1 trailing bytes");
  }

  TEST_CASE("ProtocolPredicted: a predicted record has the documented bytes") {
    WatchBatch b;
    b.through = 41;
    FeedRecord r{41, FeedOp::kPredicted, kContext, HolderKey{"h", 0}, Tier::kGpu, {1}, {}};
    r.expires_at_ms = 0x0102030405;
    b.records.push_back(r);
    const std::string bytes = EncodeWatchBatch(b);
    CHECK(bytes == Bytes("\x00"                                  // more
                         "\x29\x00\x00\x00\x00\x00\x00\x00"      // through
                         "\x01"                                  // 1 record
                         "\x29\x00\x00\x00\x00\x00\x00\x00"      // revision
                         "\x05"                                  // predicted
                         "\x01t\x01m\x00\x04\x00"                // context
                         "\x01h\x00"                             // holder
                         "\x00"                                  // tier (0, unused)
                         "\x01\x01\x00\x00\x00\x00\x00\x00\x00"  // keys
                         "\x00"                                  // locations (empty)
                         "\x05\x04\x03\x02\x01\x00\x00\x00"));   // expires_at_ms
    CHECK(DecodeWatchBatch(bytes).value() == b);
    size_t record_bytes = 0;
    for (const FeedRecord& record : b.records) record_bytes += WatchRecordBytes(record);
    CHECK(bytes.size() == 1 + 8 + 1 + record_bytes);
    // Its expiry missing: truncated; locations on it: refused.
    CHECK(ErrorOf(DecodeWatchBatch, bytes.substr(0, bytes.size() - 1)).message() ==
          "records[0].expires_at_ms: truncated or malformed");
    FeedRecord located = r;
    located.locations = {"x"};
    CHECK(ErrorOf(DecodeWatchBatch, EncodeWatchBatch(WatchBatch{false, 41, {located}})).message() ==
          "records[0].locations: must be empty on a predicted record");
  }

  TEST_CASE("ProtocolPredicted: kPredict has the documented bytes") {
    const PredictRequest r{kContext, HolderKey{"h", 2}, {1, 2}};
    const std::string bytes = EncodePredictRequest(r);
    CHECK(bytes == Bytes("\x01t\x01m\x00\x04\x00"               // context
                         "\x01h\x02"                            // holder
                         "\x02"                                 // 2 keys
                         "\x01\x00\x00\x00\x00\x00\x00\x00"     // 1
                         "\x02\x00\x00\x00\x00\x00\x00\x00"));  // 2
    CHECK(DecodePredictRequest(bytes).value() == r);
    CHECK(EncodePredictAnswer({300}) == Bytes("\xac\x02"));
    CHECK(DecodePredictAnswer(Bytes("\xac\x02")).value().queued == 300);
    CHECK(MessageTypeName(MessageType::kPredict) == "predict");
  }

  TEST_CASE("ProtocolPredicted: kPredict decoders name what is wrong") {
    const auto request = [](ContextKey context, HolderKey holder, std::vector<BlockKey> keys) {
      return EncodePredictRequest(
          PredictRequest{std::move(context), std::move(holder), std::move(keys)});
    };
    CHECK(ErrorOf(DecodePredictRequest, request({"t", "", "", 4, ""}, {"h", 0}, {1})).message() ==
          "model_name: must be a non-empty string");
    CHECK(ErrorOf(DecodePredictRequest, request({"t", "m", "", 0, ""}, {"h", 0}, {1})).message() ==
          "block_size: must be a positive integer");
    CHECK(ErrorOf(DecodePredictRequest, request(kContext, {"", 0}, {1})).message() ==
          "backend_id: must be a non-empty string");
    CHECK(ErrorOf(DecodePredictRequest, request(kContext, {"h", 0}, {})).message() ==
          "keys: at least one block key is needed");
    const Status big =
        ErrorOf(DecodePredictRequest,
                request(kContext, {"h", 0}, std::vector<BlockKey>(kMaxPredictKeys + 1, 7)));
    CHECK(big.code() == StatusCode::kPayloadTooLarge);
    CHECK(big.message() == "keys: 65537 block keys; one prediction holds at most 65536");
    CHECK(
        ErrorOf(DecodePredictRequest, request(kContext, {"h", 0}, {1}) + Bytes("\x00")).message() ==
        "payload: 1 trailing bytes");
    // An empty tenant is "default", as a lookup's.
    CHECK(
        DecodePredictRequest(request({"", "m", "", 4, ""}, {"h", 0}, {1})).value().context.tenant ==
        "default");
  }

  TEST_CASE("ProtocolPredicted: kPredict rejects every truncation, survives garbage") {
    testing::CheckRejectsEveryTruncation(PredictCodecs(), 7);
    testing::CheckSurvivesGarbage(PredictCodecs(), 8);
  }
}

}  // namespace
}  // namespace kvatlas::protocol
