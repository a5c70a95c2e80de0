// RepairAppendBelowSnapshot on messages built as libraft's receive path builds them (one
// batch holding every entry's data): which messages it leaves alone, how it rewrites the
// others, and that the batches it drops are freed exactly once (ASan in CI).
#include <doctest/doctest.h>

extern "C" {
#include <raft.h>
}

#include <cstdint>
#include <cstring>
#include <vector>

#include "server/replication/append_below_snapshot.h"

namespace kvatlas::server {
namespace {

// A follower in term 3 whose snapshot ends at 50 (term 2) and whose log holds 41..60.
struct raft Follower() {
  struct raft raft;
  std::memset(&raft, 0, sizeof(raft));
  raft.current_term = 3;
  raft.log.offset = 40;
  raft.log.snapshot.last_index = 50;
  raft.log.snapshot.last_term = 2;
  return raft;
}

// An AppendEntries of `n` entries after `prev`, each 8 bytes of its own index, in one batch.
struct raft_message Append(raft_index prev, unsigned n, raft_term term = 3) {
  struct raft_message message;
  std::memset(&message, 0, sizeof(message));
  message.type = RAFT_IO_APPEND_ENTRIES;
  struct raft_append_entries& append = message.append_entries;
  append.term = term;
  append.prev_log_index = prev;
  append.prev_log_term = 1;
  append.leader_commit = prev + n;
  append.n_entries = n;
  if (n == 0) return message;
  auto* batch = static_cast<uint64_t*>(raft_malloc(n * sizeof(uint64_t)));
  append.entries = static_cast<struct raft_entry*>(raft_malloc(n * sizeof(struct raft_entry)));
  for (unsigned i = 0; i < n; ++i) {
    batch[i] = prev + 1 + i;
    append.entries[i] = raft_entry{2, RAFT_COMMAND, {&batch[i], sizeof(uint64_t)}, batch};
  }
  return message;
}

// What libraft does with a message's entries once it is done with them.
void Release(struct raft_message* message) {
  struct raft_append_entries& append = message->append_entries;
  if (append.entries == nullptr) return;
  raft_free(append.entries[0].batch);
  raft_free(append.entries);
}

std::vector<uint64_t> Indexes(const struct raft_message& message) {
  std::vector<uint64_t> out;
  for (unsigned i = 0; i < message.append_entries.n_entries; ++i) {
    uint64_t index;
    std::memcpy(&index, message.append_entries.entries[i].buf.base, sizeof(index));
    out.push_back(index);
  }
  return out;
}

TEST_CASE("append below snapshot: messages libraft checks correctly are left alone") {
  const struct raft follower = Follower();
  struct {
    const char* why;
    struct raft_message message;
  } cases[] = {
      {"at the snapshot", Append(50, 3)},
      {"past the snapshot", Append(55, 2)},
      {"below the snapshot, still held (trailing)", Append(45, 4)},
      {"below the log, from a stale term (refused for its term)", Append(10, 3, /*term=*/2)},
  };
  for (auto& c : cases) {
    CAPTURE(c.why);
    const raft_index prev = c.message.append_entries.prev_log_index;
    const unsigned n = c.message.append_entries.n_entries;
    CHECK_FALSE(RepairAppendBelowSnapshot(follower, &c.message));
    CHECK(c.message.append_entries.prev_log_index == prev);
    CHECK(c.message.append_entries.n_entries == n);
    Release(&c.message);
  }
  struct raft_message vote;
  std::memset(&vote, 0, sizeof(vote));
  vote.type = RAFT_IO_REQUEST_VOTE;
  CHECK_FALSE(RepairAppendBelowSnapshot(follower, &vote));

  struct raft fresh = Follower();  // no snapshot yet: its log holds everything from 1
  fresh.log.offset = 0;
  fresh.log.snapshot = {0, 0};
  struct raft_message from_one = Append(0, 3);
  CHECK_FALSE(RepairAppendBelowSnapshot(fresh, &from_one));
  Release(&from_one);
}

TEST_CASE("append below snapshot: a probe below the log starts at the snapshot") {
  const struct raft follower = Follower();
  for (raft_index prev : {raft_index{0}, raft_index{1}, raft_index{39}, raft_index{40}}) {
    CAPTURE(prev);
    struct raft_message heartbeat = Append(prev, 0);
    REQUIRE(RepairAppendBelowSnapshot(follower, &heartbeat));
    CHECK(heartbeat.append_entries.prev_log_index == 50);
    CHECK(heartbeat.append_entries.prev_log_term == 2);
    CHECK(heartbeat.append_entries.n_entries == 0);
    CHECK(heartbeat.append_entries.entries == nullptr);
    CHECK(heartbeat.append_entries.leader_commit == prev);  // untouched
  }
}

TEST_CASE("append below snapshot: entries the snapshot covers are dropped") {
  const struct raft follower = Follower();
  SUBCASE("all of them: the batch is freed") {
    struct raft_message message = Append(0, 50);  // 1..50, libraft's "from index 1"
    REQUIRE(RepairAppendBelowSnapshot(follower, &message));
    CHECK(message.append_entries.prev_log_index == 50);
    CHECK(message.append_entries.n_entries == 0);
    CHECK(message.append_entries.entries == nullptr);
    Release(&message);
  }
  SUBCASE("some of them: the rest keep their batch, from the snapshot's next index") {
    struct raft_message message = Append(30, 25);  // 31..55
    REQUIRE(RepairAppendBelowSnapshot(follower, &message));
    CHECK(message.append_entries.prev_log_index == 50);
    CHECK(message.append_entries.prev_log_term == 2);
    CHECK(Indexes(message) == std::vector<uint64_t>{51, 52, 53, 54, 55});
    Release(&message);
  }
  SUBCASE("from index 1 past the snapshot") {
    struct raft_message message = Append(0, 52);  // 1..52
    REQUIRE(RepairAppendBelowSnapshot(follower, &message));
    CHECK(Indexes(message) == std::vector<uint64_t>{51, 52});
    Release(&message);
  }
}

}  // namespace
}  // namespace kvatlas::server
