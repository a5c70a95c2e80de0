#include "bench/resp_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace kvatlas::bench {

void AppendCommand(std::string& out, std::initializer_list<std::string_view> args) {
  out += '*';
  out += std::to_string(args.size());
  out += "\r\n";
  for (std::string_view a : args) {
    out += '$';
    out += std::to_string(a.size());
    out += "\r\n";
    out += a;
    out += "\r\n";
  }
}

namespace {

// The line at p (without its CRLF) and the byte after the CRLF; nullptr when incomplete.
const char* Line(const char* p, const char* end, std::string_view* line) {
  const void* cr = std::memchr(p, '\r', static_cast<size_t>(end - p));
  if (cr == nullptr) return nullptr;
  const char* c = static_cast<const char*>(cr);
  if (c + 1 >= end) return nullptr;
  *line = std::string_view(p, static_cast<size_t>(c - p));
  return c + 2;
}

long long Number(std::string_view s) {
  long long v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

}  // namespace

const char* ParseReply(const char* p, const char* end, bool* error) {
  if (p >= end) return nullptr;
  const char type = *p;
  std::string_view line;
  const char* next = Line(p + 1, end, &line);
  if (next == nullptr) return nullptr;
  switch (type) {
    case '-':
      *error = true;
      return next;
    case '+':
    case ':':
      return next;
    case '$': {
      const long long n = Number(line);
      if (n < 0) return next;
      if (end - next < n + 2) return nullptr;
      return next + n + 2;
    }
    case '*': {
      const long long n = Number(line);
      for (long long i = 0; i < n && next != nullptr; ++i) next = ParseReply(next, end, error);
      return next;
    }
    default:
      *error = true;  // not RESP2: treat as an error and skip the line
      return next;
  }
}

std::unique_ptr<RespConnection> RespConnection::Connect(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return nullptr;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(host_port.c_str() + colon + 1)));
  if (inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &addr.sin_addr) != 1) return nullptr;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return nullptr;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<RespConnection>(new RespConnection(fd));
}

RespConnection::RespConnection(int fd) : fd_(fd) {
  reader_ = std::thread([this] { ReadLoop(); });
}

RespConnection::~RespConnection() {
  shutdown(fd_, SHUT_RDWR);  // the reader reads EOF and fails what is left
  reader_.join();
  close(fd_);
}

std::future<bool> RespConnection::Send(std::string_view commands, size_t replies,
                                       std::string* raw) {
  std::lock_guard<std::mutex> write_lock(write_mu_);
  std::future<bool> done;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (closed_) {
      std::promise<bool> failed;
      failed.set_value(false);
      return failed.get_future();
    }
    pending_.push_back(Pending{{}, replies, false, raw});
    done = pending_.back().done.get_future();
  }
  const char* data = commands.data();
  size_t size = commands.size();
  while (size > 0) {
    const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      shutdown(fd_, SHUT_RDWR);  // the reader fails every pending request
      break;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return done;
}

void RespConnection::ReadLoop() {
  std::string buffer;
  size_t start = 0;  // the first byte not parsed yet
  constexpr size_t kRead = 256 << 10;
  for (;;) {
    if (start > 0 && start >= buffer.size() / 2) {
      buffer.erase(0, start);
      start = 0;
    }
    const size_t old = buffer.size();
    buffer.resize(old + kRead);
    ssize_t n;
    do {
      n = recv(fd_, buffer.data() + old, kRead, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) break;
    buffer.resize(old + static_cast<size_t>(n));
    const char* end = buffer.data() + buffer.size();
    for (;;) {
      const char* p = buffer.data() + start;
      bool error = false;
      const char* next = ParseReply(p, end, &error);
      if (next == nullptr) break;
      start = static_cast<size_t>(next - buffer.data());
      std::unique_lock<std::mutex> lock(queue_mu_);
      if (pending_.empty()) continue;  // a reply nobody asked for: ignored
      Pending& front = pending_.front();
      front.error = front.error || error;
      if (front.raw != nullptr) front.raw->append(p, next);
      if (--front.remaining == 0) {
        Pending done = std::move(front);
        pending_.pop_front();
        lock.unlock();
        done.done.set_value(!done.error);
      }
    }
  }
  FailAll();
}

void RespConnection::FailAll() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  closed_ = true;
  for (Pending& p : pending_) p.done.set_value(false);
  pending_.clear();
}

}  // namespace kvatlas::bench
