#include "common/internal/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

namespace kvatlas {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_write_mu;

// ISO 8601 UTC with milliseconds: logs from several servers sort and compare as text.
std::string Timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(millis));
  return buf;
}

}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return std::nullopt;
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }

bool LogEnabled(LogLevel level) { return level >= g_level.load(std::memory_order_relaxed); }

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  std::string line = Timestamp();
  line += ' ';
  line += LogLevelName(level);
  line += ' ';
  line += message;
  line += '\n';
  std::lock_guard lock(g_write_mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace kvatlas
