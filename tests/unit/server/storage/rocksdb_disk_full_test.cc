// RocksDbStorage on a disk that fills up: failed writes are errors, never a crash, and what
// was written before is there after a restart. RocksDB 7.8 as Debian builds it keeps its
// assertions, and a file writer that failed once asserts on its next write or sync: the WAL
// did at FlushWAL (a stop after a failed write; this test aborts without Flush's guard), and
// RocksDB's own LOG file did when it logged a write error on a full tmpfs (InfoLog replaces
// that logger; its file is written with plain write(2), checked below).
#include <doctest/doctest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "server/storage/rocksdb_info_log.h"
#include "server/storage/storage.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/server/storage/storage_test_support.h"

namespace kvatlas::server {
namespace {

using rocksdb_storage::InfoLog;
using testing::TempDir;

// Every append to a file written through this file system fails with "no space" while
// `full` is set, as on a full disk.
class FillableFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit FillableFileSystem(std::shared_ptr<rocksdb::FileSystem> base)
      : rocksdb::FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "FillableFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* debug) override {
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(name, options, &file, debug);
    if (s.ok()) result->reset(new File(std::move(file), &full));
    return s;
  }

  std::atomic<bool> full{false};

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, const std::atomic<bool>* full)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(file)), full_(full) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* debug) override {
      if (full_->load()) return rocksdb::IOStatus::NoSpace("test: the disk is full");
      return rocksdb::FSWritableFileOwnerWrapper::Append(data, options, debug);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* debug) override {
      if (full_->load()) return rocksdb::IOStatus::NoSpace("test: the disk is full");
      return rocksdb::FSWritableFileOwnerWrapper::Append(data, options, info, debug);
    }

   private:
    const std::atomic<bool>* full_;
  };
};

Mutation Position(const std::string& stream, uint64_t sequence) {
  Mutation m;
  m.kind = MutationKind::kPutStreamPosition;
  m.location = stream;
  m.stamp = sequence;
  return m;
}

TEST_SUITE("rocksdb_storage") {
  TEST_CASE("RocksDbStorage: a full disk fails writes and the flush, and the stop, cleanly") {
    for (const bool sync : {true, false}) {
      CAPTURE(sync);
      TempDir dir;
      auto fs = std::make_shared<FillableFileSystem>(rocksdb::FileSystem::Default());
      StorageOptions options = SmallOptions(dir);
      options.sync_writes = sync;
      options.env = std::shared_ptr<rocksdb::Env>(rocksdb::NewCompositeEnv(fs));
      {
        auto storage = OpenOk(options);
        REQUIRE(storage->Write(1, std::vector<Mutation>{Position("s", 1)}).ok());
        fs->full = true;
        for (Revision r = 2; r < 5; ++r) {
          const Status failed = storage->Write(r, std::vector<Mutation>{Position("s", r)});
          CHECK(failed.code() == StatusCode::kIOError);
        }
        const Status flushed = storage->Flush();
        CHECK_FALSE(flushed.ok());
      }  // closing the database must not abort either
      fs->full = false;
      options.env = nullptr;
      auto reopened = OpenOk(options);
      // Written before the disk filled, and synced (or, without sync, in the page cache).
      CHECK(reopened->AppliedIndex().value() == 1);
    }
  }

  TEST_CASE("InfoLog: keeps one previous LOG, cuts long lines, and counts what it drops") {
    TempDir dir;
    const std::string log = dir.str() + "/LOG";
    std::ofstream(log) << "previous run\n";
    {
      Result<std::shared_ptr<InfoLog>> opened = InfoLog::Open(dir.str(), 1 << 20);
      REQUIRE(opened.has_value());
      std::shared_ptr<rocksdb::Logger> logger = *opened;
      rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, logger, "hello %d", 42);
      const std::string huge(10'000, 'x');
      rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, logger, "%s", huge.c_str());
      CHECK((*opened)->dropped_lines() == 0);
    }
    std::ifstream old(log + ".old");
    std::string line;
    REQUIRE(std::getline(old, line));
    CHECK(line == "previous run");
    std::ifstream current(log);
    std::vector<std::string> lines;
    while (std::getline(current, line)) lines.push_back(line);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].find("INFO") != std::string::npos);
    CHECK(lines[0].find("hello 42") != std::string::npos);
    CHECK(lines[1].size() < 4096);
  }

  TEST_CASE("InfoLog: rotates past its size limit") {
    TempDir dir;
    Result<std::shared_ptr<InfoLog>> opened = InfoLog::Open(dir.str(), 1000);
    REQUIRE(opened.has_value());
    std::shared_ptr<rocksdb::Logger> logger = *opened;
    for (int i = 0; i < 50; ++i)
      rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, logger, "line %d of the test", i);
    CHECK(std::filesystem::file_size(dir.str() + "/LOG") <= 1000);
    CHECK(std::filesystem::file_size(dir.str() + "/LOG.old") <= 1000);
    CHECK((*opened)->GetLogFileSize() <= 1000);
  }
}

}  // namespace
}  // namespace kvatlas::server
