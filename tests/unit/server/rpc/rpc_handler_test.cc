#include "server/rpc/rpc_handler.h"

#include <doctest/doctest.h>

#include <future>

#include "kvatlas/common/block_hasher.h"
#include "tests/support/in_memory_services.h"

namespace kvatlas::server {
namespace {

using protocol::Frame;
using protocol::MessageType;

using TestServer = testing::InMemoryServices;

Frame Request(MessageType type, uint64_t id, std::string payload) {
  Frame frame;
  frame.header.type = type;
  frame.header.request_id = id;
  frame.payload = std::move(payload);
  return frame;
}

// The one answer frame in `bytes`.
Frame OnlyAnswer(const std::string& bytes) {
  protocol::FrameDecoder decoder;
  decoder.Feed(bytes);
  Result<std::optional<Frame>> frame = decoder.Next();
  REQUIRE(frame.has_value());
  REQUIRE(frame->has_value());
  CHECK(decoder.buffered_bytes() == 0);
  CHECK((*frame)->header.is_response());
  return std::move(**frame);
}

BlockEvent Stored(std::vector<uint32_t> tokens) {
  BlockEvent event;
  event.context.model = "llama";
  event.context.block_size = 4;
  event.holder.id = "engine-a";
  event.token_ids = std::move(tokens);
  return event;
}

TEST_SUITE("RpcHandler") {
  TEST_CASE("RpcHandler: ping and stats are answered at once under the request's id") {
    TestServer s;
    const RpcHandler handler(&s.services);
    std::string out;
    CHECK_FALSE(handler.Handle(Request(MessageType::kPing, 7, ""), &out));
    Frame pong = OnlyAnswer(out);
    CHECK(pong.header.type == MessageType::kPing);
    CHECK(pong.header.request_id == 7);
    CHECK(pong.header.status == StatusCode::kOk);
    CHECK(pong.payload.empty());

    out.clear();
    CHECK_FALSE(handler.Handle(Request(MessageType::kStats, 8, ""), &out));
    Frame stats = OnlyAnswer(out);
    REQUIRE(stats.header.status == StatusCode::kOk);
    Result<protocol::StatsAnswer> decoded = protocol::DecodeStatsAnswer(stats.payload);
    REQUIRE(decoded.has_value());
    CHECK(decoded->json.find("\"revision\":0") != std::string::npos);
  }

  TEST_CASE("RpcHandler: bad requests are answered with their status, and change nothing") {
    TestServer s;
    const RpcHandler handler(&s.services);
    const struct {
      Frame request;
      MessageType answer_type;
      StatusCode code;
    } cases[] = {
        {Request(MessageType::kLookup, 1, "\x01"), MessageType::kLookup,
         StatusCode::kInvalidArgument},
        {Request(MessageType::kIngest, 2, "junk"), MessageType::kIngest,
         StatusCode::kInvalidArgument},
        {Request(MessageType::kLocate, 3, ""), MessageType::kLocate, StatusCode::kInvalidArgument},
        {Request(MessageType::kPing, 4, "x"), MessageType::kPing, StatusCode::kInvalidArgument},
        {Request(MessageType::kRoute, 7, ""), MessageType::kRoute, StatusCode::kInvalidArgument},
        {Request(static_cast<MessageType>(200), 5, ""), MessageType::kError,
         StatusCode::kInvalidArgument},
        {Request(MessageType::kError, 6, ""), MessageType::kError, StatusCode::kInvalidArgument},
    };
    for (const auto& c : cases) {
      CAPTURE(c.request.header.request_id);
      std::string out;
      CHECK_FALSE(handler.Handle(c.request, &out));
      const Frame answer = OnlyAnswer(out);
      CHECK(answer.header.type == c.answer_type);
      CHECK(answer.header.status == c.code);
      CHECK(answer.header.request_id == c.request.header.request_id);
      CHECK_FALSE(answer.payload.empty());  // the message
    }
    // A response sent as a request: kError, whatever its type.
    Frame response = Request(MessageType::kPing, 9, "");
    response.header.flags = protocol::kFlagResponse;
    std::string out;
    CHECK_FALSE(handler.Handle(response, &out));
    CHECK(OnlyAnswer(out).header.type == MessageType::kError);
    CHECK(s.machine.applied_revision() == 0);
    CHECK(s.metrics.Render(StateGauges{})
              .find("kvatlas_rpc_requests_total{type=\"error\",code=\"invalid_argument\"} 3") !=
          std::string::npos);
  }

  TEST_CASE("RpcHandler: an ingest is handed back for the applier, then answered") {
    TestServer s;
    const RpcHandler handler(&s.services);
    std::string out;
    const std::string payload =
        protocol::EncodeIngestRequest({{Stored({1, 2, 3, 4, 5, 6, 7, 8})}, std::nullopt});
    std::optional<PendingRequest> pending =
        handler.Handle(Request(MessageType::kIngest, 11, payload), &out);
    REQUIRE(pending.has_value());
    CHECK(out.empty());
    CHECK(pending->request_id == 11);
    CHECK(pending->answer.events == 1);
    CHECK(pending->answer.blocks == 2);

    Result<Revision> applied = s.applier.Submit(std::move(pending->batch)).get();
    REQUIRE(applied.has_value());
    handler.AppendIngestAnswer(*pending, applied, &out);
    const Frame answer = OnlyAnswer(out);
    CHECK(answer.header.type == MessageType::kIngest);
    CHECK(answer.header.request_id == 11);
    Result<IngestAnswer> decoded = protocol::DecodeIngestAnswerBinary(answer.payload);
    REQUIRE(decoded.has_value());
    CHECK(decoded->revision == *applied);
    CHECK(decoded->blocks == 2);

    out.clear();
    handler.AppendIngestAnswer(*pending, Status(StatusCode::kDeadlineExceeded, "late"), &out);
    const Frame late = OnlyAnswer(out);
    CHECK(late.header.status == StatusCode::kDeadlineExceeded);
    CHECK(late.payload == "late");

    // The lookup sees the ingest.
    LookupRequest lookup;
    lookup.context.model = "llama";
    lookup.context.block_size = 4;
    lookup.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    out.clear();
    CHECK_FALSE(handler.Handle(
        Request(MessageType::kLookup, 12, protocol::EncodeLookupRequestBinary(lookup)), &out));
    Result<LookupAnswer> found = protocol::DecodeLookupAnswerBinary(OnlyAnswer(out).payload);
    REQUIRE(found.has_value());
    CHECK(found->blocks_found == 2);
  }

  TEST_CASE("RpcHandler: an empty ingest answers the current revision without the applier") {
    TestServer s;
    const RpcHandler handler(&s.services);
    std::string out;
    CHECK_FALSE(
        handler.Handle(Request(MessageType::kIngest, 3, protocol::EncodeIngestRequest({})), &out));
    const Frame answer = OnlyAnswer(out);
    REQUIRE(answer.header.status == StatusCode::kOk);
    CHECK(protocol::DecodeIngestAnswerBinary(answer.payload)->events == 0);
  }

  TEST_CASE("RpcHandler: stream errors answer under the failed header, else id 0 and kError") {
    TestServer s;
    const RpcHandler handler(&s.services);
    protocol::FrameHeader header;
    header.type = MessageType::kLookup;
    header.request_id = 99;
    std::string out;
    handler.AppendStreamError(header, Status::PayloadTooLarge("too big"), &out);
    Frame answer = OnlyAnswer(out);
    CHECK(answer.header.type == MessageType::kLookup);
    CHECK(answer.header.request_id == 99);
    CHECK(answer.header.status == StatusCode::kPayloadTooLarge);
    out.clear();
    handler.AppendStreamError(std::nullopt, Status::InvalidArgument("version 9"), &out);
    answer = OnlyAnswer(out);
    CHECK(answer.header.type == MessageType::kError);
    CHECK(answer.header.request_id == 0);
  }
}

}  // namespace
}  // namespace kvatlas::server
