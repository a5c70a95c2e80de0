// route_example: the smallest useful scheduler on kvatlas. It hashes a prompt into the
// standard block keys with BlockHasher (as the serving engines do), asks the index which
// instances hold the longest prefix, and routes to the best one.
//
//   route_example HOST:PORT [MODEL [BLOCK_SIZE [TOKENS]]]
//
// TOKENS is a comma-separated list (default: 1..64). Exit code 0 with a routing decision
// (possibly "no cached prefix"), 1 when the server cannot answer.
#include <kvatlas/client/block_hasher.h>
#include <kvatlas/client/client.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<uint32_t> ParseTokens(const std::string& text) {
  std::vector<uint32_t> tokens;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) tokens.push_back(static_cast<uint32_t>(std::stoul(item)));
  return tokens;
}

// The best target: the longest prefix in any tier, then the longest on GPU (no load from
// host memory or disk needed). The index sorts instances by longest match already; the
// GPU tie-break is this scheduler's own policy.
const kvatlas::InstanceMatch* PickInstance(const kvatlas::LookupAnswer& answer) {
  const kvatlas::InstanceMatch* best = nullptr;
  for (const kvatlas::InstanceMatch& m : answer.instances) {
    if (best == nullptr || m.blocks.disk > best->blocks.disk ||
        (m.blocks.disk == best->blocks.disk && m.blocks.gpu > best->blocks.gpu)) {
      best = &m;
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT [MODEL [BLOCK_SIZE [TOKENS]]]\n", argv[0]);
    return 2;
  }
  const std::string model = argc > 2 ? argv[2] : "llama";
  const uint32_t block_size = argc > 3 ? static_cast<uint32_t>(std::stoul(argv[3])) : 16;
  std::vector<uint32_t> tokens;
  if (argc > 4) {
    tokens = ParseTokens(argv[4]);
  } else {
    for (uint32_t t = 1; t <= 64; ++t) tokens.push_back(t);
  }

  kvatlas::ClientOptions options;
  options.endpoints = {argv[1]};
  options.connect_timeout = std::chrono::milliseconds(500);
  options.default_deadline = std::chrono::milliseconds(200);  // a router cannot wait long
  kvatlas::Result<std::unique_ptr<kvatlas::Client>> client = kvatlas::Client::Connect(options);
  if (!client) {
    std::fprintf(stderr, "kvatlas: %s\n", client.error().ToString().c_str());
    return 1;
  }

  kvatlas::LookupRequest request;
  request.context.model = model;
  request.context.block_size = block_size;
  request.by_hash = true;
  request.seq_hashes = kvatlas::BlockHasher().SequenceHashes(tokens, block_size);
  request.include_locations = false;
  kvatlas::Result<kvatlas::LookupAnswer> answer = (*client)->Lookup(request);
  if (!answer) {
    std::fprintf(stderr, "kvatlas: %s\n", answer.error().ToString().c_str());
    return 1;
  }
  const kvatlas::InstanceMatch* best = PickInstance(*answer);
  if (best == nullptr || best->blocks.disk == 0) {
    std::printf("no cached prefix among %zu blocks: route by load\n", request.seq_hashes.size());
    return 0;
  }
  std::printf("route to %s: %u of %zu blocks cached (%u on GPU)\n", best->instance_id.c_str(),
              best->blocks.disk, request.seq_hashes.size(), best->blocks.gpu);
  return 0;
}
