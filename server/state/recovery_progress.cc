#include "server/state/recovery_progress.h"

#include <algorithm>
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

RecoveryProgress* RecoveryProgress::AddPart(std::string label) {
  if (owner_ != nullptr) return owner_->AddPart(std::move(label));
  std::lock_guard lock(parts_mu_);
  parts_.push_back(std::unique_ptr<RecoveryProgress>(new RecoveryProgress(this, std::move(label))));
  return parts_.back().get();
}

void RecoveryProgress::BeginPhase(std::string name, std::string unit, uint64_t total_records,
                                  uint64_t total_bytes) {
  std::lock_guard lock(mu_);
  const Clock::time_point now = Clock::now();
  if (!began_) first_start_ = now;
  began_ = true;
  phase_ = std::move(name);
  unit_ = std::move(unit);
  phase_start_ = now;
  total_records_ = total_records;
  total_bytes_ = total_bytes;
  records_.store(0, std::memory_order_relaxed);
  bytes_.store(0, std::memory_order_relaxed);
  uninterruptible_.store(false, std::memory_order_release);
}

void RecoveryProgress::EndPhase() {
  std::lock_guard lock(mu_);
  phase_.clear();
  unit_.clear();
  uninterruptible_.store(false, std::memory_order_release);
}

bool RecoveryProgress::FirstStart(Clock::time_point* start) const {
  std::lock_guard lock(mu_);
  if (began_) *start = first_start_;
  return began_;
}

Status RecoveryProgress::CheckStop(const std::string& where) const {
  if (!stop_requested()) return Status::Ok();
  return Status(StatusCode::kCancelled, "stopped (SIGINT or SIGTERM) while " + where);
}

RecoveryProgress::View RecoveryProgress::Read() const {
  View view;
  view.label = label_;
  Clock::time_point first;
  // A part's recovery began when its owner's did (the owner's mutex is not held with ours).
  const bool owner_began = owner_ != nullptr && owner_->FirstStart(&first);
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
    if (!owner_began) first = first_start_;
    view.phase_seconds = std::chrono::duration<double>(now - phase_start_).count();
    view.total_seconds = std::chrono::duration<double>(now - first).count();
  }
  return view;
}

std::vector<RecoveryProgress::View> RecoveryProgress::ReadRunning() const {
  std::vector<View> running;
  {
    std::lock_guard lock(parts_mu_);
    for (const auto& part : parts_) {
      View view = part->Read();
      if (!view.phase.empty()) running.push_back(std::move(view));
    }
  }
  if (running.empty()) {
    View own = Read();
    if (!own.phase.empty()) running.push_back(std::move(own));
  }
  return running;
}

namespace {

// A phase's description without the time since recovery began.
std::string DescribePhase(const RecoveryProgress::View& view) {
  std::string out = (view.label.empty() ? "" : view.label + ": ") + view.phase + ": ";
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
  return out + Seconds(view.phase_seconds) + " so far";
}

std::string SinceRecoveryBegan(double seconds) {
  return " (" + Seconds(seconds) + " since the server began recovering)";
}

}  // namespace

std::string RecoveryProgress::Describe(const View& view) {
  return DescribePhase(view) + SinceRecoveryBegan(view.total_seconds);
}

std::string RecoveryProgress::Describe(const std::vector<View>& running) {
  std::string out;
  double since = 0;
  for (const View& view : running) {
    out += (out.empty() ? "" : "; ") + DescribePhase(view);
    since = std::max(since, view.total_seconds);
  }
  return out + SinceRecoveryBegan(since);
}

std::string RecoveryProgress::Names(const std::vector<View>& running) {
  std::string out;
  for (const View& view : running) {
    out += (out.empty() ? "" : "; ") + (view.label.empty() ? "" : view.label + ": ") + view.phase;
  }
  return out;
}

bool RecoveryProgress::AllUninterruptible(const std::vector<View>& running) {
  if (running.empty()) return false;
  for (const View& view : running) {
    if (!view.uninterruptible) return false;
  }
  return true;
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
      const std::vector<RecoveryProgress::View> running = progress->ReadRunning();
      // Phases that take less than a second are not worth a line (nor, when they run beside
      // a longer one, their own).
      const bool long_enough = std::any_of(running.begin(), running.end(), [](const auto& view) {
        return view.phase_seconds >= 1.0;
      });
      if (!long_enough) continue;
      LogInfo("recovering: " + RecoveryProgress::Describe(running));
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
