// The snapshot budget's arithmetic (raft_log_held.h): when RaftLog takes a snapshot early
// for the bytes its log holds, and how far it defers libraft's entry-count trigger.
#include "server/replication/raft_log_held.h"

#include <doctest/doctest.h>

namespace kvatlas::server {
namespace {

TEST_CASE("a sent snapshot is awaited 3 s, plus 1 s per 32 MiB of the last one") {
  CHECK(InstallSnapshotTimeoutMs(0) == 3'000);
  CHECK(InstallSnapshotTimeoutMs(1 << 20) == 3'031);
  CHECK(InstallSnapshotTimeoutMs(32ull << 20) == 4'000);
  CHECK(InstallSnapshotTimeoutMs(1ull << 30) == 35'000);
  CHECK(InstallSnapshotTimeoutMs(UINT64_MAX) == 3'600'000);
}

TEST_CASE("log budget: snapshot_log_bytes, or 1/16 of the last snapshot when more") {
  constexpr size_t kMiB = size_t{1} << 20;
  CHECK(LogBudgetBytes(64 * kMiB, 0) == 64 * kMiB);
  CHECK(LogBudgetBytes(64 * kMiB, 512 * kMiB) == 64 * kMiB);
  CHECK(LogBudgetBytes(64 * kMiB, uint64_t{2048} * kMiB) == 128 * kMiB);
  CHECK(LogBudgetBytes(64 * 1024, 45 * kMiB) == 45 * kMiB / 16);
}

TEST_CASE("log budget: the count trigger waits until the log holds 1/16 of the snapshot") {
  LogHeld held;
  held.entries = 10;
  held.bytes = 1000;
  CHECK(HeldWithOverhead(held) == 1000 + 10 * 64);
  CHECK(CountThreshold(held, 0, 100) == 100);  // no snapshot yet
  CHECK(CountThreshold(held, 16 * 1640, 100) == 100);
  CHECK(CountThreshold(held, 16 * 1641, 100) == 1600);  // deferred 16 times
}

}  // namespace
}  // namespace kvatlas::server
