// RocksDB's info log (the LOG file in the database directory), written by kvatlas instead
// of RocksDB's own logger.
//
// RocksDB 7.8 as Debian builds it keeps assert() enabled, and its file logger asserts when
// it writes again after one failed write: a full disk made the next log line (RocksDB logs
// the write error itself) abort the server. This logger writes each line with one write(2)
// and drops a line it cannot write, counting the drops, so a full disk costs log lines,
// never the process. Warnings and errors are also copied to kvatlas's own log (stderr).
#pragma once

#include <rocksdb/env.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kvatlas/common/result.h"

namespace kvatlas::server::rocksdb_storage {

class InfoLog final : public rocksdb::Logger {
 public:
  // Opens `directory`/LOG for appending after renaming an existing one to LOG.old (one
  // previous generation is kept). Past `max_bytes` the file is rotated the same way.
  [[nodiscard]] static Result<std::shared_ptr<InfoLog>> Open(const std::string& directory,
                                                             uint64_t max_bytes);
  ~InfoLog() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override;
  size_t GetLogFileSize() const override;

  // Lines that could not be written (a full disk, an I/O error).
  [[nodiscard]] uint64_t dropped_lines() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  InfoLog(std::string path, int fd, uint64_t size, uint64_t max_bytes);
  void Write(rocksdb::InfoLogLevel level, const char* format, va_list ap);
  void RotateLocked();

  const std::string path_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  int fd_;         // guarded by mu_; -1 after a failed rotation
  uint64_t size_;  // guarded by mu_
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace kvatlas::server::rocksdb_storage
