#include "kvatlas/common/protocol.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/internal/bytes.h"
#include "tests/support/bytes_literal.h"
#include "tests/unit/common/codec_test_support.h"

namespace kvatlas::protocol {
namespace {

using kvatlas::testing::Bytes;

// --- random content (fixed seeds: a failure reproduces) -----------------------------------

class Gen : public testing::RandomContent {
 public:
  using RandomContent::RandomContent;

  std::vector<uint64_t> Hashes(size_t n) {
    std::vector<uint64_t> out(n);
    for (uint64_t& h : out) h = U64();
    return out;
  }
  std::vector<std::string> Strings(size_t n) {
    std::vector<std::string> out(n);
    for (std::string& s : out) s = Str();
    return out;
  }

  // A valid, canonical event: what DecodeIngestRequest returns unchanged.
  BlockEvent Event() {
    BlockEvent e;
    e.type = static_cast<EventType>(Below(3));
    if (Chance(2)) e.event_id = U64();
    if (Chance(2)) e.timestamp = static_cast<double>(U64() >> 11) / 1000.0;
    e.context = Context();
    e.holder = Holder();
    if (Chance(2)) {
      static const char* const kMedia[] = {"GPU", "cpu_pinned", "NVME", "shared", "weird-mem", ""};
      e.medium = kMedia[Below(6)];
      e.tier = TierFromMedium(*e.medium, &e.medium_known);
    } else {
      e.tier = static_cast<Tier>(Below(kNumTiers));
    }
    if (e.type == EventType::kCleared) return e;
    e.seq_hashes = Hashes(e.type == EventType::kRemoved ? 1 + Below(6) : Below(6));
    // Any position that leaves room for the event's blocks (ValidateBlockEvent).
    if (Chance(2)) e.base_block_idx = U32() % (kMaxBlockDepth - 16);
    if (e.type == EventType::kRemoved) return e;
    if (Chance(2)) e.parent_hash = U64();
    size_t blocks = e.seq_hashes.size();
    if (blocks == 0 || Chance(2)) {
      if (blocks == 0) blocks = 1 + Below(3);
      std::vector<uint32_t> tokens(blocks * e.context.block_size);
      for (uint32_t& t : tokens) t = U32();
      e.token_ids = std::move(tokens);
    }
    if (Chance(2)) e.locations = Strings(blocks);
    return e;
  }

