// One side of the kvatlas / Redis comparison (scripts/bench/compare starts each server in
// turn, runs this against it and prints the sides next to each other). The same workload on
// either side: `entries` block copies as chains of 128 blocks, chain c held by pod c % 1000
// on the GPU tier; ingest in calls of 64 chains (8,192 block events), 8 calls in flight;
// 128-block lookups of random ingested chains, open loop at fixed rates after the same
// number of that side's floor requests (kvatlas kPing, Redis PING) on the same connection;
// closed-loop capacity (64 lookups in flight); server CPU per operation from /proc/PID/stat;
// memory per entry from VmRSS after the ingest minus before it, and from the server's own
// count (kvatlas's index memory_bytes in kStats, Redis's used_memory in INFO).
//   compare_bench --kvatlas HOST:PORT --pid PID --name NAME [common flags]
//   compare_bench --redis HOST:PORT --pid PID --name NAME --layout hset|set-hset [common]
//   common: --entries N --rates 1000,2000,5000,20000 --seconds S --capacity-seconds S
// Redis is driven in llm-d's KV-cache indexer layout (pkg/kvcache/kvblock/redis.go of
// llm-d/llm-d-kv-cache-manager; scripts/bench/compare names the commits): hash
// "<model>@<hash>" with one field "<pod>@<tier>" (value "") per holder; an add is pipelined
// HSETs (layout hset) or, per block, SET "engine:<model>@<engine hash>" "<model>@<hash>"
// then HSET (layout set-hset, llm-d's current Add); a lookup is one pipeline of HKEYS, one
// per block of the prompt. Prints figures and a last line "RESULT {json}"; exits non-zero
// when a phase fails or any request errs, asserts nothing about speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/resp_connection.h"
#include "kvatlas/client/client.h"

namespace {

using kvatlas::bench::CpuSeconds;
using kvatlas::bench::Mix;
using kvatlas::bench::Pct;
using kvatlas::bench::RespConnection;
using kvatlas::bench::RunOpenLoop;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kChain = 128;
constexpr uint64_t kPods = 1000;
constexpr uint64_t kChainsPerCall = 64;
constexpr size_t kIngestInFlight = 8;
constexpr size_t kCapacityInFlight = 64;
constexpr size_t kPreparedLookups = 4096;
constexpr const char* kModel = "bench";

uint64_t BlockHash(uint64_t chain, uint32_t i) { return Mix(chain * kChain + i); }
// The engine's own hash of the same block (llm-d maps engine keys to its request keys).
uint64_t EngineHash(uint64_t chain, uint32_t i) { return Mix(~(chain * kChain + i)); }
std::string Pod(uint64_t chain) { return "pod-" + std::to_string(chain % kPods); }

// `"<as>": <number>` for the number after the first `<name>` in `text` and the quotes, colon
// and spaces that follow it (`"name": N` in JSON, `name:N` in Redis's INFO); "" when absent.
std::string NumberField(const std::string& text, const std::string& name, const char* as) {
  const size_t at = text.find(name);
  if (at == std::string::npos) return "";
  size_t from = at + name.size();
  while (from < text.size() && (text[from] == '"' || text[from] == ':' || text[from] == ' '))
    ++from;
  return "\"" + std::string(as) +
         "\": " + std::to_string(std::strtoull(text.c_str() + from, nullptr, 10));
}

// Everything measured is a future of whether the request succeeded.
class Side {
 public:
  virtual ~Side() = default;
  // Builds the ingest calls for chains [0, chains) before the clock starts.
  virtual size_t PrepareIngest(uint64_t chains) = 0;
  virtual std::future<bool> Ingest(size_t call) = 0;
  // Builds kPreparedLookups lookups of random chains below `chains`.
  virtual void PrepareLookups(uint64_t chains) = 0;
  virtual std::future<bool> Lookup(size_t i) = 0;
  virtual std::future<bool> Ping() = 0;
  // True when prepared lookup 0 finds all 128 blocks (the workload is what it claims).
  virtual bool LookupHitsAll() = 0;
  // Extra memory figures of the server's own ("" when none), a JSON fragment.
  virtual std::string ServerMemoryJson() { return ""; }
};

// Runs on get() in the waiting thread: no thread of its own.
template <typename T, typename Ok>
std::future<bool> Checked(std::future<T> f, Ok ok) {
  return std::async(std::launch::deferred,
                    [f = std::move(f), ok]() mutable { return ok(f.get()); });
}

class KvatlasSide : public Side {
 public:
  explicit KvatlasSide(std::unique_ptr<kvatlas::Client> client) : client_(std::move(client)) {}

