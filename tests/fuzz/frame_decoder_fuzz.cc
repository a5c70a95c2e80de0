// libFuzzer target for the binary protocol codec (docs/protocol.md): the input is a byte
// stream fed to a FrameDecoder in two pieces, and every frame it yields goes through every
// payload decoder. Beyond "no crash, no sanitizer report", it checks that whatever decodes
// re-encodes to a payload that decodes to the same value, and that a frame re-appended from
// its header and payload reads back unchanged.
//
// Seeds: run with KVATLAS_FUZZ_WRITE_SEEDS=DIR to write a few valid streams into DIR and
// exit (scripts/fuzz does this before fuzzing).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "kvatlas/common/protocol.h"

namespace kvatlas::protocol {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "frame_decoder_fuzz: property violated: %s\n", what);
  std::abort();
}

// decode(encode(decode(payload))) == decode(payload) whenever the first decode succeeds.
template <typename Decode, typename Encode, typename Same>
void CheckStable(std::string_view payload, Decode decode, Encode encode, Same same,
                 const char* what) {
  auto first = decode(payload);
  if (!first.has_value()) return;
  auto second = decode(encode(*first));
  Check(second.has_value() && same(*first, *second), what);
}

void DecodeEveryPayload(std::string_view p) {
  const auto eq = [](const auto& a, const auto& b) { return a == b; };
  CheckStable(p, DecodeIngestRequest, EncodeIngestRequest, eq, "ingest request");
  CheckStable(
      p, DecodeIngestAnswerBinary, EncodeIngestAnswerBinary,
      [](const IngestAnswer& a, const IngestAnswer& b) {
        return a.revision == b.revision && a.events == b.events && a.blocks == b.blocks;
      },
      "ingest answer");
  CheckStable(
      p, DecodeLookupRequestBinary, EncodeLookupRequestBinary,
      [](const LookupRequest& a, const LookupRequest& b) {
        return a.context == b.context && a.by_hash == b.by_hash && a.token_ids == b.token_ids &&
               a.seq_hashes == b.seq_hashes && a.instance_id == b.instance_id &&
               a.include_locations == b.include_locations;
      },
      "lookup request");
  CheckStable(p, DecodeLookupAnswerBinary, EncodeLookupAnswerBinary, eq, "lookup answer");
  CheckStable(p, DecodeLocateRequest, EncodeLocateRequest, eq, "locate request");
  CheckStable(p, DecodeLocateAnswer, EncodeLocateAnswer, eq, "locate answer");
  CheckStable(
      p, DecodeStatsAnswer, EncodeStatsAnswer,
      [](const StatsAnswer& a, const StatsAnswer& b) { return a.json == b.json; }, "stats answer");
  CheckStable(
      p, DecodeRouteRequestBinary, EncodeRouteRequestBinary,
      [](const RoutingRequest& a, const RoutingRequest& b) {
        return a.lookup.context == b.lookup.context && a.lookup.by_hash == b.lookup.by_hash &&
               a.lookup.token_ids == b.lookup.token_ids &&
               a.lookup.seq_hashes == b.lookup.seq_hashes && a.candidates == b.candidates &&
               a.options == b.options;
      },
      "route request");
  // With the predicted trailer: an answer without predictions encodes it as zeros, which
  // decode back to the same answer, so one encoder checks both shapes.
  CheckStable(
      p, DecodeRouteAnswerBinary,
      [](const RoutingAnswer& answer) { return EncodeRouteAnswerBinary(answer, true); }, eq,
      "route answer");
  CheckStable(p, DecodeWatchRequest, EncodeWatchRequest, eq, "watch request");
  CheckStable(p, DecodeWatchBatch, EncodeWatchBatch, eq, "watch batch");
  CheckStable(p, DecodeSnapshotRequest, EncodeSnapshotRequest, eq, "snapshot request");
  CheckStable(p, DecodeSnapshotPart, EncodeSnapshotPart, eq, "snapshot part");
  CheckStable(p, DecodeAuthRequest, EncodeAuthRequest, eq, "auth request");
  CheckStable(p, DecodeAuthAnswer, EncodeAuthAnswer, eq, "auth answer");
  CheckStable(p, DecodePredictRequest, EncodePredictRequest, eq, "predict request");
  CheckStable(p, DecodePredictAnswer, EncodePredictAnswer, eq, "predict answer");
  (void)DecodeWatchEnd(StatusCode::kWatchCut, p);  // never crashes, any bytes
  Check(!DecodeErrorPayload(StatusCode::kOk, p).ok(), "an error payload read as success");
}