  TierBlocks Blocks() { return TierBlocks{U32(), U32(), U32(), U32(), U32()}; }
};

// --- equality of the json_codec.h types that have no operator== ---------------------------

bool SameLookup(const LookupRequest& a, const LookupRequest& b) {
  return a.context == b.context && a.by_hash == b.by_hash && a.token_ids == b.token_ids &&
         a.seq_hashes == b.seq_hashes && a.instance_id == b.instance_id &&
         a.include_locations == b.include_locations && a.linearizable == b.linearizable &&
         a.min_revision == b.min_revision;
}

bool SameIngestAnswer(const IngestAnswer& a, const IngestAnswer& b) {
  return a.revision == b.revision && a.events == b.events && a.blocks == b.blocks;
}

// --- one valid sample of every payload, for the truncation and garbage tests -------------

IngestRequest RandomIngest(Gen* g) {
  IngestRequest r;
  r.events.resize(g->Below(5));
  for (BlockEvent& e : r.events) e = g->Event();
  return r;
}

LookupRequest RandomLookup(Gen* g) {
  LookupRequest r;
  r.context = g->Context();
  r.by_hash = g->Chance(2);
  if (r.by_hash) {
    r.seq_hashes = g->Hashes(g->Below(10));
  } else {
    r.token_ids.resize(g->Below(40));
    for (uint32_t& t : r.token_ids) t = g->U32();
  }
  if (g->Chance(2)) r.instance_id = g->Str();
  r.include_locations = g->Chance(2);
  return r;
}

LookupAnswer RandomLookupAnswer(Gen* g) {
  LookupAnswer a;
  a.revision = g->U64();
  a.context = g->Context();
  a.blocks_queried = g->U32();
  a.blocks_found = g->U32();
  a.instances.resize(g->Below(4));
  for (InstanceMatch& m : a.instances) {
    m.instance_id = g->Str();
    m.blocks = g->Blocks();
    m.dp_ranks.resize(g->Below(3));
    for (RankMatch& r : m.dp_ranks) r = RankMatch{g->U32(), g->Blocks()};
  }
  a.shared.resize(g->Below(3));
  for (SharedMatch& s : a.shared) {
    s = SharedMatch{g->Str(), g->U32(), g->U32(), g->Strings(g->Below(3))};
  }
  return a;
}

LocateRequest RandomLocate(Gen* g) {
  LocateRequest r;
  r.key = g->U64();
  if (g->Chance(2)) r.context = g->Context();
  return r;
}

LocateAnswer RandomLocateAnswer(Gen* g) {
  LocateAnswer a;
  a.revision = g->U64();
  a.copies.resize(g->Below(4));
  for (BlockCopy& c : a.copies) {
    c = BlockCopy{g->Context(), g->Holder(), static_cast<Tier>(g->Below(kNumTiers)),
                  g->U32(),     g->U32(),    g->U64(),
                  g->Str(30)};
  }
  return a;
}

using Codec = testing::Codec<Gen>;

template <typename T, typename Enc, typename Dec, typename Same>
std::function<bool(std::string_view)> StableFn(Enc encode, Dec decode, Same same) {
  return [=](std::string_view payload) {
    Result<T> first = decode(payload);
    if (!first) return true;
    Result<T> second = decode(encode(*first));
    return second.has_value() && same(*first, *second);
  };
}

std::vector<Codec> AllCodecs() {
  const auto eq = [](const auto& a, const auto& b) { return a == b; };
  return {
      {"ingest request", [](Gen* g) { return EncodeIngestRequest(RandomIngest(g)); },
       [](std::string_view p) { return DecodeIngestRequest(p).has_value(); },
       StableFn<IngestRequest>(EncodeIngestRequest, DecodeIngestRequest, eq)},
      {"ingest answer",
       [](Gen* g) {
         return EncodeIngestAnswerBinary(IngestAnswer{g->U64(), g->U64(), g->U64()});
       },
       [](std::string_view p) { return DecodeIngestAnswerBinary(p).has_value(); },
       StableFn<IngestAnswer>(EncodeIngestAnswerBinary, DecodeIngestAnswerBinary,
                              SameIngestAnswer)},
      {"lookup request", [](Gen* g) { return EncodeLookupRequestBinary(RandomLookup(g)); },
       [](std::string_view p) { return DecodeLookupRequestBinary(p).has_value(); },
       StableFn<LookupRequest>(EncodeLookupRequestBinary, DecodeLookupRequestBinary, SameLookup)},
      {"lookup answer", [](Gen* g) { return EncodeLookupAnswerBinary(RandomLookupAnswer(g)); },
       [](std::string_view p) { return DecodeLookupAnswerBinary(p).has_value(); },
       StableFn<LookupAnswer>(EncodeLookupAnswerBinary, DecodeLookupAnswerBinary, eq)},
      {"locate request", [](Gen* g) { return EncodeLocateRequest(RandomLocate(g)); },
       [](std::string_view p) { return DecodeLocateRequest(p).has_value(); },
       StableFn<LocateRequest>(EncodeLocateRequest, DecodeLocateRequest, eq)},
      {"locate answer", [](Gen* g) { return EncodeLocateAnswer(RandomLocateAnswer(g)); },
       [](std::string_view p) { return DecodeLocateAnswer(p).has_value(); },
       StableFn<LocateAnswer>(EncodeLocateAnswer, DecodeLocateAnswer, eq)},
      {"stats answer", [](Gen* g) { return EncodeStatsAnswer(StatsAnswer{g->Str(200)}); },
       [](std::string_view p) { return DecodeStatsAnswer(p).has_value(); },
       StableFn<StatsAnswer>(
           EncodeStatsAnswer, DecodeStatsAnswer,
           [](const StatsAnswer& a, const StatsAnswer& b) { return a.json == b.json; })},
      {"heartbeat request",
       [](Gen* g) {
         HeartbeatRequest r;
         for (uint64_t n = g->Below(4); n > 0; --n) r.holders.push_back(g->Holder());
         return EncodeHeartbeatRequest(r);
       },
       [](std::string_view p) { return DecodeHeartbeatRequest(p).has_value(); },
       StableFn<HeartbeatRequest>(EncodeHeartbeatRequest, DecodeHeartbeatRequest, eq)},
      {"heartbeat answer",
       [](Gen* g) {
         return EncodeHeartbeatAnswer(HeartbeatAnswer{g->U32(), g->U32()});
       },
       [](std::string_view p) { return DecodeHeartbeatAnswer(p).has_value(); },
       StableFn<HeartbeatAnswer>(EncodeHeartbeatAnswer, DecodeHeartbeatAnswer, eq)},
  };
}

std::string FrameBytes(MessageType type, uint64_t id, std::string_view payload, uint8_t flags = 0) {
  std::string out;
  AppendFrame(FrameHeader{kVersion, type, flags, StatusCode::kOk, id, 0}, payload, &out);
  return out;
}

// Every frame `decoder` yields until it needs more bytes; fails the test on an error.
std::vector<Frame> Drain(FrameDecoder* decoder) {
  std::vector<Frame> frames;
  while (true) {
    Result<std::optional<Frame>> next = decoder->Next();
    REQUIRE(next.has_value());
    if (!next->has_value()) return frames;
    frames.push_back(std::move(**next));
  }
}

TEST_SUITE("protocol") {
  TEST_CASE("Protocol: the header has the bytes docs/protocol.md gives") {
    std::string out = "x";  // AppendFrame appends
    AppendFrame(FrameHeader{kVersion, MessageType::kLookup, kFlagResponse, StatusCode::kNotFound,
                            0x0102030405060708ULL, 999},
                "abc", &out);
    CHECK(out == Bytes("x"
                       "\x13\x00\x00\x00"                  // length = 16 + 3
                       "\x01"                              // version
                       "\x02"                              // type: kLookup
                       "\x01"                              // flags: response
                       "\x00"                              // reserved
                       "\x02\x00"                          // status: not_found = 2
                       "\x00\x00"                          // reserved
                       "\x08\x07\x06\x05\x04\x03\x02\x01"  // request id
                       "abc"));
    CHECK(out.size() == 1 + kHeaderBytes + 3);

    FrameDecoder decoder;
    decoder.Feed(std::string_view(out).substr(1));
    Result<std::optional<Frame>> frame = decoder.Next();
    REQUIRE(frame.has_value());
    REQUIRE(frame->has_value());
    const FrameHeader& h = (*frame)->header;
    CHECK(h == FrameHeader{kVersion, MessageType::kLookup, kFlagResponse, StatusCode::kNotFound,
                           0x0102030405060708ULL, 3});
    CHECK(h.is_response());
    CHECK((*frame)->payload == "abc");
  }

  TEST_CASE("Protocol: message type and status numbers are stable") {
    CHECK(static_cast<int>(MessageType::kError) == 0);
    CHECK(static_cast<int>(MessageType::kIngest) == 1);
    CHECK(static_cast<int>(MessageType::kLookup) == 2);
    CHECK(static_cast<int>(MessageType::kLocate) == 3);
    CHECK(static_cast<int>(MessageType::kStats) == 4);
    CHECK(static_cast<int>(MessageType::kPing) == 5);
    CHECK(static_cast<int>(MessageType::kRoute) == 6);
    CHECK(static_cast<int>(MessageType::kWatch) == 7);
    CHECK(static_cast<int>(MessageType::kSnapshot) == 8);
    CHECK(static_cast<int>(MessageType::kHeartbeat) == 9);
    CHECK(static_cast<int>(MessageType::kAuth) == 10);
    CHECK(static_cast<int>(StatusCode::kUnauthenticated) == 18);
    CHECK(static_cast<int>(StatusCode::kPermissionDenied) == 19);
    CHECK(HttpStatusOf(StatusCode::kUnauthenticated) == 401);
    CHECK(HttpStatusOf(StatusCode::kPermissionDenied) == 403);
    CHECK(WireNameOf(StatusCode::kPermissionDenied) == "permission_denied");
    CHECK(kHeaderBytes == 20);
  }

  TEST_CASE("Protocol: payloads have the documented bytes") {
    SUBCASE("auth") {
      CHECK(EncodeAuthRequest({"kvt_ab"}) == Bytes("\x06kvt_ab"));
      CHECK(DecodeAuthRequest(Bytes("\x06kvt_ab")).value() == AuthRequest{"kvt_ab"});
      CHECK(EncodeAuthAnswer({Role::kWrite, "vllm-0"}) == Bytes("\x02\x06vllm-0"));
      CHECK(DecodeAuthAnswer(Bytes("\x02\x06vllm-0")).value() ==
            AuthAnswer{Role::kWrite, "vllm-0"});
      CHECK(DecodeAuthRequest(Bytes("\x00")).status().message() == "token: must not be empty");
      CHECK(DecodeAuthRequest(EncodeAuthRequest({std::string(1025, 't')}))
                .status()
                .message()
                .starts_with("token: 1025 bytes, longer than the limit of 1024"));
      CHECK(DecodeAuthRequest(Bytes("\x01tx")).status().message() == "payload: 1 trailing bytes");
      CHECK(DecodeAuthAnswer(Bytes("\x04\x00")).status().message().starts_with("role: must be"));
    }
    SUBCASE("heartbeat") {
      CHECK(EncodeHeartbeatRequest({{HolderKey{"a", 1}, HolderKey{"bc", 300}}}) ==
            Bytes("\x02"  // holders
                  "\x01"
                  "a\x01"  // "a", dp_rank 1
                  "\x02"
                  "bc\xac\x02"));  // "bc", dp_rank 300
      CHECK(EncodeHeartbeatAnswer({2, 30}) == Bytes("\x02\x1e"));
      CHECK(DecodeHeartbeatRequest(Bytes("\x01\x00\x00")).error().message() ==
            "holders[0].backend_id: must not be empty");
      std::string many;
      PutVarint64(&many, kMaxHeartbeatHolders + 1);
      many += std::string(2 * (kMaxHeartbeatHolders + 1), '\x01');
      CHECK(DecodeHeartbeatRequest(many).error().code() == StatusCode::kPayloadTooLarge);
    }
    SUBCASE("ingest answer") {
      CHECK(EncodeIngestAnswerBinary(IngestAnswer{0x0807060504030201ULL, 3, 300}) ==
            Bytes("\x01\x02\x03\x04\x05\x06\x07\x08"
                  "\x03"
                  "\xac\x02"));
    }
    SUBCASE("locate request") {
      CHECK(EncodeLocateRequest(LocateRequest{0xff, std::nullopt}) ==
            Bytes("\xff\x00\x00\x00\x00\x00\x00\x00"
                  "\x00"));
      CHECK(EncodeLocateRequest(LocateRequest{1, ContextKey{"t", "m", "", 16, "s"}}) ==
            Bytes("\x01\x00\x00\x00\x00\x00\x00\x00"
                  "\x01"
                  "\x01t\x01m\x00\x10\x01s"));
    }
    SUBCASE("lookup request by tokens") {
      LookupRequest r;
      r.context = ContextKey{"default", "m", "", 2, ""};
      r.token_ids = {1, 300};
      r.instance_id = "i";
      r.include_locations = true;
      CHECK(EncodeLookupRequestBinary(r) == Bytes("\x07"
                                                  "default"
                                                  "\x01m\x00\x02\x00"
                                                  "\x00"              // by_hash
                                                  "\x02\x01\xac\x02"  // token_ids
                                                  "\x01i"             // instance_id
                                                  "\x01"));           // include_locations
      // Read consistency is a trailer, present only when asked for: linearizable, and
      // min_revision 300.
      r.linearizable = true;
      r.min_revision = 300;
      CHECK(EncodeLookupRequestBinary(r) == Bytes("\x07"
                                                  "default"
                                                  "\x01m\x00\x02\x00"
                                                  "\x00"
                                                  "\x02\x01\xac\x02"
                                                  "\x01i"
                                                  "\x01"
                                                  "\x03\xac\x02"));  // consistency, min_revision
    }
    SUBCASE("a cleared event") {
      BlockEvent e;
      e.type = EventType::kCleared;
      e.context = ContextKey{"t", "m", "", 4, ""};
      e.holder = HolderKey{"h", 1};
      e.tier = Tier::kDisk;
      CHECK(EncodeIngestRequest(IngestRequest{{e}, std::nullopt}) ==
            Bytes("\x01"                    // 1 event
                  "\x02"                    // cleared
                  "\x00\x00"                // id, time
                  "\x01t\x01m\x00\x04\x00"  // ctx
                  "\x01h\x01"               // holder
                  "\x00\x02"                // medium, tier
                  "\x00"                    // seq_hashes
                  "\x00\x00\x00"            // optionals
                  "\x00"));                 // locations
    }
    SUBCASE("error and stats") {
      CHECK(EncodeErrorPayload(Status::NotFound("gone")) == "gone");
      CHECK(DecodeErrorPayload(StatusCode::kNotFound, "gone") == Status::NotFound("gone"));
      CHECK(DecodeErrorPayload(StatusCode::kOk, "x").code() == StatusCode::kInternal);
      CHECK(EncodeStatsAnswer(StatsAnswer{"{}"}) == Bytes("\x02{}"));
    }
  }

  TEST_CASE("Protocol: every message round-trips with random content") {
    Gen g(20261129);
    for (int i = 0; i < 300; ++i) {
      CAPTURE(i);
      const IngestRequest ingest = RandomIngest(&g);
      Result<IngestRequest> ingest_back = DecodeIngestRequest(EncodeIngestRequest(ingest));
      REQUIRE(ingest_back.has_value());
      CHECK(*ingest_back == ingest);

      const IngestAnswer answer{g.U64(), g.U64(), g.U64()};
      Result<IngestAnswer> answer_back = DecodeIngestAnswerBinary(EncodeIngestAnswerBinary(answer));
      REQUIRE(answer_back.has_value());
      CHECK(SameIngestAnswer(*answer_back, answer));

      // With the read-consistency trailer too (not in RandomLookup: a payload cut just
      // before an optional trailer is still whole, so the truncation test leaves it out).
      LookupRequest lookup = RandomLookup(&g);
      lookup.linearizable = g.Chance(3);
      if (g.Chance(3)) lookup.min_revision = g.U64();
      Result<LookupRequest> lookup_back =
          DecodeLookupRequestBinary(EncodeLookupRequestBinary(lookup));
      REQUIRE(lookup_back.has_value());
      CHECK(SameLookup(*lookup_back, lookup));

      const LookupAnswer lookup_answer = RandomLookupAnswer(&g);
      CHECK(DecodeLookupAnswerBinary(EncodeLookupAnswerBinary(lookup_answer)).value() ==
            lookup_answer);
      const LocateRequest locate = RandomLocate(&g);
      CHECK(DecodeLocateRequest(EncodeLocateRequest(locate)).value() == locate);
      const LocateAnswer locate_answer = RandomLocateAnswer(&g);
      CHECK(DecodeLocateAnswer(EncodeLocateAnswer(locate_answer)).value() == locate_answer);
      const StatsAnswer stats{g.Str(100)};
      CHECK(DecodeStatsAnswer(EncodeStatsAnswer(stats)).value().json == stats.json);
      const Status error(StatusCode::kResourceExhausted, g.Str());
      CHECK(DecodeErrorPayload(error.code(), EncodeErrorPayload(error)) == error);
    }
  }

  TEST_CASE("Protocol: extreme values round-trip") {
    constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
    constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
    const IngestAnswer answer{kMax64, kMax64, 0};
    CHECK(SameIngestAnswer(DecodeIngestAnswerBinary(EncodeIngestAnswerBinary(answer)).value(),
                           answer));
    LocateAnswer locate;
    locate.revision = kMax64;
    locate.copies.push_back(BlockCopy{ContextKey{"t", "m", "", kMax32, ""}, HolderKey{"h", kMax32},
                                      Tier::kShared, kMax32, kMax32, kMax64,
                                      std::string(100000, 'L')});
    CHECK(DecodeLocateAnswer(EncodeLocateAnswer(locate)).value() == locate);
  }

  TEST_CASE("Protocol: the frame decoder splits any chunking of pipelined frames") {
    Gen g(7);
    std::vector<std::string> payloads;
    std::string stream;
    for (uint64_t id = 1; id <= 40; ++id) {
      payloads.push_back(g.Str(id % 7 == 0 ? 5000 : 50));
      stream += FrameBytes(static_cast<MessageType>(id % 6), id * 1000003, payloads.back());
    }
    const auto check_frames = [&](const std::vector<Frame>& frames) {
      REQUIRE(frames.size() == payloads.size());
      for (size_t i = 0; i < frames.size(); ++i) {
        CHECK(frames[i].header.request_id == (i + 1) * 1000003);
        CHECK(frames[i].header.type == static_cast<MessageType>((i + 1) % 6));
        CHECK(frames[i].header.payload_bytes == payloads[i].size());
        CHECK(frames[i].payload == payloads[i]);
      }
    };

    SUBCASE("all at once") {
      FrameDecoder decoder;
      decoder.Feed(stream);
      check_frames(Drain(&decoder));
      CHECK(decoder.buffered_bytes() == 0);
    }
    SUBCASE("byte by byte") {
      FrameDecoder decoder;
      std::vector<Frame> frames;
      for (char c : stream) {
        decoder.Feed(std::string_view(&c, 1));
        for (Frame& f : Drain(&decoder)) frames.push_back(std::move(f));
      }
      check_frames(frames);
    }
    SUBCASE("random chunks") {
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        Gen chunks(seed);
        FrameDecoder decoder;
        std::vector<Frame> frames;
        for (size_t at = 0; at < stream.size();) {
          const size_t n = std::min<size_t>(stream.size() - at, 1 + chunks.Below(300));
          decoder.Feed(std::string_view(stream).substr(at, n));
          at += n;
          for (Frame& f : Drain(&decoder)) frames.push_back(std::move(f));
        }
        check_frames(frames);
        CHECK(decoder.buffered_bytes() == 0);
      }
    }
  }

