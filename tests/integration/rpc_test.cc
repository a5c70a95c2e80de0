// The binary protocol (docs/protocol.md) against the real server binary, through a raw
// POSIX-socket client built on the protocol codec: answers are compared with REST's.
#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/protocol.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/raw_rpc_connection.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using protocol::Frame;
using protocol::FrameHeader;
using protocol::MessageType;

constexpr uint32_t kBlockSize = 16;

// RawRpcConnection with request ids of its own for one-call-at-a-time use.
class RawClient : public RawRpcConnection {
 public:
  using RawRpcConnection::RawRpcConnection;

  // One request, its answer (which must carry its id).
  Frame Call(MessageType type, std::string_view payload) {
    const uint64_t id = ++next_id_;
    Send(type, id, payload);
    std::optional<Frame> answer = Read();
    REQUIRE(answer.has_value());
    CHECK(answer->header.request_id == id);
    CHECK(answer->header.is_response());
    return std::move(*answer);
  }

 private:
  uint64_t next_id_ = 1000;
};

json Event(const std::string& backend, const std::string& medium,
           const std::vector<uint32_t>& tokens) {
  return json{{"event_type", "stored"}, {"model_name", "llama"}, {"block_size", kBlockSize},
              {"backend_id", backend},  {"medium", medium},      {"token_ids", tokens}};
}

std::string IngestPayload(const json& events) {
  Result<std::vector<BlockEvent>> decoded = DecodeEventBatch(events.dump());
  REQUIRE(decoded.has_value());
  return protocol::EncodeIngestRequest({std::move(*decoded), std::nullopt});
}

json LookupJson(const std::vector<uint32_t>& tokens) {
  return json{{"model_name", "llama"}, {"block_size", kBlockSize}, {"token_ids", tokens}};
}

std::string LookupPayload(const json& lookup) {
  Result<LookupRequest> decoded = DecodeLookupRequest(lookup.dump());
  REQUIRE(decoded.has_value());
  return protocol::EncodeLookupRequestBinary(*decoded);
}

IngestAnswer IngestOk(RawClient& rpc, const json& events) {
  const Frame answer = rpc.Call(MessageType::kIngest, IngestPayload(events));
  REQUIRE(answer.header.status == StatusCode::kOk);
  CHECK(answer.header.type == MessageType::kIngest);
  Result<IngestAnswer> decoded = protocol::DecodeIngestAnswerBinary(answer.payload);
  REQUIRE(decoded.has_value());
  return *decoded;
}

LookupAnswer LookupOk(RawClient& rpc, const json& lookup) {
  const Frame answer = rpc.Call(MessageType::kLookup, LookupPayload(lookup));
  REQUIRE(answer.header.status == StatusCode::kOk);
  Result<LookupAnswer> decoded = protocol::DecodeLookupAnswerBinary(answer.payload);
  REQUIRE(decoded.has_value());
  return *decoded;
}

struct RpcServer {
  explicit RpcServer(std::vector<std::string> args = {})
      : server(dir.path() / "data", std::move(args)), client(server.Client()) {
    REQUIRE(server.rpc_port() > 0);
  }
  TempDir dir;
  ServerProcess server;
  httplib::Client client;
};

