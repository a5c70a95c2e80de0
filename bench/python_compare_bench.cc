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
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvatlas/client/block_hasher.h"
#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"

namespace {

using Clock = std::chrono::steady_clock;

uint64_t Arg(int argc, char** argv, const char* name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

std::string StrArg(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return {};
}

// Chain c's tokens: c * 1'000'000 + i, as scripts/bench/python_compare.py builds them.
std::vector<uint32_t> ChainTokens(uint64_t chain, uint32_t blocks, uint32_t block_size) {
  std::vector<uint32_t> tokens(size_t(blocks) * block_size);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(chain * 1'000'000 + i);
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string rpc = StrArg(argc, argv, "--rpc");
  const uint64_t revision = Arg(argc, argv, "--revision", 0);
  const uint64_t chains = Arg(argc, argv, "--chains", 64);
  const auto blocks = uint32_t(Arg(argc, argv, "--blocks", 128));
  const auto block_size = uint32_t(Arg(argc, argv, "--block-size", 16));
  const uint64_t local_iters = Arg(argc, argv, "--local-iters", 200'000);
  const uint64_t client_iters = Arg(argc, argv, "--client-iters", 5'000);
  if (rpc.empty()) {
    std::fprintf(stderr, "usage: python_compare_bench --rpc HOST:PORT [...]\n");
    return 2;
  }
  kvatlas::ContextKey context;
  context.model = "bench";
  context.block_size = block_size;
  const kvatlas::BlockHasher hasher;
  std::vector<std::vector<kvatlas::BlockKey>> keys;
  for (uint64_t c = 0; c < chains; ++c) {
    keys.push_back(hasher.SequenceHashes(ChainTokens(c, blocks, block_size), block_size));
  }

  kvatlas::LocalIndexOptions options;
  options.client.endpoints = {rpc};
  options.contexts = {context};
  auto index = kvatlas::LocalIndex::Start(options);
  if (!index.has_value() || !(*index)->WaitSynced(std::chrono::seconds(30)).ok() ||
      !(*index)->WaitForRevision(revision, std::chrono::seconds(30)).ok()) {
    std::fprintf(stderr, "LocalIndex did not sync\n");
    return 1;
  }
  uint64_t found = 0;
  auto start = Clock::now();
  for (uint64_t i = 0; i < local_iters; ++i) {
    auto answer = (*index)->Lookup(context, keys[i % chains]);
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double local_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / double(local_iters);

  kvatlas::ClientOptions client_options;
  client_options.endpoints = {rpc};
  auto client = kvatlas::Client::Connect(client_options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return 1;
  }
  start = Clock::now();
  for (uint64_t i = 0; i < client_iters; ++i) {
    kvatlas::LookupRequest request;
    request.context = context;
    request.by_hash = true;
    request.seq_hashes = keys[i % chains];
    auto answer = (*client)->Lookup(std::move(request));
    found += answer.has_value() ? answer->blocks_found : 0;
  }
  const double client_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / double(client_iters);
  std::printf("{\"local_index_lookup_ns\": %.1f, \"client_lookup_ns\": %.1f, \"found\": %llu}\n",
              local_ns, client_ns, static_cast<unsigned long long>(found));
  return 0;
}
