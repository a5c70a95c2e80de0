// The setup shared by the C++ halves of the binding benchmarks (scripts/bench/python,
// scripts/bench/go): their common flags, the chains' block keys, a client, and a
// LocalIndex synced to the revision the other half ingested the chains at.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kvatlas/client/block_hasher.h"
#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"

namespace kvatlas::bench {

struct CompareSetup {
  std::string rpc;
  Revision revision = 0;
  uint64_t chains = 0;
  uint32_t blocks = 0;
  uint64_t local_iters = 0;
  uint64_t client_iters = 0;
  ContextKey context;                       // model "bench", the chains' block size
  std::vector<std::vector<BlockKey>> keys;  // chain c's block keys
};

// --rpc HOST:PORT --revision R --chains N --blocks 128 --block-size 16 --local-iters N
// --client-iters N; nullopt (after printing the usage) without --rpc.
inline std::optional<CompareSetup> ParseCompareSetup(int argc, char** argv, const char* program) {
  CompareSetup s;
  s.rpc = StrArg(argc, argv, "--rpc");
  s.revision = Arg(argc, argv, "--revision", 0);
  s.chains = Arg(argc, argv, "--chains", 64);
  s.blocks = uint32_t(Arg(argc, argv, "--blocks", 128));
  const auto block_size = uint32_t(Arg(argc, argv, "--block-size", 16));
  s.local_iters = Arg(argc, argv, "--local-iters", 200'000);
  s.client_iters = Arg(argc, argv, "--client-iters", 5'000);
  if (s.rpc.empty()) {
    std::fprintf(stderr, "usage: %s --rpc HOST:PORT [...]\n", program);
    return std::nullopt;
  }
  s.context.model = "bench";
  s.context.block_size = block_size;
  const BlockHasher hasher;
  for (uint64_t c = 0; c < s.chains; ++c) {
    s.keys.push_back(hasher.SequenceHashes(ChainTokens(c, s.blocks, block_size), block_size));
  }
  return s;
}

// A client of s.rpc, or null after printing why.
inline std::unique_ptr<Client> ConnectOrReport(const CompareSetup& s) {
  ClientOptions options;
  options.endpoints = {s.rpc};
  auto client = Client::Connect(options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return nullptr;
  }
  return std::move(*client);
}

// A LocalIndex of s.context synced to s.revision, or null after printing why.
inline std::unique_ptr<LocalIndex> SyncedIndexOrReport(const CompareSetup& s) {
  LocalIndexOptions options;
  options.client.endpoints = {s.rpc};
  options.contexts = {s.context};
  auto index = LocalIndex::Start(options);
  if (!index.has_value() || !(*index)->WaitSynced(std::chrono::seconds(60)).ok() ||
      !(*index)->WaitForRevision(s.revision, std::chrono::seconds(60)).ok()) {
    std::fprintf(stderr, "LocalIndex did not sync\n");
    return nullptr;
  }
  return std::move(*index);
}

}  // namespace kvatlas::bench
