// A minimal pipelined Redis (RESP2) client for bench/compare_bench.cc: one TCP connection,
// commands written by the caller's thread, replies read and counted by a reader thread, so
// that any number of requests (each a run of pipelined commands) can be in flight at once —
// what a pipelining client such as go-redis's Pipeline does, without its per-call
// allocations. Only what the comparison needs: it checks replies for errors and counts them,
// and keeps the raw bytes of a reply only when asked (INFO).
#pragma once

#include <cstddef>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace kvatlas::bench {

// Appends one command (an array of bulk strings) in RESP to `out`.
void AppendCommand(std::string& out, std::initializer_list<std::string_view> args);

// Parses one complete RESP reply at [p, end): returns the byte after it, or nullptr when the
// reply is not complete yet; sets *error when it is (or holds) an error reply.
const char* ParseReply(const char* p, const char* end, bool* error);

class RespConnection {
 public:
  // Connects to HOST:PORT (TCP_NODELAY, as go-redis sets it); nullptr on failure.
  static std::unique_ptr<RespConnection> Connect(const std::string& host_port);
  ~RespConnection();
  RespConnection(const RespConnection&) = delete;
  RespConnection& operator=(const RespConnection&) = delete;

  // Writes `commands` (RESP, `replies` commands) and returns a future made ready once their
  // `replies` replies have been read: true when none was an error; false on an error reply
  // or a broken connection. With `raw`, the replies' bytes are appended to it (the caller
  // reads it after the future is ready).
  std::future<bool> Send(std::string_view commands, size_t replies, std::string* raw = nullptr);

 private:
  struct Pending {
    std::promise<bool> done;
    size_t remaining = 0;
    bool error = false;
    std::string* raw = nullptr;
  };

  explicit RespConnection(int fd);
  void ReadLoop();
  // Completes every pending request with false (the connection is gone).
  void FailAll();

  int fd_;
  std::mutex write_mu_;  // held from queueing to the end of the write: queue order = wire order
  std::mutex queue_mu_;
  std::deque<Pending> pending_;
  bool closed_ = false;  // the reader has ended: Send fails at once (under queue_mu_)
  std::thread reader_;
};

}  // namespace kvatlas::bench