TEST_SUITE("Integration.Rpc") {
  TEST_CASE("RPC: ping is answered with an empty payload under its id") {
    RpcServer f;
    RawClient rpc(f.server.rpc_port());
    const Frame pong = rpc.Call(MessageType::kPing, "");
    CHECK(pong.header.type == MessageType::kPing);
    CHECK(pong.header.status == StatusCode::kOk);
    CHECK(pong.header.version == protocol::kVersion);
    CHECK(pong.payload.empty());
  }

  TEST_CASE("RPC: ingest, then lookups answer what REST answers") {
    RpcServer f;
    RawClient rpc(f.server.rpc_port());
    const std::vector<uint32_t> prompt = Tokens(1, 4 * kBlockSize);
    const std::vector<uint32_t> head(prompt.begin(), prompt.begin() + 2 * kBlockSize);
    const IngestAnswer ack =
        IngestOk(rpc, json::array({Event("engine-a", "gpu", prompt), Event("engine-b", "cpu", head),
                                   Event("pool", "shared", head)}));
    CHECK(ack.events == 3);
    CHECK(ack.blocks == 4 + 2 + 2);
    CHECK(ack.revision >= 1);

    for (const json& lookup : {LookupJson(prompt), LookupJson(head), LookupJson(Tokens(9, 40))}) {
      CAPTURE(lookup);
      const LookupAnswer binary = LookupOk(rpc, lookup);
      const Answer rest = Post(f.client, "/v1/lookup", lookup);
      REQUIRE(rest.status == 200);
      CHECK(binary.revision == ack.revision);
      CHECK(rest.body["revision"] == binary.revision);
      CHECK(rest.body["blocks_queried"] == binary.blocks_queried);
      CHECK(rest.body["blocks_found"] == binary.blocks_found);
      CHECK(rest.body["instances"].size() == binary.instances.size());
      // Every field: the binary answer, written as REST writes it, is REST's answer.
      CHECK(json::parse(EncodeLookupAnswer(binary)) == rest.body);
    }
    const LookupAnswer full = LookupOk(rpc, LookupJson(prompt));
    CHECK(full.blocks_found == 4);
    REQUIRE(full.instances.size() == 2);
    CHECK(full.instances[0].instance_id == "engine-a");
    CHECK(full.instances[0].blocks.gpu == 4);
    REQUIRE(full.shared.size() == 1);
    CHECK(full.shared[0].blocks == 2);
  }

  TEST_CASE("RPC: 100 pipelined requests in one write get 100 answers by id") {
    RpcServer f;
    RawClient rpc(f.server.rpc_port());
    const std::vector<uint32_t> prompt = Tokens(1, 2 * kBlockSize);
    std::string burst;
    RawClient::Append(MessageType::kIngest, 1,
                      IngestPayload(json::array({Event("e", "gpu", prompt)})), &burst);
    for (uint64_t id = 2; id <= 100; ++id) {
      if (id % 2 == 0) {
        RawClient::Append(MessageType::kLookup, id, LookupPayload(LookupJson(prompt)), &burst);
      } else {
        RawClient::Append(MessageType::kPing, id, "", &burst);
      }
    }
    rpc.SendRaw(burst);
    std::set<uint64_t> ids;
    for (int i = 0; i < 100; ++i) {
      std::optional<Frame> answer = rpc.Read();
      REQUIRE(answer.has_value());
      CHECK(answer->header.status == StatusCode::kOk);
      const uint64_t id = answer->header.request_id;
      CHECK(answer->header.type == (id == 1       ? MessageType::kIngest
                                    : id % 2 == 0 ? MessageType::kLookup
                                                  : MessageType::kPing));
      ids.insert(id);
    }
    CHECK(ids.size() == 100);
    CHECK(*ids.begin() == 1);
    CHECK(*ids.rbegin() == 100);
    CHECK(LookupOk(rpc, LookupJson(prompt)).blocks_found == 2);
  }

  TEST_CASE("RPC: locate and stats answer what REST answers") {
    RpcServer f;
    RawClient rpc(f.server.rpc_port());
    const std::vector<uint32_t> prompt = Tokens(1, 3 * kBlockSize);
    json located = Event("pool", "shared", prompt);
    located["locations"] = {"a", "b", "c"};
    const IngestAnswer ack = IngestOk(rpc, json::array({Event("e", "gpu", prompt), located}));
    const uint64_t key = ReferenceSeqHashes(prompt, kBlockSize)[1];

    const Frame answer = rpc.Call(MessageType::kLocate, protocol::EncodeLocateRequest({key, {}}));
    REQUIRE(answer.header.status == StatusCode::kOk);
    Result<protocol::LocateAnswer> locate = protocol::DecodeLocateAnswer(answer.payload);
    REQUIRE(locate.has_value());
    CHECK(locate->revision == ack.revision);
    const json rest = Get(f.client, "/v1/blocks/" + std::to_string(key)).body;
    REQUIRE(rest["copies"].size() == locate->copies.size());
    REQUIRE(locate->copies.size() == 2);
    for (size_t i = 0; i < locate->copies.size(); ++i) {
      const protocol::BlockCopy& copy = locate->copies[i];
      CHECK(rest["copies"][i]["holder_id"] == copy.holder.id);
      CHECK(rest["copies"][i]["tier"] == TierName(copy.tier));
      CHECK(rest["copies"][i]["depth"] == copy.depth);
      CHECK(rest["copies"][i]["location"] == copy.location);
      CHECK(rest["copies"][i]["context"]["model_name"] == copy.context.model);
    }
    const Frame unknown =
        rpc.Call(MessageType::kLocate, protocol::EncodeLocateRequest({key + 1, {}}));
    REQUIRE(unknown.header.status == StatusCode::kOk);
    CHECK(protocol::DecodeLocateAnswer(unknown.payload)->copies.empty());

    const Frame stats = rpc.Call(MessageType::kStats, "");
    REQUIRE(stats.header.status == StatusCode::kOk);
    Result<protocol::StatsAnswer> decoded = protocol::DecodeStatsAnswer(stats.payload);
    REQUIRE(decoded.has_value());
    const json binary = json::parse(decoded->json);
    const json rest_stats = Get(f.client, "/v1/stats").body;
    CHECK(binary["revision"] == rest_stats["revision"]);
    CHECK(binary["index"] == rest_stats["index"]);
    CHECK(binary["hash_seed"] == 1337);

    const auto metrics = f.client.Get("/metrics");
    REQUIRE(metrics);
    CHECK(metrics->body.find("kvatlas_rpc_requests_total{type=\"locate\",code=\"ok\"} 2") !=
          std::string::npos);
    CHECK(metrics->body.find("kvatlas_rpc_connections 1\n") != std::string::npos);
  }

  TEST_CASE("RPC: a malformed request gets an error answer under its id; the connection goes on") {
    RpcServer f;
    RawClient rpc(f.server.rpc_port());
    const Frame bad = rpc.Call(MessageType::kLookup, "\x07garbage");
    CHECK(bad.header.type == MessageType::kLookup);
    CHECK(bad.header.status == StatusCode::kInvalidArgument);
    CHECK_FALSE(bad.payload.empty());

    const Frame bad_ingest = rpc.Call(MessageType::kIngest, "\xff\xff");
    CHECK(bad_ingest.header.status == StatusCode::kInvalidArgument);

    const Frame unknown_type = rpc.Call(static_cast<MessageType>(42), "");
    CHECK(unknown_type.header.type == MessageType::kError);
    CHECK(unknown_type.header.status == StatusCode::kInvalidArgument);

    const Frame stats_with_payload = rpc.Call(MessageType::kStats, "x");
    CHECK(stats_with_payload.header.status == StatusCode::kInvalidArgument);
    const Frame directory_with_payload = rpc.Call(MessageType::kDirectory, "x");
    CHECK(directory_with_payload.header.status == StatusCode::kInvalidArgument);

    // A single-group server's directory: one group, nothing placed (a client routes
    // nothing by it).
    const Frame directory = rpc.Call(MessageType::kDirectory, "");
    REQUIRE(directory.header.status == StatusCode::kOk);
    const Result<protocol::DirectoryAnswer> answer =
        protocol::DecodeDirectoryAnswer(directory.payload);
    REQUIRE(answer.has_value());
    CHECK(answer->groups == 1);
    CHECK(answer->directory.groups().empty());

    CHECK(rpc.Call(MessageType::kPing, "").header.status == StatusCode::kOk);
    CHECK(Get(f.client, "/v1/stats").body["revision"] == 0);
  }

  TEST_CASE("RPC: a bad version or an oversized frame gets an error frame, then the close") {
    RpcServer f({"--rpc-max-frame-bytes", "1024"});
    RawClient other(f.server.rpc_port());
    SUBCASE("bad version") {
      RawClient rpc(f.server.rpc_port());
      std::string frame;
      RawClient::Append(MessageType::kPing, 7, "", &frame);
      frame[4] = 9;  // the version byte follows the 4-byte length
      rpc.SendRaw(frame);
      std::optional<Frame> error = rpc.Read();
      REQUIRE(error.has_value());
      CHECK(error->header.status == StatusCode::kInvalidArgument);
      CHECK_FALSE(rpc.Read().has_value());  // closed
      CHECK(f.server.Log().find("closing the connection") != std::string::npos);
    }
    SUBCASE("oversized") {
      RawClient rpc(f.server.rpc_port());
      std::string frame;
      RawClient::Append(MessageType::kLookup, 8, std::string(2000, 'x'), &frame);
      rpc.SendRaw(frame.substr(0, 100));  // the header is enough to refuse it
      std::optional<Frame> error = rpc.Read();
      REQUIRE(error.has_value());
      CHECK(error->header.status == StatusCode::kPayloadTooLarge);
      CHECK(error->header.request_id == 8);
      CHECK(error->header.type == MessageType::kLookup);
      CHECK_FALSE(rpc.Read().has_value());
    }
    CHECK(other.Call(MessageType::kPing, "").header.status == StatusCode::kOk);
    RawClient fresh(f.server.rpc_port());
    CHECK(fresh.Call(MessageType::kPing, "").header.status == StatusCode::kOk);
  }

  TEST_CASE("RPC: idle connections are closed") {
    RpcServer f({"--rpc-idle-timeout-ms", "200"});
    RawClient rpc(f.server.rpc_port());
    CHECK(rpc.Call(MessageType::kPing, "").header.status == StatusCode::kOk);
    CHECK_FALSE(rpc.Read().has_value());  // within the 10 s read timeout
  }

  TEST_CASE("RPC: state survives a restart; rpc.addr is removed at shutdown") {
    TempDir dir;
    const std::vector<uint32_t> prompt = Tokens(5, 3 * kBlockSize);
    IngestAnswer ack;
    {
      ServerProcess server(dir.path() / "data");
      RawClient rpc(server.rpc_port());
      ack = IngestOk(rpc, json::array({Event("engine-a", "gpu", prompt)}));
      CHECK(server.Terminate() == 0);
    }
    CHECK_FALSE(std::filesystem::exists(dir.path() / "data" / "rpc.addr"));
    ServerProcess server(dir.path() / "data");
    RawClient rpc(server.rpc_port());
    const LookupAnswer after = LookupOk(rpc, LookupJson(prompt));
    CHECK(after.revision == ack.revision);
    CHECK(after.blocks_found == 3);
    auto client = server.Client();
    CHECK(json::parse(EncodeLookupAnswer(after)) ==
          Post(client, "/v1/lookup", LookupJson(prompt)).body);
  }
}

}  // namespace
}  // namespace kvatlas::testing
