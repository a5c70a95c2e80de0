// kvatlas-replay: replays a Mooncake-format trace against simulated instances under several
// routing policies and prints hit ratio, load imbalance, simulated TTFT and kvatlas route
// latency per policy (docs/routing.md §Trace replay). scripts/replay builds it and starts a
// server for it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kvatlas/client/client.h"
#include "tools/replay/kvatlas_policy.h"
#include "tools/replay/report.h"
#include "tools/replay/simulator.h"
#include "tools/replay/trace.h"

namespace kvatlas::replay {
namespace {

constexpr const char* kUsage = R"(usage: kvatlas-replay [flags]
  --trace FILE               Mooncake-format JSONL trace (default: the source tree's
                             tests/data/mooncake_synthetic_trace.jsonl)
  --server HOST:PORT         kvatlas binary-protocol address (needed by the kvatlas policy)
  --policies LIST            comma-separated: round-robin, random, least-loaded,
                             prefix-oracle, bounded-load, kvatlas, kvatlas-local (default:
                             round-robin,random,least-loaded,prefix-oracle,bounded-load,
                             kvatlas)
  --bound-epsilon X          bounded-load: an instance qualifies while its load is at most
                             (1 + X) x the mean load (0.25)
  --limit N                  replay only the first N requests (default: all)
  --instances N              simulated instances (8)
  --gpu-blocks N             GPU capacity per instance, in 512-token blocks (2000)
  --cpu-blocks N             CPU capacity per instance, in blocks (8000)
  --shared-blocks N          one shared storage backend of N blocks (0 = none)
  --time-scale X             multiply trace timestamps by X (1; < 1 compresses)
  --prefill-ms-per-token X   prefill cost of an uncached token (0.1)
  --prefill-overhead-ms X    fixed cost per prefill (10)
  --cpu-load-fraction X      cost of a CPU-cached token relative to computing it (0.1)
  --shared-load-fraction X   cost of a shared-storage token relative to computing it (0.25)
  --decode-ms-per-token X    decode time per output token (20)
  --weights G,C,D,S          route tier weights (1,0.75,0.25,0.5)
  --prefill-scale X          route weight of the request's new prefill blocks (1)
  --queue-scale X            route weight of the candidate's queued prefill blocks (0.4)
  --decode-scale X           route decode term weight (0.01)
  --replica-credit X         route credit for copies of busy holders' prefixes (1; 0 = off,
                             up to 1)
  --excess-queue-scale X     route weight of queued blocks above (1 + epsilon) x the
                             candidates' mean (0.7; 0 = off)
  --excess-queue-epsilon X   that epsilon (0.5)
  --temperature X            route softmax temperature (0 = argmin)
  --seed N                   seed of the random policy and of route sampling (1)
  --routers N                router replicas (1): request i is routed by replica i mod N,
                             which knows only the load of the requests it routed
  --shared-load              (kvatlas policy) the replicas share their load: each reports
                             its in-flight table through a LoadReporter and routes giving
                             no load, so the server scores with the fleet's sum
  --load-interval-ms X       --shared-load: report interval in simulated ms (10)
  --by-hash                  query kvatlas with block keys instead of tokens
  --approximate              kvatlas policy: instances publish no events, routes predict
                             (docs/routing.md §Approximate mode)
  --model NAME               context model prefix (default replay-<unix time>)
  --csv FILE                 also write the results as CSV
  --json                     print one JSON object per policy instead of the table
)";

struct Flags {
  std::string trace = KVATLAS_REPLAY_DEFAULT_TRACE;
  std::string server;
  std::vector<std::string> policies = {"round-robin",   "random",       "least-loaded",
                                       "prefix-oracle", "bounded-load", "kvatlas"};
  size_t limit = 0;
  SimOptions sim;
  RoutingOptions routing;
  double bound_epsilon = 0.25;
  uint64_t seed = 1;
  bool by_hash = false;
  bool shared_load = false;
  double load_interval_ms = 10;
  bool approximate = false;
  std::string model;
  std::string csv;
  bool json = false;
};

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Result<double> Number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0)) {
    return Status::InvalidArgument(flag + ": expected a number >= 0, got \"" + text + "\"");
  }
  return v;
}

Result<uint64_t> Integer(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || text[0] == '-') {
    return Status::InvalidArgument(flag + ": expected an unsigned integer, got \"" + text + "\"");
  }
  return static_cast<uint64_t>(v);
}

