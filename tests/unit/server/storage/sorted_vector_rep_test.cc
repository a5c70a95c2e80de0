// SortedVectorRepFactory under RocksDB: every read path (scans both ways, seeks, point
// reads, snapshots) must see exactly what a std::map model holds, for keys chosen so that
// the 16-byte prefixes the memtable sorts by tie, and keys are prefixes of one another.
#include "server/storage/sorted_vector_rep.h"

#include <doctest/doctest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace kvatlas::server {
namespace {

using testing::TempDir;
using Model = std::map<std::string, std::string>;

// Keys from a small alphabet (0x00, 0x01, 'a', 0xff), of length 0-40, half of them behind a
// shared 16-byte stem: prefixes tie often and short keys are prefixes of long ones.
std::string RandomKey(std::mt19937_64& rng) {
  static const char kAlphabet[] = {'\x00', '\x01', 'a', '\xff'};
  std::string key;
  if (rng() % 2 == 0) key = std::string(16, 'k');
  const size_t length = rng() % 24;
  for (size_t i = 0; i < length; ++i) key.push_back(kAlphabet[rng() % 4]);
  return key;
}

rocksdb::Slice ToSlice(const std::string& s) { return rocksdb::Slice(s.data(), s.size()); }

std::unique_ptr<rocksdb::DB> Open(const std::string& path, size_t write_buffer_size = 64 << 10) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.memtable_factory = std::make_shared<SortedVectorRepFactory>();
  options.allow_concurrent_memtable_write = false;
  // Small memtables by default: the run flushes many times, so reads merge memtables and
  // files.
  options.write_buffer_size = write_buffer_size;
  options.max_write_buffer_number = 4;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return std::unique_ptr<rocksdb::DB>(raw);
}

// Compares every read path of `db` (at `snapshot`, if any) with `model`.
void CheckReads(rocksdb::DB* db, const rocksdb::Snapshot* snapshot, const Model& model,
                std::mt19937_64& rng) {
  rocksdb::ReadOptions read;
  read.snapshot = snapshot;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
  // Forward and backward scans.
  std::vector<std::pair<std::string, std::string>> forward;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    forward.emplace_back(it->key().ToString(), it->value().ToString());
  }
  REQUIRE(it->status().ok());
  CHECK(forward == std::vector<std::pair<std::string, std::string>>(model.begin(), model.end()));
  std::vector<std::string> backward;
  for (it->SeekToLast(); it->Valid(); it->Prev()) backward.push_back(it->key().ToString());
  std::vector<std::string> expected_backward;
  for (auto m = model.rbegin(); m != model.rend(); ++m) expected_backward.push_back(m->first);
  CHECK(backward == expected_backward);
  // Seeks and point reads of keys present and absent.
  for (int i = 0; i < 50; ++i) {
    const std::string target = RandomKey(rng);
    it->Seek(ToSlice(target));
    auto lower = model.lower_bound(target);
    REQUIRE(it->Valid() == (lower != model.end()));
    if (it->Valid()) CHECK(it->key().ToString() == lower->first);
    it->SeekForPrev(ToSlice(target));
    auto upper = model.upper_bound(target);
    REQUIRE(it->Valid() == (upper != model.begin()));
    if (it->Valid()) CHECK(it->key().ToString() == std::prev(upper)->first);
    std::string value;
    rocksdb::Status s = db->Get(read, ToSlice(target), &value);
    auto found = model.find(target);
    if (found == model.end()) {
      CHECK(s.IsNotFound());
    } else {
      REQUIRE(s.ok());
      CHECK(value == found->second);
    }
  }
}

TEST_CASE("SortedVectorRep: RocksDB reads match a model through flushes and snapshots") {
  TempDir dir;
  const std::string path = dir.str() + "/db";
  std::mt19937_64 rng(20261130);
  Model model;
  auto db = Open(path);
  // A snapshot taken mid-run, and the model as it was then.
  const rocksdb::Snapshot* pinned = nullptr;
  Model pinned_model;
  for (int round = 0; round < 40; ++round) {
    for (int op = 0; op < 500; ++op) {
      const std::string key = RandomKey(rng);
      if (rng() % 4 == 0) {
        REQUIRE(db->Delete(rocksdb::WriteOptions(), ToSlice(key)).ok());
        model.erase(key);
      } else {
        // Overwrites give one user key several sequence numbers in one memtable.
        const std::string value = std::to_string(rng() % 1000) + std::string(rng() % 64, 'v');
        REQUIRE(db->Put(rocksdb::WriteOptions(), ToSlice(key), ToSlice(value)).ok());
        model[key] = value;
      }
    }
    // Reads over the live (mutable) memtable, then at the pinned snapshot, whose records
    // later writes and flushes must not disturb.
    CheckReads(db.get(), nullptr, model, rng);
    if (round == 10) {
      pinned = db->GetSnapshot();
      pinned_model = model;
    }
    if (pinned != nullptr) CheckReads(db.get(), pinned, pinned_model, rng);
  }
  db->ReleaseSnapshot(pinned);
  // The WAL replayed into a fresh memtable at reopen reads the same.
  db.reset();
  db = Open(path);
  CheckReads(db.get(), nullptr, model, rng);
  // And once everything is flushed and compacted into files.
  REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());
  REQUIRE(db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
  CheckReads(db.get(), nullptr, model, rng);
}

