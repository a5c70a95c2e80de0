// FakeServer: a scripted kvatlas binary-protocol peer on 127.0.0.1 for client unit tests.
// It accepts one connection at a time on its own thread, decodes request frames and lets
// a handler decide what to send back (and whether to drop the connection), so that tests
// can order answers, withhold them or fail them at will.
// Thread-safety: the handler runs on the server thread; everything else is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kvatlas/common/protocol.h"

namespace kvatlas::testing {

class FakeServer {
 public:
  struct Action {
    std::vector<protocol::Frame> send;
    bool close = false;  // close the connection after sending
  };
  using Handler = std::function<Action(protocol::Frame request)>;

  // Listens on 127.0.0.1:0. Aborts the test process if the socket cannot be set up.
  explicit FakeServer(Handler handler);
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections_accepted() const { return accepted_.load(); }

  // The answer frame to `request` with `payload` (status OK) or an error status.
  static protocol::Frame Answer(const protocol::Frame& request, std::string payload,
                                StatusCode status = StatusCode::kOk);

 private:
  void Run();
  void Serve(int fd);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

}  // namespace kvatlas::testing