Result<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      f.json = true;
      continue;
    }
    if (flag == "--by-hash") {
      f.by_hash = true;
      continue;
    }
    if (flag == "--shared-load") {
      f.shared_load = true;
      continue;
    }
    if (flag == "--approximate") {
      f.approximate = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") return Status::NotFound("help");
    if (i + 1 >= argc) return Status::InvalidArgument(flag + ": needs a value (or is unknown)");
    const std::string v = argv[++i];
    if (flag == "--trace") {
      f.trace = v;
    } else if (flag == "--server") {
      f.server = v;
    } else if (flag == "--policies") {
      f.policies = Split(v);
    } else if (flag == "--limit") {
      KVATLAS_ASSIGN_OR_RETURN(f.limit, Integer(flag, v));
    } else if (flag == "--routers") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.routers, Integer(flag, v));
      if (f.sim.routers == 0) return Status::InvalidArgument("--routers: must be at least 1");
    } else if (flag == "--load-interval-ms") {
      KVATLAS_ASSIGN_OR_RETURN(f.load_interval_ms, Number(flag, v));
    } else if (flag == "--instances") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.instances, Integer(flag, v));
    } else if (flag == "--gpu-blocks") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.gpu_blocks, Integer(flag, v));
    } else if (flag == "--cpu-blocks") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.cpu_blocks, Integer(flag, v));
    } else if (flag == "--shared-blocks") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.shared_blocks, Integer(flag, v));
    } else if (flag == "--time-scale") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.time_scale, Number(flag, v));
    } else if (flag == "--prefill-ms-per-token") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.prefill_ms_per_token, Number(flag, v));
    } else if (flag == "--prefill-overhead-ms") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.prefill_overhead_ms, Number(flag, v));
    } else if (flag == "--cpu-load-fraction") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.cpu_load_fraction, Number(flag, v));
    } else if (flag == "--shared-load-fraction") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.shared_load_fraction, Number(flag, v));
    } else if (flag == "--decode-ms-per-token") {
      KVATLAS_ASSIGN_OR_RETURN(f.sim.decode_ms_per_token, Number(flag, v));
    } else if (flag == "--weights") {
      const std::vector<std::string> w = Split(v);
      if (w.size() != 4) return Status::InvalidArgument("--weights: expected G,C,D,S");
      KVATLAS_ASSIGN_OR_RETURN(f.routing.weights.gpu, Number(flag, w[0]));
      KVATLAS_ASSIGN_OR_RETURN(f.routing.weights.cpu, Number(flag, w[1]));
      KVATLAS_ASSIGN_OR_RETURN(f.routing.weights.disk, Number(flag, w[2]));
      KVATLAS_ASSIGN_OR_RETURN(f.routing.weights.shared, Number(flag, w[3]));
    } else if (flag == "--prefill-scale") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.prefill_scale, Number(flag, v));
    } else if (flag == "--queue-scale") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.queue_scale, Number(flag, v));
    } else if (flag == "--decode-scale") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.decode_scale, Number(flag, v));
    } else if (flag == "--replica-credit") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.replica_credit, Number(flag, v));
    } else if (flag == "--excess-queue-scale") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.excess_queue_scale, Number(flag, v));
    } else if (flag == "--excess-queue-epsilon") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.excess_queue_epsilon, Number(flag, v));
    } else if (flag == "--temperature") {
      KVATLAS_ASSIGN_OR_RETURN(f.routing.temperature, Number(flag, v));
    } else if (flag == "--bound-epsilon") {
      KVATLAS_ASSIGN_OR_RETURN(f.bound_epsilon, Number(flag, v));
    } else if (flag == "--seed") {
      KVATLAS_ASSIGN_OR_RETURN(f.seed, Integer(flag, v));
    } else if (flag == "--model") {
      f.model = v;
    } else if (flag == "--csv") {
      f.csv = v;
    } else {
      return Status::InvalidArgument(flag + ": unknown flag");
    }
  }
  f.routing.seed = f.seed;
  KVATLAS_RETURN_IF_ERROR(ValidateRoutingOptions(f.routing));
  if (f.policies.empty()) return Status::InvalidArgument("--policies: none given");
  if (f.shared_load && f.sim.routers < 2) {
    return Status::InvalidArgument("--shared-load: needs --routers N with N >= 2");
  }
  if (f.model.empty()) {
    f.model = "replay-" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  }
  return f;
}

// The server's hash seed (GET /v1/stats), so that the block keys published match the keys
// it computes from tokens.
Result<uint64_t> ServerHashSeed(Client& client) {
  KVATLAS_ASSIGN_OR_RETURN(StatsAnswer stats, client.Stats());
  const nlohmann::json doc = nlohmann::json::parse(stats.json, nullptr, false);
  if (!doc.is_object() || !doc.contains("hash_seed") || !doc["hash_seed"].is_number_unsigned()) {
    return Status::Corruption("stats: no hash_seed");
  }
  return doc["hash_seed"].get<uint64_t>();
}

