// kWatch and kSnapshot over real loopback sockets (RpcServer, RpcConnection, RpcStreams)
// with an in-memory state machine and change feed: records pushed as they are applied,
// interleaved with other answers; cancel; snapshots in parts; errors that leave the
// connection working; a reader that stops reading cut without holding up a second watcher;
// the end of watches at shutdown; keep-alive frames on a quiet watch.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "server/rpc/rpc_server.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/raw_rpc_connection.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using namespace std::chrono_literals;
using protocol::Frame;
using protocol::MessageType;

const ContextKey kContext{"default", "m", "", 2, ""};

// An in-memory server with a change feed (unless told otherwise).
struct TestServer : testing::InMemoryServices {
  explicit TestServer(ChangeFeedOptions feed_options = {}, bool with_feed = true)
      : InMemoryServices(feed_options, with_feed) {}
  // Applies one store of `keys` by `holder` (the test thread is the only applier).
  Revision Store(const std::string& holder, std::vector<BlockKey> keys) {
    return testing::ApplyOne(machine,
                             testing::StoreBatch(kContext, HolderKey{holder, 0}, std::move(keys)));
  }
};

// RawRpcConnection with the watch requests and answers these tests read.
class Conn : public testing::RawRpcConnection {
 public:
  using RawRpcConnection::RawRpcConnection;

  void Watch(uint64_t id, std::optional<Revision> from = std::nullopt, FeedFilter filter = {}) {
    Send(MessageType::kWatch, id, protocol::EncodeWatchRequest({false, from, std::move(filter)}));
  }
  void Cancel(uint64_t id) {
    Send(MessageType::kWatch, id, protocol::EncodeWatchRequest({true, {}, {}}));
  }

  // The next frame, which must be an ok watch batch of watch `id`.
  protocol::WatchBatch ReadBatch(uint64_t id) {
    const Frame frame = MustRead();
    REQUIRE(frame.header.type == MessageType::kWatch);
    REQUIRE(frame.header.request_id == id);
    REQUIRE_MESSAGE(frame.header.status == StatusCode::kOk, frame.payload);
    Result<protocol::WatchBatch> batch = protocol::DecodeWatchBatch(frame.payload);
    REQUIRE(batch.has_value());
    return std::move(*batch);
  }
  void Ping(uint64_t id) {
    Send(MessageType::kPing, id, "");
    const Frame answer = MustRead();
    CHECK(answer.header.type == MessageType::kPing);
    CHECK(answer.header.request_id == id);
  }
};

RpcServerOptions Options() {
  RpcServerOptions options;
  options.port = 0;
  options.threads = 1;
  return options;
}

std::vector<BlockKey> Keys(BlockKey first, size_t n) {
  std::vector<BlockKey> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = first + i;
  return keys;
}

