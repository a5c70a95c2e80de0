// Binary-protocol benchmark against a running kvatlas server (scripts/bench/rpc starts
// one): ingest throughput through kvatlas::Client with batching, then 128-block lookup
// latency at fixed open-loop request rates and at saturation, and the same lookups over
// REST, with the server's CPU time per lookup for each. Prints figures; asserts nothing.
//   rpc_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID [--entries N]
//             [--rates 10000,20000,50000] [--seconds S]
#include <httplib.h>
#include <sys/resource.h>
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
#include <future>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "kvatlas/client/client.h"

namespace {

using kvatlas::bench::CpuSeconds;
using kvatlas::bench::Mix;
using kvatlas::bench::Pct;
using kvatlas::bench::RunOpenLoop;
using kvatlas::bench::SleepUntil;

using Clock = std::chrono::steady_clock;
using kvatlas::BlockEvent;
using kvatlas::LookupRequest;

constexpr uint32_t kChain = 128;
constexpr uint32_t kHolders = 1000;

struct Args {
  std::string rpc, http;
  long server_pid = 0;
  uint64_t entries = 1'000'000;
  std::vector<uint64_t> rates{10000, 20000, 50000};
  double seconds = 3;
};

std::vector<uint64_t> ChainKeys(uint64_t c) {
  std::vector<uint64_t> keys(kChain);
  for (uint32_t i = 0; i < kChain; ++i) keys[i] = Mix(c * kChain + i);
  return keys;
}

kvatlas::ContextKey Context() { return kvatlas::ContextKey{"default", "bench", "", 16, ""}; }

LookupRequest Lookup(uint64_t c) {
  LookupRequest r;
  r.context = Context();
  r.by_hash = true;
  r.seq_hashes = ChainKeys(c);
  return r;
}

// This process's CPU seconds (user + system, all threads): the client library's cost.
double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void Ingest(kvatlas::Client& client, uint64_t chains) {
  constexpr uint64_t kPerBatch = 64;
  // The batches are built before the clock starts: generating test data is not the client's
  // or the server's work, and on a 2-core machine it would take CPU from both.
  std::vector<std::vector<BlockEvent>> batches;
  for (uint64_t c = 0; c < chains; c += kPerBatch) {
    std::vector<BlockEvent> events;
    for (uint64_t i = c; i < std::min(chains, c + kPerBatch); ++i) {
      BlockEvent e;
      e.type = kvatlas::EventType::kStored;
      e.context = Context();
      e.holder = kvatlas::HolderKey{"instance-" + std::to_string(i % kHolders), 0};
      e.seq_hashes = ChainKeys(i);
      events.push_back(std::move(e));
    }
    batches.push_back(std::move(events));
  }
  const auto t0 = Clock::now();
  std::deque<std::future<kvatlas::Result<kvatlas::IngestAnswer>>> inflight;
  for (std::vector<BlockEvent>& events : batches) {
    inflight.push_back(client.IngestAsync(std::move(events), std::chrono::seconds(60)));
    while (inflight.size() > 8) {
      auto r = inflight.front().get();
      inflight.pop_front();
      if (!r.has_value()) std::fprintf(stderr, "ingest: %s\n", r.error().ToString().c_str());
    }
  }
  for (auto& f : inflight) (void)f.get();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "binary ingest: %llu block events (64 events x 128 blocks per call, 8 in "
      "flight) in %.2f s = %.0f k block events/s\n",
      static_cast<unsigned long long>(chains * kChain), s,
      static_cast<double>(chains * kChain) / s / 1e3);
}

// Waits (up to 30 s) until the server is idle — under 5% of a core over 250 ms — so that the
// lookups below do not compete with the background work the bulk ingest left behind
// (RocksDB memtable flushes and compactions, which took ~30% of the server's CPU samples
// during the first lookup phase when measured without this wait).
void WaitForQuietServer(long pid) {
  const auto start = Clock::now();
  double cpu = CpuSeconds(pid);
  while (Clock::now() - start < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double now = CpuSeconds(pid);
    const bool quiet = now - cpu < 0.0125;
    cpu = now;
    if (quiet) break;
  }
  std::printf("(server quiet %.1f s after the ingest)\n",
              std::chrono::duration<double>(Clock::now() - start).count());
}

// Open loop: request i is due at t0 + i/rate; latency counts from when it was due, so a
// stalled server (or a late sender) is charged for the requests it delayed (no coordinated
// omission). The sender sleeps to absolute deadlines and sends every request already due
// when it wakes; nothing spins.
void OpenLoop(kvatlas::Client& client, uint64_t chains, uint64_t rate, double seconds, long pid) {
  const uint64_t n = static_cast<uint64_t>(static_cast<double>(rate) * seconds);
  std::vector<double> latency(n);
  std::mt19937_64 rng(rate);
  std::vector<LookupRequest> requests;
  for (int i = 0; i < 4096; ++i) requests.push_back(Lookup(rng() % chains));
  const double server_cpu0 = CpuSeconds(pid);
  const double client_cpu0 = SelfCpuSeconds();
  uint64_t errors = 0;
  RunOpenLoop(
      n, static_cast<double>(rate), Clock::now() + std::chrono::milliseconds(10),
      [&](uint64_t i) {
        return client.LookupAsync(requests[i % requests.size()], std::chrono::seconds(5));
      },
      [&](uint64_t i, kvatlas::Result<kvatlas::LookupAnswer> r, Clock::time_point due) {
        latency[i] = std::chrono::duration<double, std::micro>(Clock::now() - due).count();
        errors += r.has_value() ? 0 : 1;
      });
  const double server_cpu_us = (CpuSeconds(pid) - server_cpu0) / static_cast<double>(n) * 1e6;
  const double client_cpu_us = (SelfCpuSeconds() - client_cpu0) / static_cast<double>(n) * 1e6;
  std::printf(
      "binary lookup at %6llu req/s: p50 %7.1f us  p99 %7.1f us  p999 %7.1f us  "
      "(%llu requests, %llu errors; CPU/request server %.1f us, client %.1f us)\n",
      static_cast<unsigned long long>(rate), Pct(latency, 0.5), Pct(latency, 0.99),
      Pct(latency, 0.999), static_cast<unsigned long long>(n),
      static_cast<unsigned long long>(errors), server_cpu_us, client_cpu_us);
}