int Run(int argc, char** argv) {
  Result<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed) {
    if (parsed.error().code() == StatusCode::kNotFound) {
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "kvatlas-replay: " << parsed.error().message() << "\n" << kUsage;
    return 2;
  }
  Flags& flags = *parsed;
  Result<std::vector<TraceRequest>> trace = ReadTrace(flags.trace, flags.limit);
  if (!trace) {
    std::cerr << "kvatlas-replay: " << trace.error().ToString() << "\n";
    return 1;
  }

  std::unique_ptr<Client> client;
  std::unique_ptr<BlockTable> blocks;
  for (const std::string& name : flags.policies) {
    if (name != "kvatlas" || client) continue;
    if (flags.server.empty()) {
      std::cerr << "kvatlas-replay: the kvatlas policy needs --server HOST:PORT\n";
      return 2;
    }
    ClientOptions options;
    options.endpoints = {flags.server};
    options.default_deadline = std::chrono::milliseconds(30'000);
    Result<std::unique_ptr<Client>> connected = Client::Connect(options);
    if (!connected) {
      std::cerr << "kvatlas-replay: " << connected.error().ToString() << "\n";
      return 1;
    }
    client = std::move(*connected);
    Result<uint64_t> seed = ServerHashSeed(*client);
    if (!seed) {
      std::cerr << "kvatlas-replay: " << seed.error().ToString() << "\n";
      return 1;
    }
    blocks = std::make_unique<BlockTable>(*trace, flags.sim.block_tokens, BlockHasher(*seed));
    if (blocks->inconsistent() > 0) {
      std::cerr << "kvatlas-replay: warning: " << blocks->inconsistent()
                << " block ids appear under more than one parent\n";
    }
  }

  std::vector<PolicyResult> results;
  for (const std::string& name : flags.policies) {
    std::unique_ptr<Policy> policy;
    if (name == "round-robin") {
      policy = MakeRoundRobinPolicy();
    } else if (name == "random") {
      policy = MakeRandomPolicy(flags.seed);
    } else if (name == "least-loaded") {
      policy = MakeLeastLoadedPolicy(flags.sim.block_tokens);
    } else if (name == "prefix-oracle") {
      policy = MakePrefixOraclePolicy(flags.sim.block_tokens);
    } else if (name == "bounded-load") {
      policy = MakeBoundedLoadPolicy(flags.sim.block_tokens, flags.bound_epsilon);
    } else if (name == "kvatlas-local") {
      Result<std::unique_ptr<Policy>> local =
          MakeLocalScorerPolicy(flags.routing, flags.sim.block_tokens);
      if (!local) {
        std::cerr << "kvatlas-replay: " << local.error().ToString() << "\n";
        return 2;
      }
      policy = std::move(*local);
    } else if (name == "kvatlas") {
      KvatlasPolicyOptions options;
      options.routing = flags.routing;
      options.block_tokens = flags.sim.block_tokens;
      options.context.model = flags.model + "-" + name;
      options.context.block_size = flags.sim.block_tokens;
      options.by_hash = flags.by_hash;
      options.shared_load = flags.shared_load;
      options.routers = flags.sim.routers;
      options.load_interval_ms = flags.load_interval_ms;
      options.approximate = flags.approximate;
      Result<std::unique_ptr<Policy>> kvatlas =
          MakeKvatlasPolicy(client.get(), blocks.get(), options);
      if (!kvatlas) {
        std::cerr << "kvatlas-replay: " << kvatlas.error().ToString() << "\n";
        return 1;
      }
      policy = std::move(*kvatlas);
    } else {
      std::cerr << "kvatlas-replay: --policies: unknown policy \"" << name << "\"\n" << kUsage;
      return 2;
    }
    const auto start = std::chrono::steady_clock::now();
    Result<PolicyResult> result = Simulate(flags.sim, *trace, *policy);
    if (!result) {
      std::cerr << "kvatlas-replay: " << name << ": " << result.error().ToString() << "\n";
      return 1;
    }
    std::cerr << "kvatlas-replay: " << name << ": " << trace->size() << " requests in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
    results.push_back(std::move(*result));
  }

  if (!flags.csv.empty()) {
    std::ofstream csv(flags.csv);
    csv << FormatCsv(results);
    if (!csv) {
      std::cerr << "kvatlas-replay: " << flags.csv << ": write failed\n";
      return 1;
    }
  }
  std::cout << (flags.json ? FormatJsonLines(results) : FormatTable(results));
  return 0;
}

}  // namespace
}  // namespace kvatlas::replay

int main(int argc, char** argv) { return kvatlas::replay::Run(argc, argv); }
