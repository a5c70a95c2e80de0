// The C++ consumer of install_test.py: through the installed headers and library, ingests
// a 3-block chain for HOLDER, looks it up, ranks the instance with Scorer, and hashes
// tokens with both hashers (VllmBlockHasher needs the library's OpenSSL).
//
//   consumer HOST:PORT HOLDER      exit 0 when every check passed, 1 otherwise
#include <kvatlas/client/block_hasher.h>
#include <kvatlas/client/client.h>
#include <kvatlas/client/scorer.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: consumer HOST:PORT HOLDER");
  const std::string holder = argv[2];

  kvatlas::ClientOptions options;
  options.endpoints = {argv[1]};
  auto client = kvatlas::Client::Connect(options);
  if (!client) return Fail("connect: " + client.error().ToString());

  const std::vector<uint64_t> keys = {0x1001, 0x1002, 0x1003};
  kvatlas::BlockEvent event;
  event.context.model = "install-test";
  event.context.block_size = 4;
  event.holder.id = holder;
  event.seq_hashes = keys;
  auto ingested = (*client)->Ingest({event});
  if (!ingested) return Fail("ingest: " + ingested.error().ToString());

  kvatlas::LookupRequest request;
  request.context = event.context;
  request.by_hash = true;
  request.seq_hashes = keys;
  auto answer = (*client)->Lookup(request);
  if (!answer) return Fail("lookup: " + answer.error().ToString());
  const kvatlas::InstanceMatch* mine = nullptr;
  for (const kvatlas::InstanceMatch& m : answer->instances) {
    if (m.instance_id == holder) mine = &m;
  }
  if (answer->blocks_found != 3 || mine == nullptr || mine->blocks.disk != 3) {
    return Fail("lookup of " + request.context.ToString() + ": " + holder +
                " does not hold the 3 blocks");
  }

  auto scorer = kvatlas::Scorer::Create();
  if (!scorer) return Fail("scorer: " + scorer.error().ToString());
  const std::vector<kvatlas::RouteCandidate> candidates = {{holder, {}, 0, 0}};
  auto ranked = scorer->Score(request, *answer, candidates);
  if (!ranked || ranked->ranked.size() != 1 || ranked->ranked[0].matched.gpu != 3) {
    return Fail("scorer did not credit the 3 GPU blocks");
  }

  const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const kvatlas::BlockHasher hasher;
  const kvatlas::VllmBlockHasher vllm("0");
  if (hasher.SequenceHashes(tokens, 4).size() != 2 || vllm.BlockHashes(tokens, 4).size() != 2) {
    return Fail("hashers did not give 2 block hashes for 8 tokens");
  }
  std::printf("consumer %s: revision %llu, %u blocks found\n", holder.c_str(),
              static_cast<unsigned long long>(answer->revision), answer->blocks_found);
  return 0;
}
