// GroupRouter: sends each context's reads to a server that holds the context's raft group
// (docs/scaling.md §Clients that route by the directory). On a cluster whose groups live on
// some servers only (`replicas`), a server that holds no replica of a group sends a read of
// it on to a member: a second round trip, which routing by the directory saves.
//
// The routing table is the kDirectory answer (the number of groups, the placement directory,
// the servers' binary-protocol addresses), fetched through the client's own connections
// (`origin`): once by Start, then every ClientOptions::directory_refresh, and at once when a
// server answers a call wrong_group (it holds no replica of the group: the table is stale, or
// the call went through `origin`). A table of one group, or whose groups record no members
// (every server holds every group), routes nothing.
//
// Members' connections: one Client::Impl per member address, opened by the router's worker
// thread as the table names them (connecting blocks) and kept until Stop (a call in flight
// on one never fails because the table changed; at most kMaxDirectoryServers of them).
// For calls that route: a context goes to one of its group's members whose connection is
// open, picked by the context so that contexts spread over the members; with none open,
// or no table, to `origin`, whose server sends it on. A missing, stale or unreachable table
// therefore costs a second hop, never a wrong answer: every server checks that it holds the
// group it answers for.
//
// Thread-safety: For, Call and RefreshSoon from any thread (they never block on the
// network); Start and Stop from the client's owner.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/src/client_impl.h"
#include "kvatlas/common/placement.h"

namespace kvatlas::client {

class GroupRouter {
 public:
  using Clock = std::chrono::steady_clock;

  // `options` are the client's (its endpoints are ignored); `origin` owns this router and
  // Stop()s it before it goes.
  GroupRouter(ClientOptions options, Client::Impl* origin);
  ~GroupRouter();  // Stop()s
  GroupRouter(const GroupRouter&) = delete;
  GroupRouter& operator=(const GroupRouter&) = delete;

  // Fetches the table (waiting up to the client's connect_timeout for it) and opens the
  // members' connections (up to connect_timeout each), then starts the worker. A failed fetch is
  // not an error: calls go through `origin` until a later refresh succeeds (an older server answers
  // kDirectory invalid_argument, and then nothing routes).
  void Start();

  // The connection for a read of `context`: a member of its group, or `origin`.
  [[nodiscard]] Client::Impl& For(const ContextKey& context);

  // Sends a read of `context` (a `type` call with `payload`, due by `deadline`) by the
  // table; a wrong_group answer is sent again, once, by the table fetched after it (within
  // the deadline), since the server applied nothing.
  void Call(const ContextKey& context, protocol::MessageType type, std::string_view payload,
            Clock::time_point deadline, Client::Impl::Done done);

  // Asks the worker to fetch the table now (a wrong_group answer). Never blocks.
  void RefreshSoon();

  // Joins the worker (pending tasks run with false) and closes the members' connections
  // (their calls fail with kUnavailable). Idempotent.
  void Stop();

 private:
  // The table a call is routed by: built by the worker, swapped whole.
  struct Table {
    uint32_t groups = 1;
    PlacementDirectory directory;
    std::map<GroupId, std::vector<Client::Impl*>> members;  // groups with recorded members
  };

  // The table calls are routed by now (null before the first fetch).
  std::shared_ptr<const Table> Current() const;
  // Whether `table` routes any group to its members.
  static bool Routes(const Table* table);
  // The connection for a read of `context` by `table`: a member of its group, or `origin`.
  Client::Impl& Pick(const Table* table, const ContextKey& context);
  // Runs `task(true)` on the worker once a refresh asked after this call has ended, or
  // `task(false)` when the router stops first.
  void AfterRefresh(std::function<void(bool run)> task);
  // Worker thread (or Start): fetches the table through origin_ (the call's `timeout`),
  // opens new members' connections, swaps it in, then runs the tasks that waited for it.
  void Refresh(Client::Timeout timeout);
  void Run();

  const ClientOptions options_;
  Client::Impl* const origin_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool refresh_asked_ = false;
  std::shared_ptr<const Table> table_;  // null until a fetch succeeds
  // Members' connections by address: added by the worker (or Start) only, erased by Stop.
  std::map<std::string, std::unique_ptr<Client::Impl>> connections_;
  std::vector<std::function<void(bool)>> after_refresh_;
  std::thread worker_;
};

}  // namespace kvatlas::client
