// SpareMaker: a thread that makes the index's growth spares (Index::MakeSpare) so that the
// writer does not: the writer asks with Request() after applying, and installs what
// TakeReady() returns before its next apply. Allocating and emptying a spare touches
// hundreds of MB for large tables (flat_table.h §Spares), and a pool's next chunk up to 22 MB
// (pool.h); here it costs the writer nothing.
//
// Memory: at most one spare per part (table or pool) is pending or ready (a part asks
// again only with a new capacity), so what is held ahead is at most the next growth of
// each.
//
// Thread-safety: Request and TakeReady from any thread (the writer, in practice).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "server/index/index.h"

namespace kvatlas::server {

class SpareMaker {
 public:
  SpareMaker();
  ~SpareMaker();  // waits for the spare being made, drops the rest
  SpareMaker(const SpareMaker&) = delete;
  SpareMaker& operator=(const SpareMaker&) = delete;

  // Asks for `need`'s spare unless one for that part and capacity is already pending or
  // ready. Never blocks on the making.
  void Request(const SpareNeed& need);

  // The spares made since the last call.
  std::vector<IndexSpare> TakeReady();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SpareNeed> pending_;  // guarded by mu_
  std::vector<SpareNeed> asked_;   // pending, being made or ready; guarded by mu_
  std::vector<std::pair<SpareNeed, IndexSpare>> ready_;  // guarded by mu_
  bool stopping_ = false;                                // guarded by mu_
  std::thread thread_;
};

}  // namespace kvatlas::server
