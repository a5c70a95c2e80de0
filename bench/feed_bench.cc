// Change-feed benchmark against a running kvatlas server (scripts/bench/feed starts one):
//  (a) feed lag: open-loop ingest at a fixed block-event rate through kvatlas::Client
//      (binary protocol), one SSE watcher on GET /v1/watch; per batch, the time from the
//      ingest's acknowledgement to the watcher receiving the record of its revision;
//  (b) records/s and block keys/s delivered to 1 and to 16 concurrent SSE watchers while
//      ingest runs closed-loop at saturation;
//  (c) kvatlas::LocalIndex lookups of 128-block chains over a ~1M-copy replica
//      (bench/local_index_bench.cc).
// Prints figures; asserts nothing.
//   feed_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID [--rate BLOCKS_PER_S]
//              [--seconds S] [--batch-blocks N] [--saturation-seconds S] [--local-chains N]
//              [--local-only 1]
#include <httplib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench_util.h"
#include "bench/local_index_bench.h"
#include "kvatlas/client/client.h"

namespace {

using kvatlas::bench::CpuSeconds;
using kvatlas::bench::Mix;
using kvatlas::bench::Pct;
using kvatlas::bench::RunOpenLoop;
using kvatlas::bench::SleepUntil;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string rpc, http;
  long server_pid = 0;
  uint64_t rate = 100'000;  // block events/s in the lag phase
  double seconds = 10;
  uint32_t batch_blocks = 64;
  double saturation_seconds = 5;
  uint64_t local_chains = 8192;  // 128-block chains replicated by the LocalIndex phase
  bool local_only = false;       // --local-only 1: only phase (c)
};

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// One stored event of `blocks` fresh keys (a chain) for one of 256 holders: one feed record.
kvatlas::BlockEvent StoredChain(uint64_t n, uint32_t blocks) {
  kvatlas::BlockEvent e;
  e.type = kvatlas::EventType::kStored;
  e.context = kvatlas::ContextKey{"default", "feedbench", "", 16, ""};
  e.holder = kvatlas::HolderKey{"instance-" + std::to_string(n % 256), 0};
  e.seq_hashes.resize(blocks);
  for (uint32_t i = 0; i < blocks; ++i) e.seq_hashes[i] = Mix(n * blocks + i);
  return e;
}

// A GET /v1/watch reader on its own thread. Parses just what it needs from each `data:`
// line (the revision, the number of keys) with string scans, so that 16 of them on a
// 2-core machine take as little CPU from the server as possible. Reconnects after a
// `watch_cut` from its resume point, counting the cuts.
class SseWatcher {
 public:
  using OnRecord = std::function<void(uint64_t revision, Clock::time_point received)>;

  SseWatcher(const std::string& http, std::string from, OnRecord on_record = nullptr)
      : http_(http), on_record_(std::move(on_record)) {
    thread_ = std::thread([this, from = std::move(from)] { Run(from); });
  }
  ~SseWatcher() { Stop(); }

