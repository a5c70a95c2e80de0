#include "kvatlas/client/load_reporter.h"

#include <algorithm>

#include "kvatlas/client/client.h"

namespace kvatlas {

Result<std::unique_ptr<LoadReporter>> LoadReporter::Create(Client* client,
                                                           LoadReporterOptions options) {
  if (client == nullptr) return Status::InvalidArgument("client: must not be null");
  return Create([client](const LoadReport& report) { return client->ReportLoad(report).status(); },
                std::move(options));
}

Result<std::unique_ptr<LoadReporter>> LoadReporter::Create(Send send, LoadReporterOptions options) {
  KVATLAS_RETURN_IF_ERROR(ValidateLoadReport(LoadReport{options.router_id, options.ttl_ms, {}}));
  if (options.interval.count() <= 0 || options.interval.count() > options.ttl_ms / 3) {
    return Status::InvalidArgument("interval: must be from 1 ms to ttl_ms / 3 (" +
                                   std::to_string(options.ttl_ms / 3) + " ms), got " +
                                   std::to_string(options.interval.count()) + " ms");
  }
  return std::unique_ptr<LoadReporter>(new LoadReporter(std::move(send), std::move(options)));
}

LoadReporter::LoadReporter(Send send, LoadReporterOptions options)
    : send_(std::move(send)), options_(std::move(options)), thread_([this] { Run(); }) {}

LoadReporter::~LoadReporter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    in_flight_.clear();
    totals_.clear();
  }
  wake_.notify_all();
  thread_.join();
  (void)Flush();  // the empty report: this router leaves at once
}

uint64_t LoadReporter::RouteStarted(const std::string& instance, uint32_t dp_rank,
                                    uint64_t prompt_blocks, uint64_t decode_blocks) {
  std::lock_guard lock(mu_);
  const uint64_t token = next_token_++;
  in_flight_.emplace(token, InFlight{instance, dp_rank, prompt_blocks, decode_blocks});
  auto& total = totals_[{instance, dp_rank}];
  total.first += prompt_blocks;
  total.second += decode_blocks;
  changed_ = true;
  return token;
}

void LoadReporter::PrefillDone(uint64_t token) {
  std::lock_guard lock(mu_);
  const auto it = in_flight_.find(token);
  if (it == in_flight_.end() || it->second.prefill == 0) return;
  totals_[{it->second.instance, it->second.dp_rank}].first -= it->second.prefill;
  it->second.prefill = 0;
  changed_ = true;
}

void LoadReporter::RouteFinished(uint64_t token) {
  std::lock_guard lock(mu_);
  const auto it = in_flight_.find(token);
  if (it == in_flight_.end()) return;
  const auto key = std::make_pair(it->second.instance, it->second.dp_rank);
  auto& total = totals_[key];
  total.first -= it->second.prefill;
  total.second -= it->second.decode;
  if (total.first == 0 && total.second == 0) totals_.erase(key);
  in_flight_.erase(it);
  changed_ = true;
}

LoadReport LoadReporter::SummaryLocked() const {
  LoadReport report{options_.router_id, options_.ttl_ms, {}};
  for (const auto& [key, total] : totals_) {
    if (total.first == 0 && total.second == 0) continue;
    // Past the protocol's bound the report would be refused; the busiest entries go.
    report.loads.push_back(InstanceLoad{key.first, key.second,
                                        std::min(total.first, kMaxLoadBlocks),
                                        std::min(total.second, kMaxLoadBlocks)});
  }
  if (report.loads.size() > kMaxLoadEntries) {
    std::partial_sort(report.loads.begin(), report.loads.begin() + kMaxLoadEntries,
                      report.loads.end(), [](const InstanceLoad& a, const InstanceLoad& b) {
                        return a.prefill_blocks + a.decode_blocks >
                               b.prefill_blocks + b.decode_blocks;
                      });
    report.loads.resize(kMaxLoadEntries);
  }
  return report;
}

LoadReport LoadReporter::Summary() const {
  std::lock_guard lock(mu_);
  return SummaryLocked();
}

Status LoadReporter::Flush() {
  std::lock_guard send_lock(send_mu_);
  LoadReport report;
  {
    std::lock_guard lock(mu_);
    report = SummaryLocked();
    changed_ = false;
  }
  Status sent = send_(report);
  std::lock_guard lock(mu_);
  if (sent.ok()) {
    ++sent_;
  } else {
    ++failed_;
    changed_ = true;  // try again at the next interval
  }
  return sent;
}

uint64_t LoadReporter::reports_sent() const {
  std::lock_guard lock(mu_);
  return sent_;
}

uint64_t LoadReporter::reports_failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

void LoadReporter::Run() {
  using Clock = std::chrono::steady_clock;
  const auto keep_alive = std::chrono::milliseconds(options_.ttl_ms / 3);
  Clock::time_point last_sent{};
  bool sent_empty = false;  // the last report had no loads: an idle router need not renew it
  std::unique_lock lock(mu_);
  while (!stop_) {
    const bool renew = Clock::now() - last_sent >= keep_alive && !(sent_empty && totals_.empty());
    if (changed_ || renew) {
      const bool empty = totals_.empty();
      lock.unlock();
      if (Flush().ok()) sent_empty = empty;
      last_sent = Clock::now();
      lock.lock();
    }
    // At most one report per interval: sleep it out whatever arrives meanwhile.
    wake_.wait_for(lock, options_.interval, [this] { return stop_; });
  }
}

}  // namespace kvatlas