// Closed loop with `depth` calls in flight: throughput and server CPU per lookup.
double BinarySaturation(kvatlas::Client& client, uint64_t chains, long pid) {
  constexpr int kDepth = 64;
  constexpr uint64_t kCount = 100000;
  std::mt19937_64 rng(1);
  std::deque<std::future<kvatlas::Result<kvatlas::LookupAnswer>>> inflight;
  const double cpu0 = CpuSeconds(pid);
  const double client_cpu0 = SelfCpuSeconds();
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    inflight.push_back(client.LookupAsync(Lookup(rng() % chains), std::chrono::seconds(5)));
    if (inflight.size() >= kDepth) {
      (void)inflight.front().get();
      inflight.pop_front();
    }
  }
  for (auto& f : inflight) (void)f.get();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_us = (CpuSeconds(pid) - cpu0) / kCount * 1e6;
  const double client_cpu_us = (SelfCpuSeconds() - client_cpu0) / kCount * 1e6;
  std::printf(
      "binary lookup saturation (%d in flight, 1 connection): %.0f k lookups/s, "
      "server CPU %.1f us/lookup, client CPU %.1f us/lookup\n",
      kDepth, static_cast<double>(kCount) / s / 1e3, cpu_us, client_cpu_us);
  return cpu_us;
}

double RestLookups(const std::string& http, uint64_t chains, long pid) {
  const size_t colon = http.rfind(':');
  httplib::Client rest(http.substr(0, colon), std::atoi(http.c_str() + colon + 1));
  rest.set_tcp_nodelay(true);
  rest.set_keep_alive(true);
  constexpr uint64_t kCount = 20000;
  std::mt19937_64 rng(2);
  std::vector<std::string> bodies;
  for (int i = 0; i < 1024; ++i) {
    std::string body = R"({"model_name":"bench","block_size":16,"seq_hashes":[)";
    for (uint64_t k : ChainKeys(rng() % chains)) body += std::to_string(k) + ",";
    body.back() = ']';
    body += "}";
    bodies.push_back(std::move(body));
  }
  std::vector<double> latency;
  const double cpu0 = CpuSeconds(pid);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    const auto a = Clock::now();
    auto res = rest.Post("/v1/lookup", bodies[i % bodies.size()], "application/json");
    latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    if (!res || res->status != 200) {
      std::fprintf(stderr, "REST lookup failed\n");
      return 0;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_us = (CpuSeconds(pid) - cpu0) / kCount * 1e6;
  std::printf(
      "REST lookup (1 client, sequential): p50 %.1f us, p99 %.1f us, %.1f k/s, "
      "server CPU %.1f us/lookup\n",
      Pct(latency, 0.5), Pct(latency, 0.99), static_cast<double>(kCount) / s / 1e3, cpu_us);
  return cpu_us;
}

void BinarySequential(kvatlas::Client& client, uint64_t chains) {
  std::mt19937_64 rng(3);
  std::vector<double> latency;
  for (int i = 0; i < 20000; ++i) {
    const LookupRequest r = Lookup(rng() % chains);
    const auto a = Clock::now();
    (void)client.Lookup(r);
    latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  std::printf("binary lookup (1 client, sequential): p50 %.1f us, p99 %.1f us\n", Pct(latency, 0.5),
              Pct(latency, 0.99));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rpc")
      a.rpc = v;
    else if (k == "--http")
      a.http = v;
    else if (k == "--server-pid")
      a.server_pid = std::atol(v.c_str());
    else if (k == "--entries")
      a.entries = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--seconds")
      a.seconds = std::atof(v.c_str());
    else if (k == "--rates") {
      a.rates.clear();
      std::stringstream ss(v);
      for (std::string r; std::getline(ss, r, ',');) a.rates.push_back(std::stoull(r));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.rpc.empty() || a.http.empty() || a.server_pid == 0) {
    std::fprintf(stderr,
                 "usage: rpc_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID "
                 "[--entries N] [--rates R1,R2] [--seconds S]\n");
    return 2;
  }
  kvatlas::ClientOptions options;
  options.endpoints = {a.rpc};
  auto client = kvatlas::Client::Connect(options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return 1;
  }
  const uint64_t chains = a.entries / kChain;
  Ingest(**client, chains);
  WaitForQuietServer(a.server_pid);
  BinarySequential(**client, chains);
  for (uint64_t rate : a.rates) OpenLoop(**client, chains, rate, a.seconds, a.server_pid);
  const double binary_cpu = BinarySaturation(**client, chains, a.server_pid);
  const double rest_cpu = RestLookups(a.http, chains, a.server_pid);
  if (binary_cpu > 0) {
    std::printf("server CPU per lookup, REST / binary: %.1fx\n", rest_cpu / binary_cpu);
  }
  return 0;
}
