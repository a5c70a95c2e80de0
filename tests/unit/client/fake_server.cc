#include "tests/unit/client/fake_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace kvatlas::testing {

FakeServer::FakeServer(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listen_fd_, 16) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::abort();
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { Run(); });
}

FakeServer::~FakeServer() {
  stop_ = true;
  thread_.join();
  close(listen_fd_);
}

protocol::Frame FakeServer::Answer(const protocol::Frame& request, std::string payload,
                                   StatusCode status) {
  protocol::Frame answer;
  answer.header = request.header;
  answer.header.flags = protocol::kFlagResponse;
  answer.header.status = status;
  answer.payload = std::move(payload);
  return answer;
}

// Polls with a short timeout so that the destructor's stop flag is seen promptly.
void FakeServer::Run() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    ++accepted_;
    Serve(fd);
    close(fd);
  }
}

void FakeServer::Serve(int fd) {
  protocol::FrameDecoder decoder;
  char buf[65536];
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    decoder.Feed(std::string_view(buf, static_cast<size_t>(n)));
    while (true) {
      Result<std::optional<protocol::Frame>> next = decoder.Next();
      if (!next || !next->has_value()) {
        if (!next) return;
        break;
      }
      Action action = handler_(std::move(**next));
      std::string out;
      for (const protocol::Frame& f : action.send) protocol::AppendFrame(f.header, f.payload, &out);
      size_t sent = 0;
      while (sent < out.size()) {
        const ssize_t w = write(fd, out.data() + sent, out.size() - sent);
        if (w <= 0) return;
        sent += static_cast<size_t>(w);
      }
      if (action.close) return;
    }
  }
}

}  // namespace kvatlas::testing
