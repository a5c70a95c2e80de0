// The C++ half of scripts/bench/go: the calls the Go half (client/go/bench/gocompare) times,
// timed the same way, in one run against the same server, so that their ratio is the Go
// client's cost. The server must already hold the chains (the Go half ingests them).
//   go_compare_bench --rpc HOST:PORT --revision R --chains N --blocks 128 --block-size 16
//                    --local-iters N --client-iters N --ingest-batches N --round N
// Prints one JSON object: 128-block lookups by hash over the binary protocol one at a time
// (p50, p99, process CPU per lookup), LocalIndex lookups (mean, p50, p99; its memory per
// copy by its own accounting), and ingest (stored events of 16 blocks, 64 per batch, one
// batch at a time: block events/s, CPU per block event) into another context.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "bench/compare_setup.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvatlas::bench::Arg;

// This process's CPU seconds, all threads (finer than /proc's ticks).
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double NsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const auto setup = kvatlas::bench::ParseCompareSetup(argc, argv, "go_compare_bench");
  if (!setup) return 2;
  const auto& [rpc, revision, chains, blocks, local_iters, client_iters, context, keys] = *setup;
  const uint64_t ingest_batches = Arg(argc, argv, "--ingest-batches", 500);
  const uint64_t round = Arg(argc, argv, "--round", 0);  // names the ingest's context
  auto client = kvatlas::bench::ConnectOrReport(*setup);
  if (!client) return 1;
  uint64_t found = 0;
  std::vector<double> lat;
  lat.reserve(client_iters);
  double cpu = ProcessCpuSeconds();
  for (uint64_t i = 0; i < client_iters; ++i) {
    kvatlas::LookupRequest request;
    request.context = context;
    request.by_hash = true;
    request.seq_hashes = keys[i % chains];
    const auto start = Clock::now();
    auto answer = client->Lookup(std::move(request));
    lat.push_back(NsSince(start));
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double client_cpu_ns = (ProcessCpuSeconds() - cpu) * 1e9 / double(client_iters);

  auto index = kvatlas::bench::SyncedIndexOrReport(*setup);
  if (!index) return 1;
  std::vector<double> local_lat;
  local_lat.reserve(local_iters);
  const auto local_start = Clock::now();
  for (uint64_t i = 0; i < local_iters; ++i) {
    const auto start = Clock::now();
    auto answer = index->Lookup(context, keys[i % chains]);
    local_lat.push_back(NsSince(start));
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double local_ns = NsSince(local_start) / double(local_iters);
  const kvatlas::LocalIndexStats stats = index->Stats();

  // Ingest into another context (the replica's stays as it is): 64 stored events of 16
  // blocks per batch, one batch at a time.
  kvatlas::ContextKey ingest_context = context;
  ingest_context.model = "bench-ingest-cpp-" + std::to_string(round);
  cpu = ProcessCpuSeconds();
  const auto ingest_start = Clock::now();
  uint64_t block_events = 0;
  for (uint64_t b = 0; b < ingest_batches; ++b) {
    std::vector<kvatlas::BlockEvent> events(64);
    for (size_t e = 0; e < events.size(); ++e) {
      events[e].context = ingest_context;
      events[e].holder.id = "engine-" + std::to_string(e % 8);
      for (uint64_t k = 0; k < 16; ++k) {
        events[e].seq_hashes.push_back((b * 64 + e) * 16 + k + 1);
      }
      block_events += 16;
    }
    auto answer = client->Ingest(std::move(events));
    if (!answer.has_value()) {
      std::fprintf(stderr, "ingest: %s\n", answer.error().ToString().c_str());
      return 1;
    }
  }
  const double ingest_s = NsSince(ingest_start) * 1e-9;
  const double ingest_cpu_ns = (ProcessCpuSeconds() - cpu) * 1e9 / double(block_events);
  std::printf(
      "{\"client_lookup_p50_ns\": %.0f, \"client_lookup_p99_ns\": %.0f, "
      "\"client_lookup_cpu_ns\": %.0f, \"local_lookup_ns\": %.1f, \"local_lookup_p50_ns\": %.0f, "
      "\"local_lookup_p99_ns\": %.0f, \"local_copies\": %llu, \"local_memory_bytes\": %llu, "
      "\"ingest_block_events_per_s\": %.0f, \"ingest_cpu_ns_per_block_event\": %.1f, "
      "\"found\": %llu}\n",
      kvatlas::bench::Pct(lat, 0.5), kvatlas::bench::Pct(lat, 0.99), client_cpu_ns, local_ns,
      kvatlas::bench::Pct(local_lat, 0.5), kvatlas::bench::Pct(local_lat, 0.99),
      static_cast<unsigned long long>(stats.copies),
      static_cast<unsigned long long>(stats.memory_bytes), double(block_events) / ingest_s,
      ingest_cpu_ns, static_cast<unsigned long long>(found));
  return 0;
}