  size_t PrepareIngest(uint64_t chains) override {
    for (uint64_t c = 0; c < chains; c += kChainsPerCall) {
      std::vector<kvatlas::BlockEvent> events;
      for (uint64_t i = c; i < std::min(chains, c + kChainsPerCall); ++i) {
        kvatlas::BlockEvent e;
        e.type = kvatlas::EventType::kStored;
        e.context = Context();
        e.holder = kvatlas::HolderKey{Pod(i), 0};
        e.tier = kvatlas::Tier::kGpu;
        e.seq_hashes = Hashes(i);
        events.push_back(std::move(e));
      }
      calls_.push_back(std::move(events));
    }
    return calls_.size();
  }
  std::future<bool> Ingest(size_t call) override {
    return Checked(client_->IngestAsync(std::move(calls_[call]), std::chrono::seconds(60)),
                   [](const auto& r) { return r.has_value(); });
  }
  void PrepareLookups(uint64_t chains) override {
    std::mt19937_64 rng(7);
    for (size_t i = 0; i < kPreparedLookups; ++i) {
      kvatlas::LookupRequest r;
      r.context = Context();
      r.by_hash = true;
      r.seq_hashes = Hashes(rng() % chains);
      lookups_.push_back(std::move(r));
    }
  }
  std::future<bool> Lookup(size_t i) override {
    return Checked(client_->LookupAsync(lookups_[i % lookups_.size()], std::chrono::seconds(30)),
                   [](const auto& r) { return r.has_value(); });
  }
  std::future<bool> Ping() override {
    return Checked(client_->PingAsync(std::chrono::seconds(30)),
                   [](const kvatlas::Status& s) { return s.ok(); });
  }
  bool LookupHitsAll() override {
    auto answer = client_->Lookup(lookups_[0]);
    return answer.has_value() && answer->blocks_found == kChain;
  }
  // The index's own count of its bytes (GET /v1/stats "index"."memory_bytes").
  std::string ServerMemoryJson() override {
    auto stats = client_->Stats();
    if (!stats.has_value()) return "";
    return NumberField(stats->json, "memory_bytes", "index_memory");
  }

 private:
  static kvatlas::ContextKey Context() {
    return kvatlas::ContextKey{"default", kModel, "", 16, ""};
  }
  static std::vector<uint64_t> Hashes(uint64_t chain) {
    std::vector<uint64_t> keys(kChain);
    for (uint32_t i = 0; i < kChain; ++i) keys[i] = BlockHash(chain, i);
    return keys;
  }

  std::unique_ptr<kvatlas::Client> client_;
  std::vector<std::vector<kvatlas::BlockEvent>> calls_;
  std::vector<kvatlas::LookupRequest> lookups_;
};

class RedisSide : public Side {
 public:
  RedisSide(std::unique_ptr<RespConnection> connection, bool engine_keys)
      : connection_(std::move(connection)), engine_keys_(engine_keys) {}