// A few valid streams covering every message type, so that fuzzing starts past the header.
void WriteSeeds(const std::string& dir) {
  BlockEvent stored;
  stored.context = ContextKey{"default", "llama", "", 4, ""};
  stored.holder = HolderKey{"engine-a", 1};
  stored.medium = "cpu";
  stored.tier = Tier::kCpu;
  stored.seq_hashes = {11, 12};
  stored.parent_hash = 10;
  stored.token_ids = std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8};
  stored.locations = {"a", "b"};
  BlockEvent removed = stored;
  removed.type = EventType::kRemoved;
  removed.token_ids.reset();
  removed.locations.clear();
  removed.parent_hash.reset();
  LookupRequest lookup;
  lookup.context = stored.context;
  lookup.token_ids = {1, 2, 3, 4, 5};
  LookupAnswer lookup_answer;
  lookup_answer.context = stored.context;
  lookup_answer.instances.push_back(
      InstanceMatch{"engine-a", {1, 2, 2, 1, 0}, {{1, {1, 2, 2, 1, 0}}}});
  lookup_answer.shared.push_back(SharedMatch{"pool", 0, 1, {"x"}});
  LocateAnswer locate_answer{5,
                             {BlockCopy{stored.context, stored.holder, Tier::kDisk, 1, 1, 9, "l"}}};

  WatchRequest watch;
  watch.from = 3;
  watch.filter.model = "llama";
  watch.filter.tier = Tier::kGpu;
  WatchBatch batch;
  batch.through = 4;
  batch.records.push_back(FeedRecord{
      4, FeedOp::kStored, stored.context, stored.holder, Tier::kShared, {11, 12}, {"a", "b"}});
  FeedRecord predicted{4, FeedOp::kPredicted, stored.context, stored.holder, Tier::kGpu, {11}, {}};
  predicted.expires_at_ms = 1'796'000'000'000;
  batch.records.push_back(predicted);
  WatchRequest watch_predicted = watch;
  watch_predicted.filter.predicted = true;
  SnapshotPart part;
  part.revision = 4;
  part.context = stored.context;
  part.copies.push_back(SnapshotCopy{11, locate_answer.copies[0]});
  part.copies[0].copy.context = {};

  const auto frame = [](MessageType type, uint64_t id, std::string_view payload, uint8_t flags) {
    std::string out;
    AppendFrame(FrameHeader{kVersion, type, flags, StatusCode::kOk, id, 0}, payload, &out);
    return out;
  };
  const std::string seeds[] = {
      frame(MessageType::kIngest, 1, EncodeIngestRequest({{stored, removed}, std::nullopt}), 0),
      frame(MessageType::kLookup, 2, EncodeLookupRequestBinary(lookup), 0) +
          frame(MessageType::kLocate, 3, EncodeLocateRequest({11, stored.context}), 0) +
          frame(MessageType::kPing, 4, "", 0),
      frame(MessageType::kLookup, 2, EncodeLookupAnswerBinary(lookup_answer), kFlagResponse) +
          frame(MessageType::kLocate, 3, EncodeLocateAnswer(locate_answer), kFlagResponse),
      frame(MessageType::kIngest, 1, EncodeIngestAnswerBinary({7, 2, 4}), kFlagResponse) +
          frame(MessageType::kStats, 5, EncodeStatsAnswer({"{\"revision\":7}"}), kFlagResponse),
      frame(MessageType::kWatch, 6, EncodeWatchRequest(watch), 0) +
          frame(MessageType::kSnapshot, 7, EncodeSnapshotRequest({stored.context}), 0),
      frame(MessageType::kWatch, 6, EncodeWatchBatch(batch), kFlagResponse) +
          frame(MessageType::kSnapshot, 7, EncodeSnapshotPart(part), kFlagResponse),
      frame(MessageType::kWatch, 8, EncodeWatchRequest(watch_predicted), 0) +
          frame(MessageType::kPredict, 9,
                EncodePredictRequest({stored.context, stored.holder, {11}}), 0) +
          frame(MessageType::kPredict, 9, EncodePredictAnswer({1}), kFlagResponse),
      frame(MessageType::kAuth, 0, EncodeAuthRequest({"kvt_token"}), 0) +
          frame(MessageType::kAuth, 0, EncodeAuthAnswer({Role::kWrite, "vllm-0"}), kFlagResponse),
  };
  int n = 0;
  for (const std::string& seed : seeds) {
    std::ofstream(dir + "/seed-" + std::to_string(n++), std::ios::binary) << seed;
  }
}

}  // namespace
}  // namespace kvatlas::protocol

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  if (const char* dir = std::getenv("KVATLAS_FUZZ_WRITE_SEEDS")) {
    kvatlas::protocol::WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvatlas::protocol;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // A small limit so that the oversized-frame path is reachable from short inputs.
  FrameDecoder decoder(4096);
  // Split where the first byte says, so that frames straddling two Feed() calls are covered.
  const size_t split = size == 0 ? 0 : (static_cast<uint8_t>(input[0]) * size) / 256;
  decoder.Feed(input.substr(0, split));
  bool fed_all = false;
  while (true) {
    kvatlas::Result<std::optional<Frame>> next = decoder.Next();
    if (!next.has_value()) {
      Check(!decoder.Next().has_value(), "decoder recovered after an error");
      break;
    }
    if (!next->has_value()) {
      if (fed_all) break;
      decoder.Feed(input.substr(split));
      fed_all = true;
      continue;
    }
    const Frame& frame = **next;
    DecodeEveryPayload(frame.payload);
    std::string again;
    AppendFrame(frame.header, frame.payload, &again);
    FrameDecoder reread;
    reread.Feed(again);
    kvatlas::Result<std::optional<Frame>> back = reread.Next();
    Check(back.has_value() && back->has_value() && (*back)->header == frame.header &&
              (*back)->payload == frame.payload,
          "a re-appended frame did not read back");
  }
  return 0;
}
