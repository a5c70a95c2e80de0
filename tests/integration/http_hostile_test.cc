// Hostile HTTP clients against the real server (docs/limits.md "REST server"): connections
// that send a header byte every 2 s or nothing at all must not keep anyone else waiting, a
// 100 MiB chunked body gets 413 without being read whole, and one peer address cannot hold
// more than its share of connections. Attackers connect from other 127/8 addresses (Linux
// routes all of 127.0.0.0/8 to loopback) so that the per-peer cap does not refuse them.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/server_process.h"
#include "tests/support/temp_dir.h"

namespace kvatlas::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A connected TCP socket from `from` to 127.0.0.1:port; -1 on failure.
int Connect(const char* from, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  const timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// What arrives on `fd` within `timeout` until the peer closes or `enough` bytes came.
std::string ReadFor(int fd, milliseconds timeout, size_t enough = 1 << 16) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  while (out.size() < enough) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// Whether the server closed `fd` (EOF or reset) or answered on it within `timeout`.
bool ClosedOrAnswered(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

// VmRSS of `pid` in bytes.
size_t Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// One request on a fresh connection from 127.0.0.1; the status, or 0 on failure/timeout.
int FreshRequest(int port, const std::string& request, milliseconds timeout) {
  const int fd = Connect("127.0.0.1", port);
  if (fd < 0) return 0;
  int status = 0;
  if (SendAll(fd, request)) {
    const std::string answer = ReadFor(fd, timeout, 12);
    if (answer.size() >= 12 && answer.rfind("HTTP/1.1 ", 0) == 0) {
      status = std::stoi(answer.substr(9, 3));
    }
  }
  ::close(fd);
  return status;
}

TEST_SUITE("Integration.HttpHostile") {
  TEST_CASE("HttpHostile: slow and idle connections do not delay other clients") {
    TempDir dir;
    // Idle connections may stay for the whole test: they must hold a socket, not a worker.
    ServerProcess server(dir.path() / "data", {"--http-read-timeout-ms", "30000"});
    const int port = server.port();
    const std::string header =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + std::string(100, 'a') + "\r\n\r\n";
    std::vector<int> slow;
    for (int i = 0; i < 10; ++i) {
      slow.push_back(Connect("127.0.0.2", port));
      REQUIRE(slow.back() >= 0);
    }
    std::atomic<bool> done{false};
    std::thread dripper([&] {
      for (size_t at = 0; !done && at < header.size(); ++at) {
        for (const int fd : slow) (void)::send(fd, &header[at], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        for (int i = 0; i < 200 && !done; ++i) std::this_thread::sleep_for(milliseconds(10));
      }
    });
    std::vector<int> idle;
    for (int i = 0; i < 1000; ++i) {
      const std::string from = "127.0.0." + std::to_string(3 + i % 5);  // 200 per address
      idle.push_back(Connect(from.c_str(), port));
      REQUIRE(idle.back() >= 0);
    }
    std::this_thread::sleep_for(milliseconds(300));  // the server has seen them all

    const std::string healthz =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    const std::string query_body = R"({"model": "m", "block_size": 2, "token_ids": [1, 2, 3, 4]})";
    const std::string query =
        "POST /query HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(query_body.size()) + "\r\n\r\n" + query_body;
    std::vector<double> latencies;
    int failures = 0;
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    for (int i = 0; i < 100 && failures < 5 && Clock::now() < give_up; ++i) {
      const auto start = Clock::now();
      const int status = FreshRequest(port, i % 2 == 0 ? healthz : query, milliseconds(1000));
      latencies.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      if (status != 200) {
        ++failures;
        MESSAGE("request " << i << " got status " << status);
      }
    }
    CHECK(failures == 0);
    REQUIRE(!latencies.empty());
    std::sort(latencies.begin(), latencies.end());
    const double p99 = latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)];
    MESSAGE("p99 " << p99 << " ms over " << latencies.size() << " requests");
    // A worker held by a slow or idle client would hold a request for the read timeout
    // (30 s): every request above answering within its 1 s (no failure) is the check. The
    // bound here only catches a stall short of that; it is not a latency target (a loaded
    // 2-core machine under ASan has shown 113 ms p99), which scripts/bench measures.
    CHECK(p99 < 900.0);
    // The attackers were really connected the whole time (neither refused nor answered).
    int open = 0;
    for (const int fd : idle) open += ClosedOrAnswered(fd, milliseconds(0)) ? 0 : 1;
    CHECK(open == 1000);
    done = true;
    dripper.join();
    for (const int fd : slow) ::close(fd);
    for (const int fd : idle) ::close(fd);
  }

  TEST_CASE("HttpHostile: a 100 MiB chunked body gets 413 without being read whole") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const size_t rss_before = Rss(server.pid());
    REQUIRE(rss_before > 0);
    const int fd = Connect("127.0.0.1", server.port());
    REQUIRE(fd >= 0);
    const auto start = Clock::now();
    REQUIRE(
        SendAll(fd,
                "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"));
    const std::string chunk = "100000\r\n" + std::string(1 << 20, ' ') + "\r\n";
    size_t rss_max = rss_before;
    for (int i = 0; i < 100; ++i) {
      if (ClosedOrAnswered(fd, milliseconds(0)) || !SendAll(fd, chunk)) break;
      if (i % 4 == 0) rss_max = std::max(rss_max, Rss(server.pid()));
    }
    (void)SendAll(fd, "0\r\n\r\n");
    const std::string answer = ReadFor(fd, milliseconds(10'000));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    rss_max = std::max(rss_max, Rss(server.pid()));
    ::close(fd);
    MESSAGE("answer after " << seconds << " s: " << answer.substr(0, 200));
    MESSAGE("RSS grew by " << (rss_max - rss_before) / (1 << 20) << " MiB");
    CHECK(answer.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(answer.find("payload_too_large") != std::string::npos);
    CHECK(seconds < 10.0);
    CHECK(rss_max - rss_before < (64u << 20));
    CHECK(FreshRequest(server.port(), "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
                       milliseconds(2000)) == 200);
  }

  TEST_CASE("HttpHostile: one peer address holds at most 256 connections") {
    TempDir dir;
    ServerProcess server(dir.path() / "data");
    const int port = server.port();
    std::vector<int> held;
    for (int i = 0; i < 256; ++i) {
      held.push_back(Connect("127.0.0.3", port));
      REQUIRE(held.back() >= 0);
    }
    std::this_thread::sleep_for(milliseconds(300));
    for (const int fd : held) CHECK_FALSE(ClosedOrAnswered(fd, milliseconds(0)));
    // The 257th from the same address is refused at once (503 or closed)...
    const int extra = Connect("127.0.0.3", port);
    REQUIRE(extra >= 0);
    CHECK(ClosedOrAnswered(extra, milliseconds(2000)));
    const std::string refused = ReadFor(extra, milliseconds(500));
    CHECK((refused.empty() || refused.rfind("HTTP/1.1 503", 0) == 0));
    ::close(extra);
    // ...while other addresses are served, and a freed slot is usable again.
    const std::string healthz =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    CHECK(FreshRequest(port, healthz, milliseconds(2000)) == 200);
    ::close(held.back());
    held.pop_back();
    std::this_thread::sleep_for(milliseconds(200));
    const int again = Connect("127.0.0.3", port);
    REQUIRE(again >= 0);
    REQUIRE(SendAll(again, healthz));
    CHECK(ReadFor(again, milliseconds(2000), 12).rfind("HTTP/1.1 200", 0) == 0);
    ::close(again);
    for (const int fd : held) ::close(fd);
  }
}

}  // namespace
}  // namespace kvatlas::testing
