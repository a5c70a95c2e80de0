#include "server/zmq/publisher_socket.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

#include "common/internal/log.h"

namespace kvatlas::server {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Each monitor needs its own inproc address within the context.
std::string NextMonitorAddress() {
  static std::atomic<uint64_t> next{0};
  return "inproc://kvatlas-zmq-monitor-" + std::to_string(next.fetch_add(1));
}

}  // namespace

std::unique_ptr<zmq::socket_t> MakeSubSocket(zmq::context_t& context, const std::string& topic,
                                             const SubSocketOptions& options) {
  auto sub = std::make_unique<zmq::socket_t>(context, zmq::socket_type::sub);
  sub->set(zmq::sockopt::linger, 0);
  sub->set(zmq::sockopt::rcvhwm, options.receive_hwm);
  sub->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
  sub->set(zmq::sockopt::reconnect_ivl, static_cast<int>(options.reconnect_interval.count()));
  sub->set(zmq::sockopt::reconnect_ivl_max,
           static_cast<int>(options.reconnect_interval_max.count()));
  sub->set(zmq::sockopt::subscribe, topic);
  return sub;
}

PublisherSocket::PublisherSocket(zmq::context_t* context, std::string endpoint, std::string topic,
                                 SubSocketOptions options, StreamView* view)
    : context_(context),
      endpoint_(std::move(endpoint)),
      topic_(std::move(topic)),
      options_(options),
      view_(view),
      watch_(ConnectionWatch::Options{
          std::chrono::milliseconds{100}, options.reconnect_interval,
          std::max(options.reconnect_interval, options.reconnect_interval_max)}) {}

PublisherSocket::~PublisherSocket() { Close(); }

void PublisherSocket::Close() {
  // The monitor is stopped before its SUB closes, and our end closed (linger 0) last.
  if (sub_) zmq_socket_monitor(sub_->handle(), nullptr, 0);
  sub_.reset();
  monitor_.reset();
}

void PublisherSocket::BeginConnecting() {
  StreamCounters& c = view_->counters;
  if (c.connecting.exchange(true, std::memory_order_relaxed)) return;
  c.connecting_since_unix_ms.store(NowUnixMs(), std::memory_order_relaxed);
}

void PublisherSocket::Connected() {
  view_->counters.connecting.store(false, std::memory_order_relaxed);
}

void PublisherSocket::Open(Clock::time_point now) {
  Close();
  BeginConnecting();
  try {
    sub_ = MakeSubSocket(*context_, topic_, options_);
    const std::string address = NextMonitorAddress();
    if (zmq_socket_monitor(sub_->handle(), address.c_str(),
                           ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
      throw zmq::error_t();
    }
    monitor_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(address);
    sub_->connect(endpoint_);
    view_->SetError("", NowUnixMs());
  } catch (const zmq::error_t& e) {
    Close();
    watch_.OnSocketFailed(now);
    view_->SetError("cannot connect to " + endpoint_ + ": " + e.what() + " (retrying)",
                    NowUnixMs());
    LogWarning("zmq: " + view_->error());
  }
}

void PublisherSocket::DrainMonitor(Clock::time_point now) {
  std::vector<zmq::message_t> frames;
  while (monitor_) {
    frames.clear();
    try {
      if (!zmq::recv_multipart(*monitor_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
        return;
      }
    } catch (const zmq::error_t&) {
      return;
    }
    // Event frame: uint16 event id, uint32 value (host order); then the endpoint.
    if (frames.empty() || frames[0].size() < sizeof(uint16_t)) continue;
    uint16_t event = 0;
    std::memcpy(&event, frames[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_CONNECT_RETRIED) {
      watch_.OnConnectRetried();
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
      watch_.OnDisconnected(now);
      if (!view_->counters.connecting.load(std::memory_order_relaxed)) {
        view_->counters.reconnects.fetch_add(1, std::memory_order_relaxed);
      }
      BeginConnecting();
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      Connected();
    }
  }
}

void PublisherSocket::OnMessage() {
  watch_.OnMessage();
  Connected();
}

void PublisherSocket::Tick(Clock::time_point now) {
  if (!watch_.dead(now)) return;
  if (sub_ && view_->error().empty()) {
    view_->SetError("the connection to " + endpoint_ +
                        " was closed and libzmq does not reconnect it (a message over 64 MiB or "
                        "another protocol error); reconnecting",
                    NowUnixMs());
    LogWarning("zmq: " + view_->key + ": " + view_->error());
  }
  if (!watch_.ShouldRecreate(now)) return;
  watch_.Recreated();
  Open(now);
  if (sub_) LogInfo("zmq: " + view_->key + ": reconnected to " + endpoint_);
}

}  // namespace kvatlas::server
