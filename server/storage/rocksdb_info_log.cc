#include "server/storage/rocksdb_info_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string_view>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server::rocksdb_storage {
namespace {

constexpr size_t kMaxLineBytes = 4096;

int OpenForAppend(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

std::string_view LevelName(rocksdb::InfoLogLevel level) {
  switch (level) {
    case rocksdb::InfoLogLevel::DEBUG_LEVEL:
      return "DEBUG";
    case rocksdb::InfoLogLevel::INFO_LEVEL:
      return "INFO";
    case rocksdb::InfoLogLevel::WARN_LEVEL:
      return "WARN";
    case rocksdb::InfoLogLevel::ERROR_LEVEL:
      return "ERROR";
    case rocksdb::InfoLogLevel::FATAL_LEVEL:
      return "FATAL";
    default:
      return "HEADER";
  }
}

}  // namespace

Result<std::shared_ptr<InfoLog>> InfoLog::Open(const std::string& directory, uint64_t max_bytes) {
  const std::string path = directory + "/LOG";
  // A missing LOG is the usual case on a fresh directory; any other failure shows at open.
  if (::rename(path.c_str(), (path + ".old").c_str()) != 0 && errno != ENOENT) {
    return Status::IOError("cannot rotate " + path + ": " + std::strerror(errno));
  }
  const int fd = OpenForAppend(path);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  return std::shared_ptr<InfoLog>(new InfoLog(path, fd, 0, max_bytes));
}

InfoLog::InfoLog(std::string path, int fd, uint64_t size, uint64_t max_bytes)
    : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL),
      path_(std::move(path)),
      max_bytes_(max_bytes),
      fd_(fd),
      size_(size) {}

InfoLog::~InfoLog() {
  if (fd_ >= 0) ::close(fd_);
}

void InfoLog::Logv(const char* format, va_list ap) {
  Write(rocksdb::InfoLogLevel::HEADER_LEVEL, format, ap);
}

void InfoLog::Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  if (level < GetInfoLogLevel()) return;
  Write(level, format, ap);
}

size_t InfoLog::GetLogFileSize() const {
  std::lock_guard lock(mu_);
  return size_;
}

void InfoLog::Write(rocksdb::InfoLogLevel level, const char* format, va_list ap) {
  char line[kMaxLineBytes];
  timeval now{};
  ::gettimeofday(&now, nullptr);
  tm utc{};
  ::gmtime_r(&now.tv_sec, &utc);
  int used = std::snprintf(line, sizeof(line), "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %.*s ",
                           utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                           utc.tm_sec, static_cast<long>(now.tv_usec),
                           static_cast<int>(LevelName(level).size()), LevelName(level).data());
  const size_t prefix = static_cast<size_t>(std::max(used, 0));
  va_list copy;
  va_copy(copy, ap);
  const int body = std::vsnprintf(line + prefix, sizeof(line) - prefix, format, copy);
  va_end(copy);
  // A line longer than the buffer is cut, with its newline kept.
  size_t length = prefix + static_cast<size_t>(std::max(body, 0));
  length = std::min(length, sizeof(line) - 2);
  if (length == 0 || line[length - 1] != '\n') line[length++] = '\n';

  if (level >= rocksdb::InfoLogLevel::WARN_LEVEL && level != rocksdb::InfoLogLevel::HEADER_LEVEL) {
    const std::string_view message(line + prefix, length - prefix - 1);
    const std::string copied = "rocksdb: " + std::string(message);
    if (level == rocksdb::InfoLogLevel::WARN_LEVEL) {
      LogWarning(copied);
    } else {
      LogError(copied);
    }
  }

  std::lock_guard lock(mu_);
  if (max_bytes_ > 0 && size_ + length > max_bytes_) RotateLocked();
  // One write per line: O_APPEND keeps it whole; a short or failed write (a full disk)
  // drops the line.
  const ssize_t written = fd_ >= 0 ? ::write(fd_, line, length) : -1;
  if (written == static_cast<ssize_t>(length)) {
    size_ += length;
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void InfoLog::RotateLocked() {
  if (fd_ >= 0) ::close(fd_);
  (void)::rename(path_.c_str(), (path_ + ".old").c_str());
  fd_ = OpenForAppend(path_);
  size_ = 0;
}

}  // namespace kvatlas::server::rocksdb_storage