  // Waits up to 10 s for the first answer's headers.
  bool WaitConnected() {
    for (int i = 0; i < 1000 && !connected_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return connected_.load();
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  uint64_t records() const { return records_.load(std::memory_order_relaxed); }
  uint64_t keys() const { return keys_.load(std::memory_order_relaxed); }
  uint64_t last_revision() const { return last_revision_.load(std::memory_order_relaxed); }
  uint64_t cuts() const { return cuts_.load(); }
  const std::string& failure() const { return failure_; }

 private:
  void Run(std::string from) {
    const size_t colon = http_.rfind(':');
    httplib::Client client(http_.substr(0, colon), std::atoi(http_.c_str() + colon + 1));
    client.set_read_timeout(10, 0);
    client.set_tcp_nodelay(true);
    while (!stop_.load()) {
      std::string buffer;
      std::string resume;
      int status = 0;
      auto result = client.Get(
          "/v1/watch?from=" + from,
          [&](const httplib::Response& r) {
            status = r.status;
            connected_.store(true);
            return r.status == 200;
          },
          [&](const char* data, size_t size) {
            const auto now = Clock::now();
            buffer.append(data, size);
            size_t start = 0;
            for (size_t end; (end = buffer.find("\n\n", start)) != std::string::npos;
                 start = end + 2) {
              Event(std::string_view(buffer).substr(start, end - start), now, &resume);
            }
            buffer.erase(0, start);
            return !stop_.load() && resume.empty();
          });
      if (stop_.load()) return;
      if (!resume.empty()) {
        cuts_.fetch_add(1);
        from = resume;
        continue;
      }
      failure_ =
          status != 0 ? "HTTP " + std::to_string(status) : httplib::to_string(result.error());
      return;
    }
  }

  void Event(std::string_view event, Clock::time_point now, std::string* resume) {
    if (event.starts_with("event: error")) {
      const size_t at = event.find("\"resume_from\":");
      if (event.find("watch_cut") != std::string_view::npos && at != std::string_view::npos) {
        *resume = std::to_string(std::strtoull(event.data() + at + 14, nullptr, 10));
      } else {
        *resume = "";
        failure_ = std::string(event);
        stop_.store(true);
      }
      return;
    }
    const size_t data = event.find("data: ");
    if (data == std::string_view::npos) return;  // a keep-alive comment
    const std::string_view record = event.substr(data + 6);
    const size_t rev = record.find("\"revision\":");
    if (rev == std::string_view::npos) return;
    const uint64_t revision = std::strtoull(record.data() + rev + 11, nullptr, 10);
    uint64_t keys = 0;
    const size_t open = record.find("\"keys\":[");
    if (open != std::string_view::npos) {
      const size_t close = record.find(']', open);
      if (close > open + 8)
        keys = 1 + std::count(record.begin() + open, record.begin() + close, ',');
    }
    records_.fetch_add(1, std::memory_order_relaxed);
    keys_.fetch_add(keys, std::memory_order_relaxed);
    last_revision_.store(revision, std::memory_order_relaxed);
    if (on_record_) on_record_(revision, now);
  }

  const std::string http_;
  const OnRecord on_record_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> records_{0}, keys_{0}, last_revision_{0}, cuts_{0};
  std::string failure_;
  std::thread thread_;
};

// Waits up to 10 s for every watcher to have received revision `revision`.
bool WaitForRevision(const std::vector<std::unique_ptr<SseWatcher>>& watchers, uint64_t revision) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    bool all = true;
    for (const auto& w : watchers) all = all && w->last_revision() >= revision;
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// (a) Open loop: batch i is due at t0 + i × batch_blocks / rate. Per batch: ack = when its
// answer arrived, received = when the watcher got the record(s) of the answer's revision.
void FeedLag(kvatlas::Client& client, const Args& a) {
  const double batches_per_s = static_cast<double>(a.rate) / a.batch_blocks;
  const auto n = static_cast<uint64_t>(batches_per_s * a.seconds);
  std::vector<std::vector<kvatlas::BlockEvent>> batches(n);
  for (uint64_t i = 0; i < n; ++i) batches[i].push_back(StoredChain(i, a.batch_blocks));

  std::mutex mu;
  std::unordered_map<uint64_t, Clock::time_point> received;  // revision → first receipt
  std::vector<std::unique_ptr<SseWatcher>> watchers;
  watchers.push_back(
      std::make_unique<SseWatcher>(a.http, "now", [&](uint64_t revision, Clock::time_point at) {
        std::lock_guard lock(mu);
        received.emplace(revision, at);
      }));
  if (!watchers[0]->WaitConnected()) {
    std::fprintf(stderr, "feed lag: the watcher did not connect: %s\n",
                 watchers[0]->failure().c_str());
    return;
  }

  std::vector<Clock::time_point> due(n), ack(n);
  std::vector<uint64_t> revision(n, 0);
  const auto t0 = Clock::now() + std::chrono::milliseconds(20);
  const double cpu0 = CpuSeconds(a.server_pid);
  uint64_t errors = 0;
  RunOpenLoop(
      n, batches_per_s, t0,
      [&](uint64_t i) {
        return client.IngestAsync(std::move(batches[i]), std::chrono::seconds(30));
      },
      [&](uint64_t i, kvatlas::Result<kvatlas::IngestAnswer> r, Clock::time_point due_at) {
        due[i] = due_at;
        ack[i] = Clock::now();
        if (r.has_value()) {
          revision[i] = r->revision;
        } else {
          ++errors;
        }
      });
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double server_cpu = CpuSeconds(a.server_pid) - cpu0;
  const uint64_t last = *std::max_element(revision.begin(), revision.end());
  const bool complete = WaitForRevision(watchers, last);
  watchers[0]->Stop();

  std::vector<double> ack_lag, due_lag, commit;
  uint64_t early = 0, missing = 0;
  {
    std::lock_guard lock(mu);
    for (uint64_t i = 0; i < n; ++i) {
      if (revision[i] == 0) continue;
      const auto it = received.find(revision[i]);
      if (it == received.end()) {
        ++missing;
        continue;
      }
      const double lag = std::chrono::duration<double, std::milli>(it->second - ack[i]).count();
      if (lag < 0) ++early;
      ack_lag.push_back(std::max(0.0, lag));
      due_lag.push_back(std::chrono::duration<double, std::milli>(it->second - due[i]).count());
      commit.push_back(std::chrono::duration<double, std::milli>(ack[i] - due[i]).count());
    }
  }
  const double achieved = static_cast<double>(n) * a.batch_blocks / elapsed;
  std::printf(
      "(a) feed lag at %llu block events/s offered (%.0f k/s achieved; %llu batches of %u "
      "blocks = 1 record each, open loop, %.1f s, %llu errors, server CPU %.0f%% of a core)\n",
      static_cast<unsigned long long>(a.rate), achieved / 1e3, static_cast<unsigned long long>(n),
      a.batch_blocks, elapsed, static_cast<unsigned long long>(errors), 100 * server_cpu / elapsed);
  std::printf("    ack -> watcher receipt: p50 %.2f ms  p99 %.2f ms  p999 %.2f ms  max %.2f ms\n",
              Pct(ack_lag, 0.5), Pct(ack_lag, 0.99), Pct(ack_lag, 0.999), Pct(ack_lag, 1));
  std::printf(
      "    (%llu of %zu records reached the watcher before the client had the ack: lag 0; "
      "%llu never arrived%s)\n",
      static_cast<unsigned long long>(early), ack_lag.size(),
      static_cast<unsigned long long>(missing), complete ? "" : ", the watcher did not catch up");
  std::printf("    due -> ack (commit):      p50 %.2f ms  p99 %.2f ms  p999 %.2f ms\n",
              Pct(commit, 0.5), Pct(commit, 0.99), Pct(commit, 0.999));
  std::printf("    due -> watcher receipt:   p50 %.2f ms  p99 %.2f ms  p999 %.2f ms\n",
              Pct(due_lag, 0.5), Pct(due_lag, 0.99), Pct(due_lag, 0.999));
  std::printf("    watcher: %.0f records/s, %.0f k block keys/s; %llu cuts\n",
              static_cast<double>(watchers[0]->records()) / elapsed,
              static_cast<double>(watchers[0]->keys()) / elapsed / 1e3,
              static_cast<unsigned long long>(watchers[0]->cuts()));
  const double p99 = Pct(ack_lag, 0.99);
  std::printf(
      "    target: feed lag p99 < 10 ms at 100k block events/s: %s (p99 %.2f ms at %.0f k/s)\n",
      p99 < 10 && errors == 0 && missing == 0 ? "MET" : "MISSED", p99, achieved / 1e3);
}

// (b) Closed-loop ingest (8 batches of 16 events x batch_blocks in flight) for `seconds`
// with `count` watchers; what each watcher received.
void Saturation(kvatlas::Client& client, const Args& a, int count, uint64_t* next_chain) {
  constexpr uint32_t kEventsPerBatch = 16;
  constexpr size_t kInFlight = 8;
  std::vector<std::unique_ptr<SseWatcher>> watchers;
  for (int i = 0; i < count; ++i) watchers.push_back(std::make_unique<SseWatcher>(a.http, "now"));
  for (const auto& w : watchers) {
    if (!w->WaitConnected()) {
      std::fprintf(stderr, "saturation: a watcher did not connect: %s\n", w->failure().c_str());
      return;
    }
  }
  // Prebuilt: generating test data is not the server's work.
  const uint64_t max_batches = 8000;
  std::vector<std::vector<kvatlas::BlockEvent>> batches(max_batches);
  for (auto& batch : batches) {
    for (uint32_t e = 0; e < kEventsPerBatch; ++e) {
      batch.push_back(StoredChain((*next_chain)++, a.batch_blocks));
    }
  }
  const double cpu0 = CpuSeconds(a.server_pid);
  const auto t0 = Clock::now();
  const auto stop = t0 + std::chrono::duration<double>(a.saturation_seconds);
  std::deque<std::future<kvatlas::Result<kvatlas::IngestAnswer>>> inflight;
  uint64_t sent = 0, errors = 0, last = 0;
  const auto settle = [&] {
    auto r = inflight.front().get();
    inflight.pop_front();
    if (r.has_value()) {
      last = std::max(last, r->revision);
    } else {
      ++errors;
    }
  };
  while (Clock::now() < stop && sent < max_batches) {
    inflight.push_back(client.IngestAsync(std::move(batches[sent++]), std::chrono::seconds(30)));
    if (inflight.size() >= kInFlight) settle();
  }
  while (!inflight.empty()) settle();
  const double ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const bool complete = WaitForRevision(watchers, last);
  const double total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double server_cpu = CpuSeconds(a.server_pid) - cpu0;
  for (const auto& w : watchers) w->Stop();

  uint64_t records = 0, keys = 0, cuts = 0, min_keys = UINT64_MAX;
  for (const auto& w : watchers) {
    records += w->records();
    keys += w->keys();
    cuts += w->cuts();
    min_keys = std::min(min_keys, w->keys());
  }
  const uint64_t ingested_keys = sent * kEventsPerBatch * a.batch_blocks;
  std::printf(
      "(b) %2d watcher%s, saturation ingest (%u events x %u blocks per batch, %zu in flight): "
      "%.0f k block events/s ingested for %.1f s (%llu errors); all delivered %.2f s after "
      "the start%s; server CPU %.0f%% of a core\n",
      count, count == 1 ? " " : "s", kEventsPerBatch, a.batch_blocks, kInFlight,
      static_cast<double>(ingested_keys) / ingest_s / 1e3, ingest_s,
      static_cast<unsigned long long>(errors), total_s,
      complete ? "" : " (NOT all: a watcher did not catch up)", 100 * server_cpu / total_s);
  std::printf(
      "    delivered per watcher: %.0f records/s, %.0f k block keys/s; all watchers together: "
      "%.0f records/s, %.0f k block keys/s; %llu cuts; every watcher got %s keys\n",
      static_cast<double>(records) / count / total_s,
      static_cast<double>(keys) / count / total_s / 1e3, static_cast<double>(records) / total_s,
      static_cast<double>(keys) / total_s / 1e3, static_cast<unsigned long long>(cuts),
      min_keys == ingested_keys
          ? "all"
          : ("only " + std::to_string(min_keys) + " of " + std::to_string(ingested_keys)).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rpc") {
      a.rpc = v;
    } else if (k == "--http") {
      a.http = v;
    } else if (k == "--server-pid") {
      a.server_pid = std::atol(v.c_str());
    } else if (k == "--rate") {
      a.rate = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--seconds") {
      a.seconds = std::atof(v.c_str());
    } else if (k == "--batch-blocks") {
      a.batch_blocks = static_cast<uint32_t>(std::strtoul(v.c_str(), nullptr, 10));
    } else if (k == "--saturation-seconds") {
      a.saturation_seconds = std::atof(v.c_str());
    } else if (k == "--local-chains") {
      a.local_chains = std::strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--local-only") {
      a.local_only = v == "1";
    } else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.rpc.empty() || a.http.empty() || a.server_pid == 0 || a.rate == 0 || a.batch_blocks == 0) {
    std::fprintf(stderr,
                 "usage: feed_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID "
                 "[--rate BLOCKS_PER_S] [--seconds S] [--batch-blocks N] "
                 "[--saturation-seconds S] [--local-chains N] [--local-only 1]\n");
    return 2;
  }
  kvatlas::ClientOptions options;
  options.endpoints = {a.rpc};
  auto client = kvatlas::Client::Connect(options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return 1;
  }
  std::printf("load average before: %s (%u cores)\n", LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  if (!a.local_only) {
    FeedLag(**client, a);
    uint64_t next_chain = 1ULL << 32;  // keys distinct from the lag phase's
    Saturation(**client, a, 1, &next_chain);
    Saturation(**client, a, 16, &next_chain);
  }
  kvatlas::bench::LocalIndexLookups(**client, a.rpc, a.local_chains);
  std::printf("load average after: %s\n", LoadAverage().c_str());
  return 0;
}
