// RpcStreams: the multi-frame answers of one binary-protocol connection (docs/protocol.md
// §kWatch, §kSnapshot): its open watches, fed by the ChangeFeed, and the snapshots it is
// sending in parts. Frames are produced only while the connection's unsent output is below
// a budget, so a client that reads slowly holds back its own streams and nothing else: a
// watch's records wait in its Watcher's bounded queue (which cuts the watch when it is
// full: the watch then ends with a watch_cut frame once what was queued has been sent), a
// snapshot's next pages in its SnapshotStream, whose scan waits for them to be taken.
//
// A watcher's notify hook runs on the applying thread; it only calls `wake` (set by the
// connection, which posts to its strand), so publishing never waits for a connection.
//
// Thread-safety: the connection's strand only (SetWake's function excepted).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvatlas/common/protocol.h"
#include "server/feed/change_feed.h"
#include "server/service/feed_service.h"
#include "server/service/services.h"
#include "server/service/snapshot_stream.h"

namespace kvatlas::server {

class RpcStreams {
 public:
  // Size bounds of what one step produces (docs/protocol.md §Limits).
  static constexpr size_t kWatchFrameBytes = 1u << 20;  // records per frame, roughly
  static constexpr size_t kMaxRecordKeys = 65536;       // longer records go in pieces
  static constexpr size_t kTakeKeys = 131072;           // block keys taken per watcher step

  // How a request was answered.
  enum class Handled {
    kAnswered,  // its (first or only) answer frame was appended: one answer
    kPending,   // a snapshot: answered when Produce appends its last part
    kIgnored,   // a cancel of no open watch (it crossed the watch's end): no frame
  };

  // `services` must outlive the streams. At most `max_watches` watches are open at once.
  RpcStreams(const Services* services, size_t max_watches);
  ~RpcStreams();
  RpcStreams(const RpcStreams&) = delete;
  RpcStreams& operator=(const RpcStreams&) = delete;

  // `wake(request_id, serial)` is called (from any thread) when the watch has something to
  // send; the connection must then call OnReady on its strand. Set before Handle.
  void SetWake(std::function<void(uint64_t, uint64_t)> wake) { wake_ = std::move(wake); }

  // A kWatch (start or cancel) or kSnapshot request (not a response frame). Appends the
  // answer, or an error answer, to *out; never throws on bad input.
  [[nodiscard]] Handled Handle(const protocol::Frame& request, std::string* out);

  // Marks the watch (`serial`: that very watch, not a later one reusing the id) ready.
  void OnReady(uint64_t request_id, uint64_t serial);

  // Appends frames of ready watches and snapshots in progress while out->size() < budget.
  // Returns how many kPending requests got their last frame.
  [[nodiscard]] size_t Produce(size_t budget, std::string* out);

  // Something is ready to be produced.
  bool pending() const;
  bool has_watches() const { return !watches_.empty(); }

  // Ends every open watch with `status` (its final frame, with resume_from); snapshots in
  // progress carry on.
  void EndWatches(const Status& status, std::string* out);
  // Appends a frame without records to every open watch (a keep-alive: a vanished client
  // is found by the write failing).
  void KeepAlive(std::string* out);
  // Drops every stream without a frame (the connection closed).
  void Clear();

 private:
  struct Watch {
    std::unique_ptr<Watcher> watcher;
    uint64_t serial = 0;
    bool ready = false;
  };
  // A snapshot being sent: its pages are produced by its stream (snapshot_stream.h) as the
  // connection's output drains; `ready` is set (from the stream's thread) when one is.
  struct Snapshot {
    uint64_t request_id = 0;
    std::unique_ptr<SnapshotStream> stream;
    std::shared_ptr<std::atomic<bool>> ready;
    uint32_t part = 0;
  };

  Handled HandleWatch(const protocol::Frame& request, std::string* out);
  Handled HandleSnapshot(const protocol::Frame& request, std::string* out);
  Status StartWatch(uint64_t request_id, const protocol::WatchRequest& request, std::string* out);
  // One step of a ready watch; erases it when it ended.
  void ProduceWatch(std::map<uint64_t, Watch>::iterator it, std::string* out);
  void AppendRecords(uint64_t request_id, Watcher::Take take, std::string* out);
  // Appends the snapshot's next part if its stream has one ready (*produced), or its error;
  // true when the snapshot ended (its last part or an error frame was appended).
  bool ProducePart(Snapshot& snapshot, bool* produced, std::string* out);

  void AppendOk(protocol::MessageType type, uint64_t request_id, std::string_view payload,
                std::string* out) const;
  void AppendEnd(uint64_t request_id, const Status& status, const protocol::WatchEndHint& hint,
                 std::string* out) const;
  void AppendError(protocol::MessageType type, uint64_t request_id, const Status& status,
                   std::string* out) const;
  void Count(protocol::MessageType type, StatusCode code) const;

  const Services* services_;
  const size_t max_watches_;
  std::function<void(uint64_t, uint64_t)> wake_;
  std::map<uint64_t, Watch> watches_;  // by request id
  uint64_t next_serial_ = 1;
  uint64_t resume_after_ = 0;  // Produce serves ready watches after this id first (fairness)
  std::deque<Snapshot> snapshots_;
};

}  // namespace kvatlas::server