  size_t PrepareIngest(uint64_t chains) override {
    for (uint64_t c = 0; c < chains; c += kChainsPerCall) {
      Call call;
      for (uint64_t i = c; i < std::min(chains, c + kChainsPerCall); ++i) {
        const std::string field = Pod(i) + "@gpu";
        for (uint32_t b = 0; b < kChain; ++b) {
          const std::string key = Key(BlockHash(i, b));
          if (engine_keys_) {
            const std::string engine = "engine:" + Key(EngineHash(i, b));
            kvatlas::bench::AppendCommand(call.commands, {"SET", engine, key});
            ++call.replies;
          }
          kvatlas::bench::AppendCommand(call.commands, {"HSET", key, field, ""});
          ++call.replies;
        }
      }
      calls_.push_back(std::move(call));
    }
    return calls_.size();
  }
  std::future<bool> Ingest(size_t call) override {
    std::future<bool> done = connection_->Send(calls_[call].commands, calls_[call].replies);
    return done;
  }
  void PrepareLookups(uint64_t chains) override {
    std::mt19937_64 rng(7);
    for (size_t i = 0; i < kPreparedLookups; ++i) {
      const uint64_t chain = rng() % chains;
      std::string commands;
      for (uint32_t b = 0; b < kChain; ++b) {
        kvatlas::bench::AppendCommand(commands, {"HKEYS", Key(BlockHash(chain, b))});
      }
      lookups_.push_back(std::move(commands));
    }
  }
  std::future<bool> Lookup(size_t i) override {
    return connection_->Send(lookups_[i % lookups_.size()], kChain);
  }
  std::future<bool> Ping() override { return connection_->Send(ping_, 1); }
  bool LookupHitsAll() override {
    std::string raw;
    if (!connection_->Send(lookups_[0], kChain, &raw).get()) return false;
    // Every HKEYS answers the one holder: an array of one field.
    size_t found = 0;
    for (size_t at = raw.find("*1\r\n"); at != std::string::npos; at = raw.find("*1\r\n", at + 1))
      ++found;
    return found == kChain;
  }
  std::string ServerMemoryJson() override {
    std::string raw, commands;
    kvatlas::bench::AppendCommand(commands, {"INFO", "memory"});
    if (!connection_->Send(commands, 1, &raw).get()) return "";
    return NumberField(raw, "used_memory", "used_memory");
  }

 private:
  struct Call {
    std::string commands;
    size_t replies = 0;
  };
  static std::string Key(uint64_t hash) { return std::string(kModel) + "@" + std::to_string(hash); }

  std::unique_ptr<RespConnection> connection_;
  bool engine_keys_;
  std::string ping_ = "*1\r\n$4\r\nPING\r\n";
  std::vector<Call> calls_;
  std::vector<std::string> lookups_;
};

// VmRSS of `pid` in bytes; 0 when it cannot be read.
uint64_t RssBytes(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

struct Args {
  std::string kvatlas, redis, name, layout = "hset";
  long pid = 0;
  uint64_t entries = 1'000'000;
  std::vector<uint64_t> rates{1000, 2000, 5000, 20000};
  double seconds = 3;
  double capacity_seconds = 3;
};

struct OpenLoopFigures {
  double p50 = 0, p99 = 0, p999 = 0, server_cpu_us = 0;
  uint64_t errors = 0;
};

// Open loop (latency from when a request was due: a stalled server is charged for the
// requests it delayed) of `send` at `rate` for `seconds`.
template <typename Send>
OpenLoopFigures OpenLoop(const char* what, Send send, uint64_t rate, double seconds, long pid) {
  const uint64_t n =
      std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(rate) * seconds));
  std::vector<double> latency(n);
  OpenLoopFigures f;
  const double cpu0 = CpuSeconds(pid);
  RunOpenLoop(n, static_cast<double>(rate), Clock::now() + std::chrono::milliseconds(10), send,
              [&](uint64_t i, bool ok, Clock::time_point due) {
                latency[i] = std::chrono::duration<double, std::micro>(Clock::now() - due).count();
                f.errors += ok ? 0 : 1;
              });
  f.server_cpu_us = (CpuSeconds(pid) - cpu0) / static_cast<double>(n) * 1e6;
  f.p50 = Pct(latency, 0.5);
  f.p99 = Pct(latency, 0.99);
  f.p999 = Pct(latency, 0.999);
  std::printf(
      "%-7s at %6llu req/s: p50 %8.1f us  p99 %8.1f us  p999 %8.1f us  server CPU %.1f us/req%s\n",
      what, static_cast<unsigned long long>(rate), f.p50, f.p99, f.p999, f.server_cpu_us,
      f.errors > 0 ? "  ERRORS" : "");
  std::fflush(stdout);
  return f;
}

