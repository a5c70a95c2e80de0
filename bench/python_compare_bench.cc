// The C++ half of scripts/bench/python: LocalIndex::Lookup and Client::Lookup of 128-block
// prompts, timed exactly as the Python half times kvatlas.LocalIndex.lookup and
// kvatlas.Client.lookup (a loop over the same prompts, total time / calls), so that the
// ratio is the binding's overhead. The server must already hold the chains (the script
// ingests them); prints one JSON object.
//   python_compare_bench --rpc HOST:PORT --revision R --chains N --blocks 128
//                        --block-size 16 --local-iters N --client-iters N
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "bench/compare_setup.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  const auto setup = kvatlas::bench::ParseCompareSetup(argc, argv, "python_compare_bench");
  if (!setup) return 2;
  const auto& [rpc, revision, chains, blocks, local_iters, client_iters, context, keys] = *setup;
  auto index = kvatlas::bench::SyncedIndexOrReport(*setup);
  if (!index) return 1;
  uint64_t found = 0;
  auto start = Clock::now();
  for (uint64_t i = 0; i < local_iters; ++i) {
    auto answer = index->Lookup(context, keys[i % chains]);
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double local_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / double(local_iters);

  auto client = kvatlas::bench::ConnectOrReport(*setup);
  if (!client) return 1;
  start = Clock::now();
  for (uint64_t i = 0; i < client_iters; ++i) {
    kvatlas::LookupRequest request;
    request.context = context;
    request.by_hash = true;
    request.seq_hashes = keys[i % chains];
    auto answer = client->Lookup(std::move(request));
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double client_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / double(client_iters);
  std::printf("{\"local_index_lookup_ns\": %.1f, \"client_lookup_ns\": %.1f, \"found\": %llu}\n",
              local_ns, client_ns, static_cast<unsigned long long>(found));
  return 0;
}
