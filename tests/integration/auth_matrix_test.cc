// The access-control matrix (docs/security.md §Tokens and roles): every REST route and every
// binary-protocol request type × {no token, a wrong token, read, write, admin}, against the
// real server: 401 / 403 / served. Run on a single server, and through a follower of a
// 3-server cluster, whose writes and admin requests are forwarded to the leader with the
// client's token (the leader checks it again).
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/protocol.h"
#include "tests/integration/auth_helpers.h"
#include "tests/integration/rest_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using protocol::Frame;
using protocol::MessageType;

enum class Access { kOpen, kRead, kWrite, kAdmin, kInternal };

struct RouteCase {
  std::string method;
  std::string path;  // with its query
  json body;         // null: none
  Access access;
  // The status the allowed call gets; 0 = any but 401 and 403 (cluster changes that a test
  // cluster cannot complete: the point is that access control let them through).
  int allowed_status = 200;
};

const json kEvent = {{"event_type", "stored"},
                     {"model_name", "llama"},
                     {"block_size", 4},
                     {"backend_id", "vllm-0"},
                     {"token_ids", {1, 2, 3, 4, 5, 6, 7, 8}}};
const json kLookup = {{"model_name", "llama"}, {"block_size", 4}, {"token_ids", {1, 2, 3, 4}}};

// Every REST route, in an order where each allowed call can succeed (register before
// unregister). `self_http` is the served server's address (announce names it unchanged),
// `leader` the cluster's leader id (a transfer to it changes nothing).
std::vector<RouteCase> RestRoutes(uint64_t self_id, const std::string& self_http,
                                  const std::string& self_rpc, uint64_t leader) {
  const json registration = {
      {"endpoint", "tcp://127.0.0.1:9"}, {"type", "vLLM"},  {"modelname", "llama"},
      {"instance_id", "engine-9"},       {"block_size", 4}, {"dp_rank", 0}};
  return {
      {"GET", "/healthz", nullptr, Access::kOpen},
      {"GET", "/readyz", nullptr, Access::kOpen},
      {"GET", "/", nullptr, Access::kOpen},  // the dashboard: no data in it
      {"GET", "/dashboard/app.js", nullptr, Access::kOpen},
      {"GET", "/metrics", nullptr, Access::kRead},
      {"POST", "/v1/events", json::array({kEvent}), Access::kWrite},
      {"POST", "/v1/heartbeat", {{"holders", {{{"instance_id", "vllm-0"}}}}}, Access::kWrite},
      {"POST", "/v1/lookup", kLookup, Access::kRead},
      {"GET", "/v1/blocks/1", nullptr, Access::kRead},
      {"GET", "/v1/holders", nullptr, Access::kRead},
      {"GET", "/v1/contexts", nullptr, Access::kRead},
      {"GET", "/v1/stats", nullptr, Access::kRead},
      {"POST",
       "/query",
       {{"model", "llama"}, {"block_size", 4}, {"token_ids", {1, 2, 3, 4}}},
       Access::kRead},
      {"POST",
       "/query_by_hash",
       {{"model", "llama"}, {"block_size", 4}, {"seq_hashes", {1}}},
       Access::kRead},
      {"POST",
       "/v1/route",
       {{"model_name", "llama"},
        {"block_size", 4},
        {"token_ids", {1, 2, 3, 4}},
        {"candidates", {{{"instance_id", "vllm-0"}}}}},
       Access::kRead},
      // Queued by the server asked (never forwarded): 0.
      {"POST",
       "/v1/predictions",
       {{"model_name", "llama"}, {"block_size", 4}, {"backend_id", "vllm-0"}, {"keys", {1}}},
       Access::kWrite,
       0},
      {"GET", "/v1/snapshot?model_name=llama&block_size=4", nullptr, Access::kRead},
      {"GET", "/v1/watch?from=now", nullptr, Access::kRead},
      {"GET", "/v1/registrations", nullptr, Access::kRead},
      {"GET", "/v1/streams", nullptr, Access::kRead},
      {"GET", "/v1/cluster", nullptr, Access::kRead},
      {"GET", "/v1/groups", nullptr, Access::kRead},
      {"GET", "/v1/directory", nullptr, Access::kRead},
      {"POST", "/register", registration, Access::kAdmin},
      {"POST", "/unregister", {{"instance_id", "engine-9"}}, Access::kAdmin},
      {"POST",
       "/v1/cluster/members",
       {{"id", 9}, {"raft_address", "127.0.0.1:9"}},
       Access::kAdmin,
       0},
      {"DELETE", "/v1/cluster/members/9", nullptr, Access::kAdmin, 0},
      {"POST", "/v1/cluster/transfer", {{"id", leader}}, Access::kAdmin, 0},
      {"POST", "/v1/cluster/drain", {{"id", 9}}, Access::kAdmin, 0},
      // Served by the server asked (never forwarded): 0, as no backup_dir is configured
      // here (412) and the digest is this server's.
      {"GET", "/v1/admin/digest", nullptr, Access::kAdmin, 0},
      {"POST", "/v1/admin/backup", {{"to", "/nowhere/b1"}}, Access::kAdmin, 0},
      {"POST",
       "/v1/cluster/announce",
       {{"id", self_id}, {"http_address", self_http}, {"rpc_address", self_rpc}},
       Access::kInternal},
      {"POST", "/v1/cluster/drain-self", {{"draining", false}}, Access::kInternal},
      {"POST",
       "/v1/cluster/predict",
       {{"predictions",
         {{{"model_name", "llama"}, {"block_size", 4}, {"instance_id", "vllm-0"}, {"keys", {1}}}}}},
       Access::kInternal},
  };
}

