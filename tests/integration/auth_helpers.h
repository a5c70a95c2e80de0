// Helpers of the access-control integration tests (auth_test.cc, auth_matrix_test.cc):
// token files, REST calls with a token, binary-protocol connections that authenticate, and a
// Server-Sent-Events stream read on its own thread.
#pragma once

#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/protocol.h"
#include "tests/integration/server_process.h"
#include "tests/support/raw_rpc_connection.h"

namespace kvatlas::testing {

struct TestToken {
  std::string name;
  std::string role;   // read, write, admin
  std::string token;  // the secret itself
};

// The tokens of the matrix: one per role.
const TestToken kReader{"reader", "read", "kvt_reader_secret"};
const TestToken kWriter{"writer", "write", "kvt_writer_secret"};
const TestToken kAdmin{"operator", "admin", "kvt_admin_secret"};

// Lower-case hex SHA-256 (OpenSSL), as a token file stores it.
std::string Sha256Hex(const std::string& text);

// Writes a token file (NAME:ROLE:SHA256) with `tokens`, atomically (rename).
void WriteTokenFile(const std::filesystem::path& path, const std::vector<TestToken>& tokens);

// "Authorization: Bearer <token>"; none for an empty token.
httplib::Headers Bearer(const std::string& token, httplib::Headers more = {});

// A binary-protocol connection that sends kAuth with `token` first (none when empty) and
// checks its answer when `expect_ok`.
class AuthedRpc : public RawRpcConnection {
 public:
  AuthedRpc(int port, const std::string& token, bool expect_ok = true);
  // One request and its answer (which must carry its id); nullopt when the server closed.
  std::optional<protocol::Frame> Call(protocol::MessageType type, std::string_view payload);

 private:
  uint64_t next_id_ = 100;
};

// Starts `n` servers of one cluster on loopback (ids 1..n, free raft ports), data
// directories under `dir`; `extra(i)` gives server i's further arguments.
std::vector<std::unique_ptr<ServerProcess>> StartCluster(
    const std::filesystem::path& dir, int n,
    const std::function<std::vector<std::string>(int)>& extra);

// A follower that is ready (it knows the leader and its address): its index in `servers`
// and the leader's id. REQUIREs one within 30 s. `token` reads GET /v1/cluster.
std::pair<int, uint64_t> ReadyFollower(const std::vector<std::unique_ptr<ServerProcess>>& servers,
                                       const std::string& token);

// GET `path` with `headers` on a thread, collecting the body as it arrives (an SSE stream).
class StreamReader {
 public:
  StreamReader(const std::string& host, int port, std::string path, httplib::Headers headers);
  ~StreamReader();
  // Waits up to 10 s for the body to contain `text`.
  bool WaitFor(const std::string& text);
  int status() const { return status_.load(); }
  std::string body();
  bool done() const { return done_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<int> status_{0};
  std::mutex mu_;
  std::string body_;
  std::thread thread_;
};

}  // namespace kvatlas::testing