TEST_SUITE("RpcStreams") {
  TEST_CASE("RpcStreams: a watch pushes applied records between other answers; cancel ends it") {
    TestServer s;
    s.Store("a", {100});  // before the watch: not delivered
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Watch(1);
    const protocol::WatchBatch started = conn.ReadBatch(1);
    CHECK_FALSE(started.final);
    CHECK(started.records.empty());
    CHECK(started.through == s.machine.applied_revision());

    const Revision r1 = s.Store("a", {1, 2});
    const protocol::WatchBatch pushed = conn.ReadBatch(1);
    REQUIRE(pushed.records.size() == 1);
    CHECK(pushed.records[0].revision == r1);
    CHECK(pushed.records[0].keys == std::vector<BlockKey>{1, 2});
    CHECK(pushed.records[0].holder.id == "a");
    CHECK(pushed.through == r1);
    conn.Ping(2);

    conn.Cancel(1);
    const protocol::WatchBatch ended = conn.ReadBatch(1);
    CHECK(ended.final);
    CHECK(ended.through == r1);
    // A second cancel names no watch: no answer; later changes are not pushed either.
    conn.Cancel(1);
    s.Store("a", {3});
    conn.Ping(3);
    CHECK(s.feed.Stats().watchers == 0);
    server.Stop();
  }

  TEST_CASE("RpcStreams: a watch from a revision replays the window, filtered") {
    TestServer s;
    const Revision r1 = s.Store("a", {1});
    s.Store("b", {2});
    const Revision r3 = s.Store("a", {3});
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    FeedFilter only_a;
    only_a.holder_id = "a";
    conn.Watch(7, 0, only_a);
    CHECK(conn.ReadBatch(7).through == 0);
    std::vector<FeedRecord> records;
    Revision through = 0;
    while (through < r3) {
      protocol::WatchBatch batch = conn.ReadBatch(7);
      CHECK(batch.through >= through);
      through = batch.through;
      records.insert(records.end(), batch.records.begin(), batch.records.end());
    }
    REQUIRE(records.size() == 2);
    CHECK(records[0].revision == r1);
    CHECK(records[1].revision == r3);
    server.Stop();
  }

  TEST_CASE("RpcStreams: a snapshot comes in parts of at most 65536 copies") {
    TestServer s;
    const size_t n = protocol::kMaxSnapshotPartCopies + 1000;
    s.Store("a", Keys(1, n));
    const Revision at = s.Store("b", {1});
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Send(MessageType::kSnapshot, 9, protocol::EncodeSnapshotRequest({kContext}));
    std::vector<protocol::SnapshotCopy> copies;
    for (uint32_t part = 0;; ++part) {
      const Frame frame = conn.MustRead();
      REQUIRE(frame.header.type == MessageType::kSnapshot);
      REQUIRE(frame.header.request_id == 9);
      REQUIRE(frame.header.status == StatusCode::kOk);
      Result<protocol::SnapshotPart> decoded = protocol::DecodeSnapshotPart(frame.payload);
      REQUIRE(decoded.has_value());
      CHECK(decoded->part == part);
      CHECK(decoded->revision == at);
      CHECK(decoded->context == kContext);
      CHECK(decoded->copies.size() <= protocol::kMaxSnapshotPartCopies);
      copies.insert(copies.end(), decoded->copies.begin(), decoded->copies.end());
      if (decoded->last) {
        CHECK(part == 1);
        break;
      }
    }
    REQUIRE(copies.size() == n + 1);
    std::set<std::pair<std::string, BlockKey>> seen;
    for (const protocol::SnapshotCopy& c : copies) seen.emplace(c.copy.holder.id, c.key);
    CHECK(seen.size() == n + 1);
    CHECK(seen.contains({"b", 1}));
    CHECK(seen.contains({"a", n}));

    // An unknown context is one empty, last part.
    conn.Send(MessageType::kSnapshot, 10,
              protocol::EncodeSnapshotRequest({ContextKey{"default", "x", "", 2, ""}}));
    Result<protocol::SnapshotPart> empty = protocol::DecodeSnapshotPart(conn.MustRead().payload);
    REQUIRE(empty.has_value());
    CHECK(empty->last);
    CHECK(empty->copies.empty());
    server.Stop();
  }

  TEST_CASE("RpcStreams: bad requests get error frames and the connection goes on") {
    TestServer s;
    s.services.options.max_snapshot_copies = 2;
    s.Store("a", {1, 2, 3});
    RpcServerOptions options = Options();
    options.connection.max_watches = 1;
    RpcServer server(options, &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    const auto error = [&conn](MessageType type, uint64_t id, std::string_view payload) {
      conn.Send(type, id, payload);
      const Frame frame = conn.MustRead();
      CHECK(frame.header.type == type);
      CHECK(frame.header.request_id == id);
      CHECK(frame.header.status != StatusCode::kOk);
      return protocol::DecodeWatchEnd(frame.header.status, frame.payload).status;
    };
    CHECK(error(MessageType::kWatch, 1, "\x05") ==
          Status::InvalidArgument("action: 5 is neither 0 (start) nor 1 (cancel)"));
    // After the filter, one byte is the options trailer (0 is refused), a second trails it.
    CHECK(error(MessageType::kWatch, 2, std::string(12, '\0')) ==
          Status::InvalidArgument("options: 0 sets no option (leave the byte out)"));
    CHECK(error(MessageType::kWatch, 4, std::string(10, '\0') + std::string("\x01\x00", 2)) ==
          Status::InvalidArgument("payload: 1 trailing bytes"));
    CHECK(error(MessageType::kSnapshot, 3,
                protocol::EncodeSnapshotRequest({ContextKey{"", "", "", 2, ""}})) ==
          Status::InvalidArgument("model_name: must be a non-empty string"));
    CHECK(error(MessageType::kSnapshot, 4, "").code() == StatusCode::kInvalidArgument);
    CHECK(error(MessageType::kSnapshot, 5, protocol::EncodeSnapshotRequest({kContext})) ==
          Status::PayloadTooLarge("the context has more than max_snapshot_copies (2) copies"));
    const Status future =
        error(MessageType::kWatch, 6, protocol::EncodeWatchRequest({false, 1000, {}}));
    CHECK(future.code() == StatusCode::kInvalidArgument);
    CHECK(future.message().find("in the future") != std::string::npos);
    conn.Ping(7);

    conn.Watch(8);
    conn.ReadBatch(8);
    CHECK(error(MessageType::kWatch, 9, protocol::EncodeWatchRequest({})).code() ==
          StatusCode::kResourceExhausted);  // one watch per connection here
    // A second start under an open watch's id ends that watch (one id, one final frame).
    const Status duplicate = error(MessageType::kWatch, 8, protocol::EncodeWatchRequest({}));
    CHECK(duplicate.code() == StatusCode::kInvalidArgument);
    conn.Cancel(8);  // nothing open any more: ignored
    conn.Ping(10);
    CHECK(s.feed.Stats().watchers == 0);
    server.Stop();
  }

  TEST_CASE("RpcStreams: without a change feed a watch is unavailable") {
    TestServer s({}, /*with_feed=*/false);
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Watch(1);
    const Frame frame = conn.MustRead();
    CHECK(frame.header.status == StatusCode::kUnavailable);
    conn.Ping(2);
    server.Stop();
  }

  TEST_CASE("RpcStreams: compacted watches name the oldest and current revision") {
    ChangeFeedOptions feed;
    feed.window_keys = 2;
    TestServer s(feed);
    s.Store("a", {1, 2});
    const Revision r2 = s.Store("a", {3, 4});
    const Revision r3 = s.Store("a", {5, 6});
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Watch(1, 0);
    const Frame frame = conn.MustRead();
    REQUIRE(frame.header.status == StatusCode::kCompacted);
    const protocol::WatchEnd end = protocol::DecodeWatchEnd(frame.header.status, frame.payload);
    CHECK(end.hint.oldest_revision == r2);
    CHECK(end.hint.current_revision == r3);
    CHECK_FALSE(end.hint.resume_from.has_value());
    CHECK(end.status.message().find("compacted") != std::string::npos);
    server.Stop();
  }

  TEST_CASE("RpcStreams: a client that stops reading is cut; another watcher gets everything") {
    ChangeFeedOptions feed;
    feed.watcher_queue_chunks = 8;
    TestServer s(feed);
    RpcServerOptions options = Options();
    options.threads = 2;
    options.connection.max_pending_output_bytes = 64 << 10;
    RpcServer server(options, &s.services);
    REQUIRE(server.Start().ok());
    Conn slow(server.port(), /*rcvbuf=*/4096);
    slow.Watch(1);
    const Revision start = slow.ReadBatch(1).through;
    Conn fast(server.port());
    fast.Watch(2);
    REQUIRE(fast.ReadBatch(2).through == start);

    // The fast watcher reads on its own thread; the test applies a group only once the
    // previous one reached it, so it never falls 8 groups behind while the slow one does.
    std::mutex mu;
    std::condition_variable cv;
    Revision fast_through = start;
    std::vector<Revision> fast_revisions;
    std::atomic<bool> fast_failed{false};
    constexpr int kGroups = 300;
    std::thread reader([&] {
      try {
        while (true) {
          protocol::WatchBatch batch = fast.ReadBatch(2);
          std::lock_guard lock(mu);
          for (const FeedRecord& r : batch.records) {
            if (fast_revisions.empty() || fast_revisions.back() != r.revision) {
              fast_revisions.push_back(r.revision);
            }
          }
          fast_through = batch.through;
          cv.notify_all();
          if (fast_revisions.size() == kGroups) return;
        }
      } catch (...) {
        fast_failed = true;
        cv.notify_all();
      }
    });
    Revision last = start;
    for (int i = 0; i < kGroups && !fast_failed; ++i) {
      last = s.Store("a", Keys(static_cast<BlockKey>(i) * 4096, 2048));  // 16 KiB of keys
      std::unique_lock lock(mu);
      REQUIRE(cv.wait_for(lock, 10s, [&] { return fast_through >= last || fast_failed; }));
    }
    reader.join();
    REQUIRE_FALSE(fast_failed.load());
    REQUIRE(fast_revisions.size() == kGroups);
    for (int i = 0; i < kGroups; ++i) CHECK(fast_revisions[i] == start + 1 + i);

    // The slow reader now reads: every revision from the start without a gap, up to the
    // cut, then the watch_cut end resuming exactly after the last revision received.
    Revision through = start;
    Revision expected = start + 1;
    std::optional<protocol::WatchEnd> end;
    while (!end) {
      const Frame frame = slow.MustRead();
      REQUIRE(frame.header.request_id == 1);
      if (frame.header.status != StatusCode::kOk) {
        end = protocol::DecodeWatchEnd(frame.header.status, frame.payload);
        break;
      }
      Result<protocol::WatchBatch> batch = protocol::DecodeWatchBatch(frame.payload);
      REQUIRE(batch.has_value());
      for (const FeedRecord& r : batch->records) {  // one record per group here
        REQUIRE(r.revision == expected);
        ++expected;
      }
      through = batch->through;
    }
    CHECK(end->status.code() == StatusCode::kWatchCut);
    CHECK(end->hint.resume_from == through);
    CHECK(through == expected - 1);
    CHECK(through < last);  // cut before the end
    CHECK(s.feed.Stats().cuts >= 1);
    slow.Ping(3);  // the connection itself goes on
    server.Stop();
  }

  TEST_CASE("RpcStreams: stopping the server ends open watches with unavailable") {
    TestServer s;
    RpcServer server(Options(), &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Watch(1);
    const Revision through = conn.ReadBatch(1).through;
    server.Stop();
    const Frame frame = conn.MustRead();
    CHECK(frame.header.request_id == 1);
    CHECK(frame.header.status == StatusCode::kUnavailable);
    const protocol::WatchEnd end = protocol::DecodeWatchEnd(frame.header.status, frame.payload);
    CHECK(end.hint.resume_from == through);
    CHECK_FALSE(conn.Read().has_value());  // then the connection closes
  }

  TEST_CASE("RpcStreams: a quiet watch keeps its connection open with empty frames") {
    TestServer s;
    RpcServerOptions options = Options();
    options.connection.idle_timeout = 100ms;
    RpcServer server(options, &s.services);
    REQUIRE(server.Start().ok());
    Conn conn(server.port());
    conn.Watch(1);
    const Revision through = conn.ReadBatch(1).through;
    for (int i = 0; i < 3; ++i) {  // each after about idle_timeout; not closed as idle
      const protocol::WatchBatch keep_alive = conn.ReadBatch(1);
      CHECK_FALSE(keep_alive.final);
      CHECK(keep_alive.records.empty());
      CHECK(keep_alive.through == through);
    }
    server.Stop();
  }
}

}  // namespace
}  // namespace kvatlas::server