  TEST_CASE("Protocol: a truncated frame waits for more bytes") {
    const std::string frame = FrameBytes(MessageType::kPing, 5, "payload");
    for (size_t n = 0; n < frame.size(); ++n) {
      CAPTURE(n);
      FrameDecoder decoder;
      decoder.Feed(std::string_view(frame).substr(0, n));
      Result<std::optional<Frame>> next = decoder.Next();
      REQUIRE(next.has_value());
      CHECK_FALSE(next->has_value());
      CHECK(decoder.buffered_bytes() == n);
      decoder.Feed(std::string_view(frame).substr(n));
      next = decoder.Next();
      REQUIRE(next.has_value());
      REQUIRE(next->has_value());
      CHECK((*next)->header.request_id == 5);
      CHECK((*next)->payload == "payload");
    }
  }

  TEST_CASE("Protocol: an empty payload is a complete frame") {
    FrameDecoder decoder;
    decoder.Feed(FrameBytes(MessageType::kStats, 9, ""));
    std::vector<Frame> frames = Drain(&decoder);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0].payload.empty());
    CHECK(frames[0].header.type == MessageType::kStats);
  }

  TEST_CASE("Protocol: unknown types, status numbers and reserved bytes pass through") {
    std::string frame = FrameBytes(static_cast<MessageType>(200), 1, "x");
    frame[7] = 0x55;  // reserved
    frame[8] = 0x7f;  // status 0x7f7f: not in status_codes.def
    frame[9] = 0x7f;
    frame[10] = 0x01;  // reserved
    FrameDecoder decoder;
    decoder.Feed(frame + FrameBytes(MessageType::kPing, 2, ""));
    std::vector<Frame> frames = Drain(&decoder);
    REQUIRE(frames.size() == 2);
    CHECK(static_cast<int>(frames[0].header.type) == 200);
    CHECK(frames[0].header.status == StatusCode::kInternal);
    CHECK(frames[1].header.request_id == 2);
  }

  TEST_CASE("Protocol: a stream that cannot become valid fails the decoder for good") {
    const std::string good = FrameBytes(MessageType::kPing, 1, "");
    std::string bad;
    StatusCode code = StatusCode::kOk;
    std::optional<uint64_t> header_id;
    SUBCASE("unknown version") {
      bad = FrameBytes(MessageType::kPing, 2, "");
      bad[4] = 2;
      code = StatusCode::kInvalidArgument;
    }
    SUBCASE("length below the header") {
      bad = FrameBytes(MessageType::kPing, 3, "");
      bad[0] = 15;
      code = StatusCode::kInvalidArgument;
      header_id = 3;
    }
    SUBCASE("payload over the decoder's limit") {
      bad = FrameBytes(MessageType::kIngest, 4, std::string(1025, 'p'));
      code = StatusCode::kPayloadTooLarge;
      header_id = 4;
    }
    SUBCASE("length over the hard limit, before its bytes arrive") {
      bad = FrameBytes(MessageType::kIngest, 5, "");
      bad[0] = bad[1] = bad[2] = bad[3] = '\xff';
      code = StatusCode::kPayloadTooLarge;
      header_id = 5;
    }
    FrameDecoder decoder(1024);
    decoder.Feed(good + bad + good);
    Result<std::optional<Frame>> first = decoder.Next();
    REQUIRE(first.has_value());
    REQUIRE(first->has_value());
    for (int i = 0; i < 3; ++i) {
      Result<std::optional<Frame>> next = decoder.Next();
      REQUIRE_FALSE(next.has_value());
      CHECK(next.error().code() == code);
      decoder.Feed(good);
    }
    REQUIRE(decoder.failed_header().has_value() == header_id.has_value());
    if (header_id) CHECK(decoder.failed_header()->request_id == *header_id);
  }

  TEST_CASE("Protocol: the decoder's limit is capped by kMaxPayloadBytes") {
    FrameDecoder decoder(std::numeric_limits<uint32_t>::max());
    std::string frame = FrameBytes(MessageType::kIngest, 1, "");
    const uint32_t length = kMaxPayloadBytes + 17;
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    decoder.Feed(frame);
    Result<std::optional<Frame>> next = decoder.Next();
    REQUIRE_FALSE(next.has_value());
    CHECK(next.error().code() == StatusCode::kPayloadTooLarge);
  }

  TEST_CASE("Protocol: every payload decoder rejects every truncation") {
    testing::CheckRejectsEveryTruncation(AllCodecs(), 99);
  }

  TEST_CASE("Protocol: payload decoders survive random garbage and bit flips") {
    testing::CheckSurvivesGarbage(AllCodecs(), 4242);
  }

  TEST_CASE("Protocol: a huge count with few bytes fails before allocating") {
    std::string payload;
    PutVarint64(&payload, std::numeric_limits<uint64_t>::max() >> 1);
    CHECK_FALSE(DecodeIngestRequest(payload).has_value());
    CHECK_FALSE(DecodeLocateAnswer(std::string(8, '\0') + payload).has_value());
  }

  TEST_CASE("Protocol: the ingest decoder enforces what POST /v1/events enforces") {
    BlockEvent e;
    e.context = ContextKey{"t", "m", "", 4, ""};
    e.holder = HolderKey{"h", 0};
    e.seq_hashes = {1, 2};
    const auto error_of = [](const BlockEvent& event) {
      Result<IngestRequest> r = DecodeIngestRequest(
          EncodeIngestRequest(IngestRequest{{BlockEvent(), event}, std::nullopt}));
      return r.has_value() ? std::string("ok") : r.error().ToString();
    };
    REQUIRE(error_of(e).find("events[0].") != std::string::npos);  // a default event is invalid
    const auto second_error = [&](const BlockEvent& event) {
      BlockEvent valid = e;
      Result<IngestRequest> r =
          DecodeIngestRequest(EncodeIngestRequest(IngestRequest{{valid, event}, std::nullopt}));
      return r.has_value() ? std::string("ok") : r.error().ToString();
    };
    CHECK(second_error(e) == "ok");
    BlockEvent bad = e;
    SUBCASE("block_size 0") {
      bad.context.block_size = 0;
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].block_size:"));
    }
    SUBCASE("no holder") {
      bad.holder.id.clear();
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].backend_id:"));
    }
    SUBCASE("tokens that do not cover the hashes") {
      bad.token_ids = std::vector<uint32_t>(5, 1);
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].token_ids:"));
    }
    SUBCASE("locations not one per block") {
      bad.locations = {"a"};
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].location:"));
    }
    SUBCASE("a removed event without hashes") {
      bad.type = EventType::kRemoved;
      bad.seq_hashes.clear();
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].seq_hashes:"));
    }
    SUBCASE("a non-finite timestamp") {
      bad.timestamp = std::nan("");
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].timestamp:"));
    }
    SUBCASE("a tier that contradicts the medium") {
      bad.medium = "cpu";
      bad.tier = Tier::kDisk;
      CHECK(second_error(bad).starts_with("invalid_argument: events[1].tier:"));
    }
    SUBCASE("an unknown tier or event type byte") {
      std::string payload = EncodeIngestRequest(IngestRequest{{e}, std::nullopt});
      std::string tier_bad = payload;
      // count, type, 2 presence bytes, context (1+1 +1+1 +1 +1 +1), holder (1+1 +1), medium
      const size_t tier_at = 1 + 1 + 2 + 7 + 3 + 1;
      REQUIRE(tier_bad[tier_at] == 0);
      tier_bad[tier_at] = 4;
      CHECK(DecodeIngestRequest(tier_bad).error().message().starts_with("events[0].tier:"));
      std::string type_bad = payload;
      type_bad[1] = 3;
      CHECK(DecodeIngestRequest(type_bad).error().message().starts_with("events[0].event_type:"));
    }
  }

  TEST_CASE("Protocol: the ingest decoder normalises events as the JSON decoder does") {
    BlockEvent e;
    e.type = EventType::kCleared;
    e.context = ContextKey{"", "m", "", 4, ""};
    e.holder = HolderKey{"h", 0};
    e.seq_hashes = {1};
    e.parent_hash = 5;
    e.token_ids = std::vector<uint32_t>{};
    e.locations = {"x"};
    e.base_block_idx = 3;
    Result<IngestRequest> r =
        DecodeIngestRequest(EncodeIngestRequest(IngestRequest{{e}, std::nullopt}));
    REQUIRE(r.has_value());
    const BlockEvent& d = r->events[0];
    CHECK(d.context.tenant == "default");  // empty tenant = the default one
    CHECK(d.seq_hashes.empty());           // fields REST ignores for the type are dropped
    CHECK_FALSE(d.parent_hash.has_value());
    CHECK_FALSE(d.token_ids.has_value());
    CHECK_FALSE(d.base_block_idx.has_value());
    CHECK(d.locations.empty());
  }

  TEST_CASE("Protocol: the ingest writer is an optional trailer") {
    BlockEvent e;
    e.type = EventType::kCleared;
    e.context = ContextKey{"t", "m", "", 4, ""};
    e.holder = HolderKey{"h", 1};
    const std::string plain = EncodeIngestRequest(IngestRequest{{e}, std::nullopt});
    const IngestRequest with{{e}, WriterPosition{"w-1", 300}};
    const std::string trailed = EncodeIngestRequest(with);
    // The same bytes as a request without a writer, then flag, str writer_id, varint seq.
    CHECK(trailed == plain + Bytes("\x01\x03w-1\xac\x02"));
    CHECK(DecodeIngestRequest(trailed).value() == with);
    CHECK_FALSE(DecodeIngestRequest(plain).value().writer.has_value());
    CHECK(DecodeIngestRequest(plain + Bytes("\x00")).error().message() ==
          "writer: must be 0x01 when present");
    CHECK(DecodeIngestRequest(plain + Bytes("\x01\x03w-1")).error().message() ==
          "writer_sequence: truncated or malformed");
    CHECK(DecodeIngestRequest(plain + Bytes("\x01\x03w-1\x00")).error().message() ==
          "writer_sequence: must be a positive integer");
    CHECK(DecodeIngestRequest(plain + Bytes("\x01\x03w/1\x01"))
              .error()
              .message()
              .starts_with("writer_id: only letters"));
    CHECK(DecodeIngestRequest(plain + Bytes("\x01\x00\x01"))
              .error()
              .message()
              .starts_with("writer_id: must be 1 to 128 bytes"));
    CHECK(DecodeIngestRequest(trailed + "x").error().message() ==
          "event_flags: has 120 entries; expected one per event (1)");
  }

  TEST_CASE("Protocol: the ingest event flags are an optional trailer after the writer") {
    BlockEvent stored;
    stored.type = EventType::kStored;
    stored.context = ContextKey{"t", "m", "", 4, ""};
    stored.holder = HolderKey{"h", 1};
    stored.seq_hashes = {7};
    BlockEvent cleared = stored;
    cleared.type = EventType::kCleared;
    cleared.seq_hashes.clear();
    const std::string plain = EncodeIngestRequest(IngestRequest{{stored, cleared}, std::nullopt});
    stored.origin = BlockOrigin::kReused;
    cleared.clear_all_contexts = true;
    const IngestRequest flagged{{stored, cleared}, std::nullopt};
    // No writer (flag 0x00), two events: reused (2), clear of every context (4).
    CHECK(EncodeIngestRequest(flagged) == plain + Bytes("\x00\x02\x02\x04"));
    CHECK(DecodeIngestRequest(EncodeIngestRequest(flagged)).value() == flagged);
    const IngestRequest both{{stored, cleared}, WriterPosition{"w-1", 300}};
    CHECK(EncodeIngestRequest(both) == plain + Bytes("\x01\x03w-1\xac\x02\x02\x02\x04"));
    CHECK(DecodeIngestRequest(EncodeIngestRequest(both)).value() == both);
    // Flags that do not apply to the event type are dropped, as the JSON decoder does.
    const IngestRequest swapped = DecodeIngestRequest(plain + Bytes("\x00\x02\x04\x02")).value();
    CHECK_FALSE(swapped.events[0].clear_all_contexts);
    CHECK_FALSE(swapped.events[1].origin.has_value());
    // One encoding per request, and every byte checked.
    CHECK(DecodeIngestRequest(plain + Bytes("\x00\x02\x00\x00")).error().message() ==
          "event_flags: present, but no event has a flag");
    CHECK(DecodeIngestRequest(plain + Bytes("\x00\x01\x02")).error().message() ==
          "event_flags: has 1 entries; expected one per event (2)");
    CHECK(DecodeIngestRequest(plain + Bytes("\x00\x02\x03\x00"))
              .error()
              .message()
              .starts_with("event_flags: 3 is not a flag byte"));
    CHECK(DecodeIngestRequest(plain + Bytes("\x00\x02\x08\x00"))
              .error()
              .message()
              .starts_with("event_flags: 8 is not a flag byte"));
    CHECK(DecodeIngestRequest(plain + Bytes("\x00\x02\x02")).error().code() ==
          StatusCode::kInvalidArgument);  // truncated
  }

  TEST_CASE("Protocol: the lookup and locate decoders check the context") {
    LookupRequest r;
    r.context = ContextKey{"", "m", "", 16, ""};
    r.token_ids = {1, 2, 3};
    CHECK(DecodeLookupRequestBinary(EncodeLookupRequestBinary(r)).value().context.tenant ==
          "default");
    r.context.model.clear();
    CHECK(DecodeLookupRequestBinary(EncodeLookupRequestBinary(r))
              .error()
              .message()
              .starts_with("model_name:"));
    r.context.model = "m";
    r.context.block_size = 0;
    CHECK(DecodeLookupRequestBinary(EncodeLookupRequestBinary(r))
              .error()
              .message()
              .starts_with("block_size:"));
    CHECK(DecodeLocateRequest(EncodeLocateRequest(LocateRequest{1, r.context})).error().code() ==
          StatusCode::kInvalidArgument);
  }

  TEST_CASE("Protocol: a decode error names the field that failed") {
    LocateAnswer a;
    a.copies.push_back(
        BlockCopy{ContextKey{"t", "m", "", 1, ""}, HolderKey{"h", 0}, Tier::kCpu, 1, 1, 1, "loc"});
    a.copies.push_back(a.copies[0]);
    std::string payload = EncodeLocateAnswer(a);
    payload.pop_back();
    const Result<LocateAnswer> r = DecodeLocateAnswer(payload);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code() == StatusCode::kInvalidArgument);
    CHECK(r.error().message() == "copies[1].location: truncated or malformed");
    CHECK(DecodeLocateAnswer(EncodeLocateAnswer(a) + "zz").error().message() ==
          "payload: 2 trailing bytes");
  }
}

}  // namespace
}  // namespace kvatlas::protocol