std::string Json(const OpenLoopFigures& f) {
  char s[192];
  std::snprintf(s, sizeof s,
                "{\"p50\": %.1f, \"p99\": %.1f, \"p999\": %.1f, \"server_cpu_us\": %.2f}", f.p50,
                f.p99, f.p999, f.server_cpu_us);
  return s;
}

int Run(const Args& a, Side& side) {
  const uint64_t chains = std::max<uint64_t>(1, a.entries / kChain);
  const uint64_t entries = chains * kChain;
  const size_t calls = side.PrepareIngest(chains);
  side.PrepareLookups(chains);
  const uint64_t rss0 = RssBytes(a.pid);

  // Ingest: kIngestInFlight calls in flight, each kChainsPerCall chains.
  bool ok = true;
  const double ingest_cpu0 = CpuSeconds(a.pid);
  const auto t0 = Clock::now();
  std::deque<std::future<bool>> inflight;
  for (size_t c = 0; c < calls; ++c) {
    inflight.push_back(side.Ingest(c));
    while (inflight.size() > kIngestInFlight) {
      ok = inflight.front().get() && ok;
      inflight.pop_front();
    }
  }
  for (auto& f : inflight) ok = f.get() && ok;
  const double ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double ingest_cpu_us =
      (CpuSeconds(a.pid) - ingest_cpu0) / static_cast<double>(entries) * 1e6;
  const double ingest_rate = static_cast<double>(entries) / ingest_s;
  std::printf("[%s] ingest: %llu block events in %.2f s = %.0f k/s, server CPU %.2f us/event%s\n",
              a.name.c_str(), static_cast<unsigned long long>(entries), ingest_s, ingest_rate / 1e3,
              ingest_cpu_us, ok ? "" : "  ERRORS");
  std::fflush(stdout);
  if (!ok) return 1;
  const double quiet_s = kvatlas::bench::WaitForQuietServer(a.pid);
  const uint64_t rss1 = RssBytes(a.pid);
  const double per_entry = (static_cast<double>(rss1) - static_cast<double>(rss0)) / entries;
  std::printf("[%s] memory: RSS %.1f -> %.1f MiB, %.1f B per entry (server quiet after %.1f s)\n",
              a.name.c_str(), static_cast<double>(rss0) / 1048576.0,
              static_cast<double>(rss1) / 1048576.0, per_entry, quiet_s);
  if (!side.LookupHitsAll()) {
    std::fprintf(stderr, "[%s] a lookup of an ingested chain did not find its 128 blocks\n",
                 a.name.c_str());
    return 1;
  }

  std::string rates_json;
  uint64_t errors = 0;
  for (uint64_t rate : a.rates) {
    const OpenLoopFigures floor = OpenLoop(
        "floor", [&](uint64_t) { return side.Ping(); }, rate, a.seconds, a.pid);
    const OpenLoopFigures lookup = OpenLoop(
        "lookup", [&](uint64_t i) { return side.Lookup(i); }, rate, a.seconds, a.pid);
    errors += floor.errors + lookup.errors;
    if (!rates_json.empty()) rates_json += ", ";
    rates_json += "{\"rate\": " + std::to_string(rate) + ", \"floor\": " + Json(floor) +
                  ", \"lookup\": " + Json(lookup) + "}";
  }

  // Closed loop: kCapacityInFlight lookups in flight for capacity_seconds.
  const double cap_cpu0 = CpuSeconds(a.pid);
  const auto c0 = Clock::now();
  const auto stop = c0 + std::chrono::duration<double>(a.capacity_seconds);
  uint64_t done = 0;
  std::deque<std::future<bool>> window;
  for (size_t i = 0; Clock::now() < stop || !window.empty(); ++i) {
    if (Clock::now() < stop) window.push_back(side.Lookup(i));
    if (window.size() >= kCapacityInFlight || Clock::now() >= stop) {
      errors += window.front().get() ? 0 : 1;
      window.pop_front();
      ++done;
    }
  }
  const double cap_s = std::chrono::duration<double>(Clock::now() - c0).count();
  const double capacity = static_cast<double>(done) / cap_s;
  const double cap_cpu_us = (CpuSeconds(a.pid) - cap_cpu0) / static_cast<double>(done) * 1e6;
  std::printf("[%s] capacity (%zu lookups in flight): %.0f lookups/s, server CPU %.1f us/lookup\n",
              a.name.c_str(), kCapacityInFlight, capacity, cap_cpu_us);

  std::string memory = side.ServerMemoryJson();
  if (!memory.empty()) memory = ", " + memory;
  std::printf(
      "RESULT {\"name\": \"%s\", \"entries\": %llu, \"ingest_per_s\": %.0f, "
      "\"ingest_server_cpu_us\": %.3f, \"rss_before\": %llu, \"rss_after\": %llu, "
      "\"rss_per_entry\": %.1f%s, \"rates\": [%s], \"capacity_per_s\": %.0f, "
      "\"capacity_server_cpu_us\": %.2f, \"errors\": %llu}\n",
      a.name.c_str(), static_cast<unsigned long long>(entries), ingest_rate, ingest_cpu_us,
      static_cast<unsigned long long>(rss0), static_cast<unsigned long long>(rss1), per_entry,
      memory.c_str(), rates_json.c_str(), capacity, cap_cpu_us,
      static_cast<unsigned long long>(errors));
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--kvatlas")
      a.kvatlas = v;
    else if (k == "--redis")
      a.redis = v;
    else if (k == "--name")
      a.name = v;
    else if (k == "--layout")
      a.layout = v;
    else if (k == "--pid")
      a.pid = std::atol(v.c_str());
    else if (k == "--entries")
      a.entries = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--seconds")
      a.seconds = std::atof(v.c_str());
    else if (k == "--capacity-seconds")
      a.capacity_seconds = std::atof(v.c_str());
    else if (k == "--rates")
      a.rates = kvatlas::bench::ParseRates(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.kvatlas.empty() == a.redis.empty() || a.pid == 0 || a.name.empty() ||
      (a.layout != "hset" && a.layout != "set-hset")) {
    std::fprintf(stderr,
                 "usage: compare_bench (--kvatlas HOST:PORT | --redis HOST:PORT [--layout "
                 "hset|set-hset]) --pid PID --name NAME [--entries N] [--rates R1,R2] "
                 "[--seconds S] [--capacity-seconds S]\n");
    return 2;
  }
  std::unique_ptr<Side> side;
  if (!a.kvatlas.empty()) {
    kvatlas::ClientOptions options;
    options.endpoints = {a.kvatlas};
    auto client = kvatlas::Client::Connect(options);
    if (!client.has_value()) {
      std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
      return 1;
    }
    side = std::make_unique<KvatlasSide>(std::move(*client));
  } else {
    auto connection = RespConnection::Connect(a.redis);
    if (connection == nullptr) {
      std::fprintf(stderr, "connect to redis at %s failed\n", a.redis.c_str());
      return 1;
    }
    side = std::make_unique<RedisSide>(std::move(connection), a.layout == "set-hset");
  }
  return Run(a, *side);
}