struct Caller {
  std::string label;  // "none", "wrong", "read", "write", "admin"
  std::string token;
  int rank;  // 0 none/wrong, 1 read, 2 write, 3 admin
};

const std::vector<Caller> kCallers = {{"none", "", 0},
                                      {"wrong", "kvt_not_configured", 0},
                                      {"read", kReader.token, 1},
                                      {"write", kWriter.token, 2},
                                      {"admin", kAdmin.token, 3}};

int Needed(Access access) {
  switch (access) {
    case Access::kRead:
      return 1;
    case Access::kWrite:
      return 2;
    case Access::kAdmin:
      return 3;
    case Access::kOpen:
    case Access::kInternal:
      break;
  }
  return 0;
}

struct Reply {
  int status = 0;
  std::string body;
  bool forwarded = false;
};

// One REST call; a watch stream is abandoned once its status is known.
Reply Call(const ServerProcess& server, const RouteCase& route, const std::string& token) {
  httplib::Client client = server.Client();
  client.set_read_timeout(std::chrono::seconds(15));
  const httplib::Headers headers = Bearer(token);
  Reply reply;
  httplib::Result result{nullptr, httplib::Error::Unknown};
  if (route.path.starts_with("/v1/watch")) {
    result = client.Get(
        route.path, headers,
        [&](const httplib::Response& response) {
          reply.status = response.status;
          return response.status != 200;  // an open stream: its status is enough
        },
        [&](const char* data, size_t size) {
          reply.body.append(data, size);
          return true;
        });
    return reply;
  }
  if (route.method == "GET") {
    result = client.Get(route.path, headers);
  } else if (route.method == "DELETE") {
    result = client.Delete(route.path, headers);
  } else {
    result = client.Post(route.path, headers, route.body.dump(), "application/json");
  }
  REQUIRE_MESSAGE(result,
                  route.method << " " << route.path << ": " << httplib::to_string(result.error()));
  reply.status = result->status;
  reply.body = result->body;
  reply.forwarded = result->has_header("X-Kvatlas-Forwarded-From");
  return reply;
}

