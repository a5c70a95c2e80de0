// HttpGroupForwarder: the GroupForwarder of a server hosting several raft groups
// (group_forwarder.h; docs/scaling.md §Writes reach every group's leader). A write part for
// a group this server does not lead is POSTed to that group's leader as
// `POST /v1/cluster/apply?group=G`, its body the part's EncodeCommandBatch bytes, signed
// with the cluster secret like every internal call (forwarding.h); the leader submits it to
// its applier and answers {"revision"} once applied, signed, and only a 200 signed by the
// server raft names as the group's leader acknowledges the part.
//
// While the group's leader (or its announced HTTP address) is unknown, its connection does
// not open, or it answers not_leader (leadership moving), the part is held and retried every
// 5 ms, up to options.apply_timeout; past it, kUnavailable naming the last reason. If this
// server becomes the group's leader meanwhile, the part goes to its own applier. A call that
// fails after the part was sent is not retried (it may have been applied): kUnavailable,
// as for a proxied request. An error the leader answers (e.g. resource_exhausted) is passed
// on with its code.
//
// Threading: TryForward from any thread (never blocks: a bounded queue, refused when full);
// the calls run on the forwarder's own threads (they block on the network), so no network
// handler, raft loop or applier thread waits on another server.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/service/group_forwarder.h"
#include "server/service/services.h"

namespace kvatlas::server {

struct GroupForwarderOptions {
  size_t threads = 4;        // calls in flight at once
  size_t max_queue = 4'096;  // parts waiting for a thread; past it TryForward refuses
};

class HttpGroupForwarder final : public GroupForwarder {
 public:
  explicit HttpGroupForwarder(GroupForwarderOptions options = {});
  ~HttpGroupForwarder() override;  // Stop()s
  HttpGroupForwarder(const HttpGroupForwarder&) = delete;
  HttpGroupForwarder& operator=(const HttpGroupForwarder&) = delete;

  [[nodiscard]] Status TryForward(const Services& group, CommandBatch* batch,
                                  Applier::Callback done) override;
  [[nodiscard]] Status TryRead(const Services& group, uint8_t type, std::string payload,
                               ReadCallback done) override;

  // Answers every part still queued kUnavailable, lets the calls in flight finish, and joins
  // the threads. Idempotent.
  void Stop();

 private:
  // A write part (`done`), or a read (`read_done`).
  struct Part {
    const Services* group = nullptr;
    CommandBatch batch;
    Applier::Callback done;
    uint8_t read_type = 0;
    std::string read_payload;
    ReadCallback read_done;
  };
  // Queues make()'s part, calling it only when there is room.
  [[nodiscard]] Status Enqueue(const std::function<Part()>& make);
  void Run();

  GroupForwarderOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  // Set by Stop: a part held for its group's leader gives up at its next poll.
  std::atomic<bool> abandon_{false};
  std::vector<std::thread> threads_;
};

// Delivers `batch` to the leader of `group`'s raft group and waits for its revision (the
// call HttpGroupForwarder's threads make; blocking, see the file comment). A hold gives up
// (kUnavailable) once `*abandon` is set.
//
// On a server that holds no replica of the group (replicas on some servers), the part goes
// to the group's recorded members in turn: the leader among them applies it, the others
// answer 421 without applying it. A read (TryRead) goes to them the same way as
// `POST /v1/cluster/read?group=G&type=T` (its body the request payload), answered by the
// first that serves the group with the answer payload.
[[nodiscard]] Result<Revision> DeliverToGroupLeader(const Services& group, CommandBatch batch,
                                                    const std::atomic<bool>& abandon);
[[nodiscard]] Result<std::string> ReadFromGroupMember(const Services& group, uint8_t type,
                                                      const std::string& payload,
                                                      const std::atomic<bool>& abandon);

}  // namespace kvatlas::server
