#include "tests/integration/auth_helpers.h"

#include <doctest/doctest.h>
#include <openssl/sha.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace kvatlas::testing {

std::string Sha256Hex(const std::string& text) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  std::string out;
  char hex[3];
  for (const unsigned char byte : digest) {
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    out += hex;
  }
  return out;
}

void WriteTokenFile(const std::filesystem::path& path, const std::vector<TestToken>& tokens) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "# written by the test\n";
    for (const TestToken& t : tokens)
      out << t.name << ":" << t.role << ":" << Sha256Hex(t.token) << "\n";
  }
  std::filesystem::rename(tmp, path);
}

httplib::Headers Bearer(const std::string& token, httplib::Headers more) {
  if (!token.empty()) more.emplace("Authorization", "Bearer " + token);
  return more;
}

AuthedRpc::AuthedRpc(int port, const std::string& token, bool expect_ok) : RawRpcConnection(port) {
  if (token.empty()) return;
  Send(protocol::MessageType::kAuth, 0, protocol::EncodeAuthRequest({token}));
  if (!expect_ok) return;
  std::optional<protocol::Frame> answer = Read();
  REQUIRE(answer.has_value());
  REQUIRE(answer->header.type == protocol::MessageType::kAuth);
  REQUIRE(answer->header.status == StatusCode::kOk);
}

std::optional<protocol::Frame> AuthedRpc::Call(protocol::MessageType type,
                                               std::string_view payload) {
  const uint64_t id = ++next_id_;
  Send(type, id, payload);
  std::optional<protocol::Frame> answer = Read();
  if (answer) CHECK(answer->header.request_id == id);
  return answer;
}

std::vector<std::unique_ptr<ServerProcess>> StartCluster(
    const std::filesystem::path& dir, int n,
    const std::function<std::vector<std::string>(int)>& extra) {
  std::string peers;
  for (int i = 0; i < n; ++i) {
    // A free loopback port for raft, picked by binding port 0.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    peers += (i ? "," : "") + std::to_string(i + 1) +
             "@127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> args = extra(i);
    args.insert(args.end(), {"--id", std::to_string(i + 1), "--peers", peers,
                             "--raft-election-timeout-ms", "300"});
    servers.push_back(
        std::make_unique<ServerProcess>(dir / ("data" + std::to_string(i + 1)), std::move(args)));
  }
  return servers;
}

std::pair<int, uint64_t> ReadyFollower(const std::vector<std::unique_ptr<ServerProcess>>& servers,
                                       const std::string& token) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < servers.size(); ++i) {
      httplib::Client client = servers[i]->Client();
      auto ready = client.Get("/readyz");
      auto cluster = client.Get("/v1/cluster", Bearer(token));
      if (!ready || ready->status != 200 || !cluster || cluster->status != 200) continue;
      const nlohmann::json status = nlohmann::json::parse(cluster->body);
      if (status["state"] == "follower") {
        return {static_cast<int>(i), status["leader_id"].get<uint64_t>()};
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("no follower became ready within 30 s");
  return {-1, 0};
}

StreamReader::StreamReader(const std::string& host, int port, std::string path,
                           httplib::Headers headers) {
  thread_ = std::thread([this, host, port, path = std::move(path), headers = std::move(headers)] {
    httplib::Client client(host, port);
    client.set_read_timeout(std::chrono::seconds(30));
    (void)client.Get(
        path, headers,
        [this](const httplib::Response& response) {
          status_ = response.status;
          return true;
        },
        [this](const char* data, size_t size) {
          std::lock_guard lock(mu_);
          body_.append(data, size);
          return !stop_.load();
        });
    done_ = true;
  });
}

StreamReader::~StreamReader() {
  stop_ = true;
  // The server sends a keep-alive every second: the receiver sees stop_ by then.
  if (thread_.joinable()) thread_.join();
}

bool StreamReader::WaitFor(const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (body().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string StreamReader::body() {
  std::lock_guard lock(mu_);
  return body_;
}

}  // namespace kvatlas::testing
