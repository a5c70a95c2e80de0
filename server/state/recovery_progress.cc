#include "server/state/recovery_progress.h"

#include <cstdio>
#include <filesystem>
#include <utility>

#include "common/internal/log.h"

namespace kvatlas::server {
namespace {

std::string Megabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

std::string Seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

void RecoveryProgress::BeginPhase(std::string name, std::string unit, uint64_t total_records,
                                  uint64_t total_bytes) {
  std::lock_guard lock(mu_);
  const Clock::time_point now = Clock::now();
  if (phase_.empty()) first_start_ = now;
  phase_ = std::move(name);
  unit_ = std::move(unit);
  phase_start_ = now;
  total_records_ = total_records;
  total_bytes_ = total_bytes;
  records_.store(0, std::memory_order_relaxed);
  bytes_.store(0, std::memory_order_relaxed);
  uninterruptible_.store(false, std::memory_order_release);
}

Status RecoveryProgress::CheckStop(const std::string& where) const {
  if (!stop_requested()) return Status::Ok();
  return Status(StatusCode::kCancelled, "stopped (SIGINT or SIGTERM) while " + where);
}

RecoveryProgress::View RecoveryProgress::Read() const {
  View view;
  std::lock_guard lock(mu_);
  const Clock::time_point now = Clock::now();
  view.phase = phase_;
  view.unit = unit_;
  view.records = records_.load(std::memory_order_relaxed);
  view.bytes = bytes_.load(std::memory_order_relaxed);
  view.total_records = total_records_;
  view.total_bytes = total_bytes_;
  view.uninterruptible = uninterruptible_.load(std::memory_order_acquire);
  if (!phase_.empty()) {
    view.phase_seconds = std::chrono::duration<double>(now - phase_start_).count();
    view.total_seconds = std::chrono::duration<double>(now - first_start_).count();
  }
  return view;
}

std::string RecoveryProgress::Describe(const View& view) {
  std::string out = view.phase + ": ";
  if (!view.unit.empty()) {
    out += std::to_string(view.records);
    if (view.total_records > 0) out += " of " + std::to_string(view.total_records);
    out += " " + view.unit;
    if (view.phase_seconds > 0) {
      out +=
          " (" + std::to_string(static_cast<uint64_t>(view.records / view.phase_seconds)) + "/s)";
    }
    out += ", ";
  }
  if (view.bytes > 0) {
    out += Megabytes(view.bytes) +
           (view.total_bytes > 0 ? " of " + Megabytes(view.total_bytes) : std::string()) + ", ";
  } else if (view.total_bytes > 0) {
    out += Megabytes(view.total_bytes) + " on disk, ";
  }
  return out + Seconds(view.phase_seconds) + " so far (" + Seconds(view.total_seconds) +
         " since the server began recovering)";
}

uint64_t DirectoryBytes(const std::string& dir) {
  namespace fs = std::filesystem;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_error;
    if (it->is_regular_file(size_error)) {
      const uint64_t size = it->file_size(size_error);
      if (!size_error) total += size;
    }
  }
  return total;
}

ProgressLogger::ProgressLogger(const RecoveryProgress* progress,
                               std::chrono::milliseconds interval) {
  thread_ = std::thread([this, progress, interval] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
      const RecoveryProgress::View view = progress->Read();
      // Phases that take less than a second are not worth a line.
      if (view.phase.empty() || view.phase_seconds < 1.0) continue;
      LogInfo("recovering: " + RecoveryProgress::Describe(view));
    }
  });
}

ProgressLogger::~ProgressLogger() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace kvatlas::server
