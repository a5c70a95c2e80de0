// A kvatlas::LocalIndex under test by local_index_failover_test.py: follows context
// (default, "m", block size 16) of the servers given, and on each `check` line of stdin
// compares its answers with a server's on random chains of the test's key scheme
// (document d, block b → key d * 1000 + b + 1).
//   local_index_probe --endpoints HOST:PORT[,HOST:PORT...]
// stdin:  check REVISION CHAINS SEED   → "ok ..." or "mismatch ..." / "error ..." on stdout
//         stats                        → one line of the replica's figures
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"
#include "kvatlas/common/json_codec.h"

namespace {

using namespace std::chrono_literals;
using kvatlas::ContextKey;

const ContextKey kContext{"default", "m", "", 16, ""};
constexpr uint32_t kDocs = 200;
constexpr uint32_t kBlocks = 48;

std::string StatsLine(const kvatlas::LocalIndex& local) {
  const kvatlas::LocalIndexStats s = local.Stats();
  std::ostringstream out;
  out << "revision=" << s.revision << " synced=" << s.synced
      << " staleness_ms=" << s.staleness.count() << " copies=" << s.copies
      << " records=" << s.records_applied << " snapshots=" << s.snapshots_loaded
      << " resumes=" << s.watch_resumes;
  return out.str();
}

std::string Check(kvatlas::Client& client, const kvatlas::LocalIndex& local,
                  kvatlas::Revision revision, int chains, uint32_t seed) {
  if (kvatlas::Status s = local.WaitForRevision(revision, 30s); !s.ok()) {
    return "error " + s.ToString() + " " + StatsLine(local);
  }
  std::mt19937 rng(seed);
  auto pick = [&rng](uint32_t k) { return std::uniform_int_distribution<uint32_t>(0, k - 1)(rng); };
  int found = 0;
  for (int i = 0; i < chains; ++i) {
    kvatlas::LookupRequest request;
    request.context = kContext;
    request.by_hash = true;
    request.min_revision = revision;
    const uint32_t doc = pick(kDocs), length = pick(kBlocks) + 1;
    for (uint32_t b = 0; b < length; ++b)
      request.seq_hashes.push_back(uint64_t{doc} * 1000 + b + 1);
    // The server may apply entries of its own after the load stopped (server addresses,
    // lease checks): compare at one revision, letting the replica catch up to the server's.
    kvatlas::Result<kvatlas::LookupAnswer> mine = local.Lookup(request);
    kvatlas::Result<kvatlas::LookupAnswer> theirs = client.Lookup(request);
    for (int attempt = 0; attempt < 20 && mine.has_value() && theirs.has_value() &&
                          mine->revision != theirs->revision;
         ++attempt) {
      (void)local.WaitForRevision(std::max(mine->revision, theirs->revision), 2s);
      request.min_revision = std::max(mine->revision, theirs->revision);
      mine = local.Lookup(request);
      theirs = client.Lookup(request);
    }
    if (!mine.has_value()) return "error local " + mine.error().ToString();
    if (!theirs.has_value()) return "error server " + theirs.error().ToString();
    if (mine->revision != theirs->revision) {
      return "error revisions differ: local " + std::to_string(mine->revision) + ", server " +
             std::to_string(theirs->revision) + " (the load must be stopped before a check)";
    }
    if (!(*mine == *theirs)) {
      return "mismatch chain " + std::to_string(i) + " local " +
             kvatlas::EncodeLookupAnswer(*mine) + " server " + kvatlas::EncodeLookupAnswer(*theirs);
    }
    found += theirs->blocks_found > 0;
  }
  return "ok chains=" + std::to_string(chains) + " with_matches=" + std::to_string(found) + " " +
         StatsLine(local);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--endpoints") {
    std::fprintf(stderr, "usage: local_index_probe --endpoints HOST:PORT[,HOST:PORT...]\n");
    return 2;
  }
  kvatlas::ClientOptions client_options;
  std::stringstream list(argv[2]);
  for (std::string e; std::getline(list, e, ',');) client_options.endpoints.push_back(e);
  client_options.default_deadline = 10s;
  client_options.connect_timeout = 300ms;

  kvatlas::LocalIndexOptions options;
  options.client = client_options;
  options.contexts = {kContext};
  options.retry_backoff_min = 20ms;
  options.retry_backoff_max = 300ms;
  auto local = kvatlas::LocalIndex::Start(options);
  if (!local.has_value()) {
    std::fprintf(stderr, "LocalIndex: %s\n", local.error().ToString().c_str());
    return 1;
  }
  if (kvatlas::Status s = (*local)->WaitSynced(30s); !s.ok()) {
    std::fprintf(stderr, "LocalIndex: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("synced %s\n", StatsLine(**local).c_str());
  std::fflush(stdout);

  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream words(line);
    std::string command;
    words >> command;
    std::string answer;
    if (command == "check") {
      kvatlas::Revision revision = 0;
      int chains = 0;
      uint32_t seed = 0;
      words >> revision >> chains >> seed;
      // A client per check: the servers alive now, whichever leads.
      auto client = kvatlas::Client::Connect(client_options);
      answer = client.has_value() ? Check(**client, **local, revision, chains, seed)
                                  : "error connect " + client.error().ToString();
    } else if (command == "stats") {
      answer = StatsLine(**local);
    } else {
      answer = "error unknown command " + command;
    }
    std::printf("%s\n", answer.c_str());
    std::fflush(stdout);
  }
  return 0;
}