// Runs every route for every caller and checks the status: 401 without a valid token, 403
// with a role below the route's, the route's own answer otherwise. `forwards`: the server
// is a follower, so an allowed write or admin call must have been forwarded.
void CheckRestMatrix(const ServerProcess& server, const std::vector<RouteCase>& routes,
                     bool forwards) {
  for (const RouteCase& route : routes) {
    for (const Caller& caller : kCallers) {
      // Each admin route runs once allowed (register, then unregister...): admin last.
      CAPTURE(route.method + " " + route.path + " as " + caller.label);
      const Reply reply = Call(server, route, caller.token);
      CAPTURE(reply.body);
      if (route.access == Access::kOpen) {
        CHECK(reply.status == 200);
      } else if (route.access == Access::kInternal) {
        // Tokens do not matter: only a call signed with the cluster secret is taken
        // (docs/security.md §Peers), and these are not signed.
        CHECK(reply.status == 401);
        CHECK(reply.body.find("cluster secret") != std::string::npos);
      } else if (caller.rank == 0) {
        CHECK(reply.status == 401);
        CHECK(json::parse(reply.body)["code"] == "unauthenticated");
      } else if (caller.rank < Needed(route.access)) {
        CHECK(reply.status == 403);
        CHECK(json::parse(reply.body)["code"] == "permission_denied");
        CHECK_FALSE(reply.forwarded);  // refused by the follower itself
      } else if (route.allowed_status == 0) {
        CHECK(reply.status != 401);
        CHECK(reply.status != 403);
      } else {
        CHECK(reply.status == route.allowed_status);
        if (forwards && Needed(route.access) >= 2) CHECK(reply.forwarded);
      }
    }
    if (forwards && route.path == "/register") {
      // Unregistering is checked against this server's registry before it is forwarded:
      // wait for the registration to be replicated here.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      httplib::Client client = server.Client();
      while (std::chrono::steady_clock::now() < deadline &&
             client.Get("/v1/registrations", Bearer(kReader.token))->body.find("engine-9") ==
                 std::string::npos) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
}

std::string IngestPayload() {
  Result<std::vector<BlockEvent>> events = DecodeEventBatch(json::array({kEvent}).dump());
  REQUIRE(events.has_value());
  return protocol::EncodeIngestRequest({std::move(*events), std::nullopt});
}

struct RpcCase {
  MessageType type;
  std::string payload;
  int needed;               // rank
  bool any_server = false;  // a write every server serves (no not_leader on a follower)
};

std::vector<RpcCase> RpcCases() {
  LookupRequest lookup;
  lookup.context.model = "llama";
  lookup.context.block_size = 4;
  lookup.token_ids = {1, 2, 3, 4};
  RoutingRequest route;
  route.lookup = lookup;
  route.candidates.push_back({});
  route.candidates.back().instance_id = "vllm-0";
  ContextKey context;
  context.model = "llama";
  context.block_size = 4;
  protocol::WatchRequest watch;  // from now
  return {
      {MessageType::kPing, "", 1},
      {MessageType::kStats, "", 1},
      {MessageType::kLookup, protocol::EncodeLookupRequestBinary(lookup), 1},
      {MessageType::kLocate, protocol::EncodeLocateRequest({1, std::nullopt}), 1},
      {MessageType::kRoute, protocol::EncodeRouteRequestBinary(route), 1},
      {MessageType::kSnapshot, protocol::EncodeSnapshotRequest({context}), 1},
      {MessageType::kWatch, protocol::EncodeWatchRequest(watch), 1},
      {MessageType::kLoadView, "", 1},
      {MessageType::kDirectory, "", 1},
      {MessageType::kIngest, IngestPayload(), 2},
      {MessageType::kHeartbeat, protocol::EncodeHeartbeatRequest({{HolderKey{"vllm-0", 0}}}), 2},
      {MessageType::kPredict,
       protocol::EncodePredictRequest({context, HolderKey{"vllm-0", 0}, {1}}), 2,
       /*any_server=*/true},
  };
}

// Every binary request type for every caller: without a (valid) token the connection is
// refused with `unauthenticated` and closed; a role below the type's gets
// `permission_denied` (the connection stays); else the request is served — on a follower a
// write is answered `not_leader` (the client library follows it to the leader).
void CheckRpcMatrix(const ServerProcess& server, bool follower) {
  for (const RpcCase& c : RpcCases()) {
    for (const Caller& caller : kCallers) {
      CAPTURE(static_cast<int>(c.type));
      CAPTURE(caller.label);
      AuthedRpc rpc(server.rpc_port(), caller.token, /*expect_ok=*/caller.label != "wrong");
      if (caller.label == "wrong") {
        const std::optional<Frame> refused = rpc.Read();
        REQUIRE(refused.has_value());
        CHECK(refused->header.type == MessageType::kAuth);
        CHECK(refused->header.status == StatusCode::kUnauthenticated);
        CHECK_FALSE(rpc.Read().has_value());  // closed
        continue;
      }
      const std::optional<Frame> answer = rpc.Call(c.type, c.payload);
      REQUIRE(answer.has_value());
      CHECK(answer->header.type == c.type);
      if (caller.rank == 0) {
        CHECK(answer->header.status == StatusCode::kUnauthenticated);
        CHECK_FALSE(rpc.Read().has_value());  // closed
      } else if (caller.rank < c.needed) {
        CHECK(answer->header.status == StatusCode::kPermissionDenied);
        CHECK(rpc.Call(MessageType::kPing, "")->header.status == StatusCode::kOk);  // stays open
      } else if (follower && c.needed >= 2 && !c.any_server) {
        CHECK(answer->header.status == StatusCode::kNotLeader);
      } else {
        CHECK(answer->header.status == StatusCode::kOk);
      }
    }
  }
}

std::vector<std::string> TokenFileArgs(const std::filesystem::path& file) {
  return {"--token-file", file.string(), "--apply-timeout-ms", "1500"};
}

TEST_SUITE("AccessMatrix") {
  TEST_CASE("AccessMatrix: every REST route and binary request on a single server") {
    TempDir dir;
    const auto tokens = dir.path() / "tokens";
    WriteTokenFile(tokens, {kReader, kWriter, kAdmin});
    ServerProcess server(dir.path() / "data", TokenFileArgs(tokens));
    const std::string http = server.host() + ":" + std::to_string(server.port());
    const std::string rpc = server.host() + ":" + std::to_string(server.rpc_port());
    CheckRestMatrix(server, RestRoutes(1, http, rpc, 1), /*forwards=*/false);
    CheckRpcMatrix(server, /*follower=*/false);
    // Every refusal was audited and counted.
    httplib::Client client = server.Client();
    const std::string metrics = client.Get("/metrics", Bearer(kReader.token))->body;
    CHECK(metrics.find("kvatlas_auth_failures_total{reason=\"missing_token\"}") !=
          std::string::npos);
    CHECK(metrics.find("kvatlas_admin_actions_total{action=\"POST /register\",outcome=\"ok\"} 1") !=
          std::string::npos);
    const std::string log = server.Log();
    CHECK(log.find("audit: admin protocol=rest peer=\"127.0.0.1\" token=\"operator\" "
                   "request=\"POST /register\" outcome=ok") != std::string::npos);
    CHECK(log.find("reason=forbidden") != std::string::npos);
    CHECK(log.find(kAdmin.token) == std::string::npos);  // never the token itself
    CHECK(log.find(kReader.token) == std::string::npos);
  }

  TEST_CASE("AccessMatrix: through a follower, forwarded writes keep the client's token") {
    TempDir dir;
    std::vector<std::filesystem::path> files;
    for (int i = 0; i < 3; ++i) {
      files.push_back(dir.path() / ("tokens" + std::to_string(i + 1)));
      WriteTokenFile(files.back(), {kReader, kWriter, kAdmin});
    }
    // Holder leases on: heartbeats are then the leader's, and forwarded.
    const auto servers = StartCluster(dir.path(), 3, [&](int i) {
      std::vector<std::string> args = TokenFileArgs(files[i]);
      args.insert(args.end(), {"--holder-ttl", "600"});
      return args;
    });
    const auto [follower, leader] = ReadyFollower(servers, kReader.token);
    const ServerProcess& server = *servers[follower];
    const std::string http = server.host() + ":" + std::to_string(server.port());
    const std::string rpc = server.host() + ":" + std::to_string(server.rpc_port());
    CheckRestMatrix(server, RestRoutes(follower + 1, http, rpc, leader), /*forwards=*/true);
    CheckRpcMatrix(server, /*follower=*/true);

    // The leader decides for itself: a token that only the follower knows passes the
    // follower, and the leader refuses the forwarded request.
    const TestToken local_only{"follower-only", "write", "kvt_only_on_the_follower"};
    WriteTokenFile(files[follower], {kReader, kWriter, kAdmin, local_only});
    kill(server.pid(), SIGHUP);
    httplib::Client client = server.Client();
    Answer refused;
    for (int attempt = 0; attempt < 200; ++attempt) {
      auto result = client.Post("/v1/events", Bearer(local_only.token),
                                json::array({kEvent}).dump(), "application/json");
      REQUIRE(result);
      refused = {result->status, result->body, json::parse(result->body, nullptr, false)};
      if (result->status != 401 || result->has_header("X-Kvatlas-Forwarded-From")) {
        CHECK(result->has_header("X-Kvatlas-Forwarded-From"));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the reload is not in yet
    }
    CHECK(refused.status == 401);
    CHECK(refused.body["code"] == "unauthenticated");
    for (const auto& s : servers) s->Terminate();
  }
}

}  // namespace
}  // namespace kvatlas::testing