TEST_CASE("SortedVectorRep: one memtable of many storage chunks reads in order") {
  // 100k entries span four of the memtable's 32k-entry chunks (sorted_vector_rep.cc).
  TempDir dir;
  auto db = Open(dir.str() + "/db", size_t{64} << 20);
  std::mt19937_64 rng(1130);
  Model model;
  rocksdb::WriteBatch batch;
  for (int i = 0; i < 100'000; ++i) {
    const std::string key = RandomKey(rng) + std::to_string(rng() % 1'000'000);
    const std::string value = std::to_string(i);
    REQUIRE(batch.Put(ToSlice(key), ToSlice(value)).ok());
    model[key] = value;
  }
  REQUIRE(db->Write(rocksdb::WriteOptions(), &batch).ok());
  std::string entries;
  REQUIRE(db->GetProperty("rocksdb.num-entries-active-mem-table", &entries));
  REQUIRE(std::stoul(entries) == 100'000);  // all still in the one live memtable
  CheckReads(db.get(), nullptr, model, rng);
  REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());
  CheckReads(db.get(), nullptr, model, rng);
}

TEST_CASE("SortedVectorRep: keys whose entry length takes two and three varint bytes") {
  // The memtable decodes each entry's varint32 key length itself (sorted_vector_rep.cc);
  // the other cases' keys all fit a one-byte length.
  TempDir dir;
  auto db = Open(dir.str() + "/db", size_t{64} << 20);
  std::mt19937_64 rng(1205);
  Model model;
  for (int i = 0; i < 300; ++i) {
    const size_t length = i % 3 == 0   ? 120 + rng() % 16
                          : i % 3 == 1 ? 200 + rng() % 16000
                                       : 16'400 + rng() % 4'000;
    std::string key = RandomKey(rng);
    key.resize(length, static_cast<char>('a' + rng() % 3));
    const std::string value = std::to_string(i);
    REQUIRE(db->Put(rocksdb::WriteOptions(), ToSlice(key), ToSlice(value)).ok());
    model[key] = value;
  }
  CheckReads(db.get(), nullptr, model, rng);
  REQUIRE(db->Flush(rocksdb::FlushOptions()).ok());
  CheckReads(db.get(), nullptr, model, rng);
}

TEST_CASE("SortedVectorRep: an iterator over the live memtable is not moved by later writes") {
  TempDir dir;
  auto db = Open(dir.str() + "/db");
  REQUIRE(db->Put(rocksdb::WriteOptions(), "b", "1").ok());
  REQUIRE(db->Put(rocksdb::WriteOptions(), "d", "2").ok());
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  REQUIRE(db->Put(rocksdb::WriteOptions(), "a", "3").ok());
  REQUIRE(db->Put(rocksdb::WriteOptions(), "c", "4").ok());
  std::vector<std::string> keys;
  for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
  CHECK(keys == std::vector<std::string>{"b", "d"});
  it.reset();
  keys.clear();
  it.reset(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
  CHECK(keys == std::vector<std::string>{"a", "b", "c", "d"});
}

TEST_CASE("SortedVectorRep: reads concurrent with the writer see consistent prefixes") {
  TempDir dir;
  auto db = Open(dir.str() + "/db");
  constexpr int kKeys = 20000;
  auto key_of = [](int i) {
    std::string key = std::to_string(i);
    return std::string(8 - key.size(), '0') + key;
  };
  std::atomic<int> written{0};
  std::atomic<bool> write_failed{false};
  std::thread writer([&] {
    for (int i = 0; i < kKeys; ++i) {
      if (!db->Put(rocksdb::WriteOptions(), key_of(i), "v").ok()) {
        write_failed = true;
        written.store(kKeys, std::memory_order_release);  // ends the reader's loop
        return;
      }
      written.store(i + 1, std::memory_order_release);
    }
  });
  // Keys are written in order, so every consistent view is exactly keys [0, n), with n
  // never below what was acknowledged before the view was taken.
  int scans = 0;
  int last_seen = 0;
  while (last_seen < kKeys) {
    const int acknowledged = written.load(std::memory_order_acquire);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    int n = 0;
    bool in_order = true;
    for (it->SeekToFirst(); it->Valid(); it->Next())
      in_order &= it->key().ToString() == key_of(n++);
    REQUIRE(it->status().ok());
    REQUIRE(in_order);
    REQUIRE(n >= acknowledged);
    REQUIRE(n >= last_seen);
    if (acknowledged > 0) {
      std::string value;
      REQUIRE(db->Get(rocksdb::ReadOptions(), key_of(acknowledged - 1), &value).ok());
    }
    last_seen = n;
    ++scans;
  }
  writer.join();
  CHECK_FALSE(write_failed.load());
  CHECK(scans > 1);
}

}  // namespace
}  // namespace kvatlas::server
