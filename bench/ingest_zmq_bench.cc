// ZMQ ingestion benchmark against a running kvatlas server (scripts/bench/ingest-zmq starts
// one): N publisher threads, each a vLLM-shaped PUB socket on 127.0.0.1 registered with
// POST /register, send pre-packed KV-event batches at full speed for D seconds while a lookup
// thread issues POST /query for known prompts at a fixed open-loop rate. Reports block events
// applied per second (from GET /v1/streams), gaps and replays, lookup latency under load and
// the server's CPU. Prints figures; asserts nothing.
//
// Batches are what vLLM (< 0.26, positional encoding) publishes: frames [topic "", seq u64 BE,
// msgpack [ts, [event...], dp_rank 0]], each event ["BlockStored", [hash...], parent|nil,
// [token...], 16, nil, "GPU", nil, [nil...], 0, "full_attention"] for one prompt of
// --blocks-per-event full blocks. The first --shared-blocks blocks of a prompt come from one of
// --prefix-groups common prefixes; once a publisher has announced a prefix, later prompts only
// announce their new blocks, parented on the prefix's last hash (as vLLM does on a cache hit).
// Engine hashes are an opaque 64-bit chain over the tokens, the same on every publisher (like
// engines sharing PYTHONHASHSEED), not kvatlas's own keys, so the server must map them.
//
// Flow control: a pacer polls GET /v1/streams every 10 ms and keeps every publisher at most
// --max-lag batches ahead of what the server applied (the PUB sockets are XPUBs only so that a
// publisher can wait for the server's subscription before its first batch; on the wire they
// are PUBs). Without /v1/streams it publishes unpaced and relies on the HWM (--hwm). --rate
// caps the total block events/s instead of publishing as fast as the server applies them.
// Pre-packed batches (--max-blocks in all) are re-sent from the start once used up.
#include <httplib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench/bench_util.h"
#include "common/internal/thread_name.h"
#include "kvatlas/client/client.h"
#include "kvatlas/client/local_index.h"

namespace {

using kvatlas::bench::CpuSeconds;
using kvatlas::bench::Mix;
using kvatlas::bench::Pct;

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Args {
  std::string http;
  long server_pid = 0;
  int publishers = 16;
  double seconds = 10;
  uint32_t blocks_per_event = 32;
  uint32_t events_per_batch = 4;
  uint32_t shared_blocks = 8;
  uint32_t prefix_groups = 64;
  uint32_t block_size = 16;
  uint64_t max_blocks = 6'000'000;  // pre-packed block events, all publishers together
  int64_t max_lag = 256;
  double rate = 0;  // block events/s over all publishers; 0 = as fast as the server takes them
  int hwm = 100000;
  double lookup_rate = 1000;
  std::string rpc;  // --rpc HOST:PORT: lookups through kvatlas::Client instead of POST /query
  bool local_index = false;  // --local-index (with --rpc): lookups on an in-process replica
  int publisher_nice = 0;    // nice value of the publishing threads
  std::string model = "bench-model";
  // --report-mode full: publishers registered in vLLM's full report mode, where a store
  // without a parent is a report (docs/engine-events.md §Report modes); empty = the default.
  std::string report_mode;
  std::string dump_batch;  // write one packed batch here (to check it decodes) and exit
};

// One prompt: chain `c` of publisher `p`.
struct Prompt {
  uint32_t group = 0;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> hashes;  // engine hash of every block
};

Prompt MakePrompt(const Args& a, int p, uint64_t c) {
  Prompt out;
  out.group = static_cast<uint32_t>(Mix(Mix(p) ^ c) % a.prefix_groups);
  const uint32_t n = a.blocks_per_event * a.block_size;
  out.tokens.resize(n);
  for (uint32_t t = 0; t < n; ++t) {
    const bool shared = t < a.shared_blocks * a.block_size;
    const uint64_t seed = shared ? Mix(out.group) : Mix(Mix(p + 1000003ULL) ^ Mix(c));
    out.tokens[t] = static_cast<uint32_t>(Mix(seed ^ t) % 50000);
  }
  uint64_t h = 0x6b7661746c6173ULL;
  for (uint32_t b = 0; b < a.blocks_per_event; ++b) {
    for (uint32_t t = 0; t < a.block_size; ++t) h = Mix(h ^ out.tokens[b * a.block_size + t]);
    out.hashes.push_back(h);
  }
  return out;
}

void PackStr(msgpack::packer<msgpack::sbuffer>& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// BlockStored for blocks [first, end) of the prompt, in vLLM's positional encoding.
void PackStored(msgpack::packer<msgpack::sbuffer>& pk, const Args& a, const Prompt& prompt,
                uint32_t first) {
  const uint32_t n = a.blocks_per_event - first;
  pk.pack_array(11);
  PackStr(pk, "BlockStored");
  pk.pack_array(n);
  for (uint32_t b = first; b < a.blocks_per_event; ++b) pk.pack_uint64(prompt.hashes[b]);
  if (first == 0) {
    pk.pack_nil();
  } else {
    pk.pack_uint64(prompt.hashes[first - 1]);
  }
  pk.pack_array(n * a.block_size);
  for (uint32_t t = first * a.block_size; t < prompt.tokens.size(); ++t) {
    pk.pack_uint32(prompt.tokens[t]);
  }
  pk.pack_uint32(a.block_size);
  pk.pack_nil();  // lora_id
  PackStr(pk, "GPU");
  pk.pack_nil();  // lora_name
  pk.pack_array(n);
  for (uint32_t b = 0; b < n; ++b) pk.pack_nil();  // extra_keys
  pk.pack_uint32(0);                               // group_idx
  PackStr(pk, "full_attention");
}

struct Batch {
  std::string bytes;
  uint64_t blocks = 0;
  uint64_t prompts_end = 0;  // prompts [0, prompts_end) are announced once this is applied
};

std::vector<Batch> MakeBatches(const Args& a, int p, uint64_t max_blocks) {
  std::vector<Batch> batches;
  std::set<uint32_t> announced;
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  uint64_t blocks = 0, c = 0;
  while (blocks < max_blocks || batches.empty()) {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(3);
    pk.pack_double(ts);
    pk.pack_array(a.events_per_batch);
    Batch batch;
    for (uint32_t e = 0; e < a.events_per_batch; ++e, ++c) {
      const Prompt prompt = MakePrompt(a, p, c);
      const uint32_t first = announced.insert(prompt.group).second ? 0 : a.shared_blocks;
      PackStored(pk, a, prompt, first);
      batch.blocks += a.blocks_per_event - first;
    }
    pk.pack_uint32(0);  // data_parallel_rank
    batch.bytes.assign(buf.data(), buf.size());
    batch.prompts_end = c;
    blocks += batch.blocks;
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::unique_ptr<httplib::Client> Http(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  auto c =
      std::make_unique<httplib::Client>(addr.substr(0, colon), std::atoi(addr.c_str() + colon + 1));
  c->set_tcp_nodelay(true);
  c->set_keep_alive(true);
  return c;
}

struct Publisher {
  int index = 0;
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;
  std::vector<Batch> batches;
  std::atomic<int64_t> applied_seq{-1};  // batches_applied - 1 (or last_seq), /v1/streams
  std::atomic<uint64_t> sent{0};
  uint64_t blocks_sent = 0;
  bool subscribed = false;
};

// Sums of the /v1/streams counters over the bench's streams.
struct Totals {
  double at = 0;  // seconds since start
  uint64_t block_events = 0, batches = 0, batches_applied = 0, gaps = 0, lost = 0, replays = 0,
           restarts = 0, skipped = 0, failures = 0;
  int streams = 0;
};

class Bench {
 public:
  explicit Bench(Args a) : a_(std::move(a)), http_(Http(a_.http)), t0_(Clock::now()) {}

  int Run() {
    if (!Setup()) return 1;
    Totals start = Poll(), end;
    if (!paced_) std::printf("GET /v1/streams unavailable: publishing unpaced (HWM %d)\n", a_.hwm);
    const double cpu0 = a_.server_pid ? CpuSeconds(a_.server_pid) : 0;
    std::vector<std::thread> threads;
    for (auto& p : pubs_) {
      threads.emplace_back([this, &p] {
        // --publisher-nice: publishers that yield the CPU, as engines on other machines
        // would, so that the server's own capacity shows.
        if (a_.publisher_nice != 0) {
          setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), a_.publisher_nice);
        }
        Publish(*p);
      });
    }
    std::thread pacer([this] {
      while (!stop_.load()) {
        Poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    std::vector<double> latency;
    uint64_t lookups_failed = 0, full_hits = 0;
    Lookups(latency, lookups_failed, full_hits);  // runs for --seconds, then sets stop_
    for (auto& t : threads) t.join();
    pacer.join();
    end = Poll();
    const double cpu1 = a_.server_pid ? CpuSeconds(a_.server_pid) : 0;
    const double window = end.at - start.at;
    uint64_t sent = 0, sent_blocks = 0;
    for (auto& p : pubs_) sent += p->sent.load(), sent_blocks += p->blocks_sent;
    // Drain: wait until the server applied every sent batch (or makes no progress for 5 s).
    Totals drained = end;
    for (auto progress = Clock::now(); paced_ && !CaughtUp();) {
      if (Clock::now() - progress > std::chrono::seconds(5)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const uint64_t before = drained.batches_applied;
      drained = Poll();
      if (drained.batches_applied != before) progress = Clock::now();
    }
    const double cpu2 = a_.server_pid ? CpuSeconds(a_.server_pid) : 0;
    Report(start, end, drained, window, sent, sent_blocks, cpu1 - cpu0, cpu2 - cpu0, latency,
           lookups_failed, full_hits);
    return 0;
  }

 private:
  double Now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  bool Setup() {
    const uint64_t per_pub = a_.max_blocks / static_cast<uint64_t>(a_.publishers);
    std::vector<std::thread> gen;
    for (int i = 0; i < a_.publishers; ++i) pubs_.push_back(std::make_unique<Publisher>());
    const auto g0 = Clock::now();
    for (int t = 0; t < 2; ++t) {
      gen.emplace_back([this, t, per_pub] {
        for (int i = t; i < a_.publishers; i += 2) pubs_[i]->batches = MakeBatches(a_, i, per_pub);
      });
    }
    for (auto& t : gen) t.join();
    uint64_t bytes = 0, batches = 0;
    for (auto& p : pubs_) {
      batches += p->batches.size();
      for (auto& b : p->batches) bytes += b.bytes.size();
    }
    std::printf("packed %llu batches (%.0f MB) in %.1f s\n",
                static_cast<unsigned long long>(batches), static_cast<double>(bytes) / 1e6,
                std::chrono::duration<double>(Clock::now() - g0).count());
    for (int i = 0; i < a_.publishers; ++i) {
      Publisher& p = *pubs_[i];
      p.index = i;
      p.socket = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::xpub);
      p.socket->set(zmq::sockopt::sndhwm, a_.hwm);
      p.socket->set(zmq::sockopt::linger, 0);
      p.socket->set(zmq::sockopt::rcvtimeo, 10000);
      p.socket->bind("tcp://127.0.0.1:0");
      p.endpoint = p.socket->get(zmq::sockopt::last_endpoint);
      by_endpoint_[p.endpoint] = &p;
      Json body = {{"endpoint", p.endpoint},      {"type", "vLLM"},
                   {"modelname", a_.model},       {"instance_id", Instance(i)},
                   {"block_size", a_.block_size}, {"dp_rank", 0}};
      if (!a_.report_mode.empty()) body["report_mode"] = a_.report_mode;
      auto res = http_->Post("/register", body.dump(), "application/json");
      if (!res || res->status / 100 != 2) {
        std::fprintf(stderr, "POST /register failed: %s %s\n",
                     res ? std::to_string(res->status).c_str() : "no connection",
                     res ? res->body.c_str() : "");
        return false;
      }
    }
    // Wait for every server SUB to subscribe (an XPUB sees the subscription message).
    for (auto& p : pubs_) {
      zmq::message_t msg;
      p->subscribed = p->socket->recv(msg).has_value() && msg.size() > 0 &&
                      static_cast<const uint8_t*>(msg.data())[0] == 1;
      if (!p->subscribed)
        std::fprintf(stderr, "%s: no subscriber after 10 s\n", p->endpoint.c_str());
    }
    auto res = http_->Get("/v1/streams");
    paced_ = res && res->status == 200;
    return true;
  }

  bool CaughtUp() const {
    for (const auto& p : pubs_) {
      if (p->applied_seq.load() + 1 < static_cast<int64_t>(p->sent.load())) return false;
    }
    return true;
  }

  std::string Instance(int i) const { return "bench-" + std::to_string(i); }

  void Publish(Publisher& p) {
    uint64_t seq = 0;
    const auto start = Clock::now();
    const double per_publisher = a_.rate / static_cast<double>(a_.publishers);
    while (!stop_.load(std::memory_order_relaxed)) {
      if (paced_ && static_cast<int64_t>(seq) - p.applied_seq.load() > a_.max_lag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (per_publisher > 0) {  // --rate: batch k is due when its blocks are
        const double due = static_cast<double>(p.blocks_sent) / per_publisher;
        const double ahead = due - std::chrono::duration<double>(Clock::now() - start).count();
        if (ahead > 0) {
          std::this_thread::sleep_for(std::chrono::duration<double>(std::min(ahead, 0.05)));
          continue;
        }
      }
      const Batch& b = p.batches[seq % p.batches.size()];
      uint8_t seq_be[8];
      for (int i = 0; i < 8; ++i) seq_be[i] = static_cast<uint8_t>(seq >> (56 - 8 * i));
      p.socket->send(zmq::const_buffer("", 0), zmq::send_flags::sndmore);
      p.socket->send(zmq::const_buffer(seq_be, 8), zmq::send_flags::sndmore);
      p.socket->send(zmq::message_t(const_cast<char*>(b.bytes.data()), b.bytes.size(), nullptr),
                     zmq::send_flags::none);
      p.blocks_sent += b.blocks;
      p.sent.store(++seq);
    }
  }

  // Polls GET /v1/streams: updates each publisher's applied seq and returns the sums.
  Totals Poll() {
    Totals t;
    t.at = Now();
    auto res = poll_http_->Get("/v1/streams");
    if (!res || res->status != 200) return t;
    Json j = Json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j["streams"].is_array()) return t;
    for (const Json& s : j["streams"]) {
      const std::string ep = s.value("endpoint", "");
      auto it = by_endpoint_.find(ep);
      if (it == by_endpoint_.end()) continue;
      ++t.streams;
      if (s.contains("batches_applied")) {
        it->second->applied_seq.store(static_cast<int64_t>(s.value("batches_applied", 0)) - 1);
      } else if (s.contains("last_seq") && s["last_seq"].is_number()) {  // older servers
        it->second->applied_seq.store(s["last_seq"].get<int64_t>());
      }
      t.block_events += s.value("block_events", uint64_t{0});
      t.batches += s.value("batches", uint64_t{0});
      t.batches_applied += s.value("batches_applied", uint64_t{0});
      t.gaps += s.value("gaps", uint64_t{0});
      t.lost += s.value("lost_batches", uint64_t{0});
      t.skipped += s.value("skipped_events", uint64_t{0});
      t.failures +=
          s.value("decode_failures", uint64_t{0}) + s.value("apply_failures", uint64_t{0});
      t.replays += s.value("replays", uint64_t{0});
      t.restarts += s.value("restarts", uint64_t{0});
    }
    return t;
  }

  // Open loop at --lookup-rate: request i is due at t0 + i/rate and its latency counts from
  // then (no coordinated omission). Each asks one publisher's instance for a whole prompt the
  // server has applied (a "full-prompt hit" when it reports all of its tokens).
  void Lookups(std::vector<double>& latency, uint64_t& failed, uint64_t& full_hits) {
    kvatlas::SetCurrentThreadName("lookups");
    auto rest = Http(a_.http);
    std::unique_ptr<kvatlas::Client> client;
    if (!a_.rpc.empty()) {
      kvatlas::ClientOptions options;
      options.endpoints = {a_.rpc};
      auto connected = kvatlas::Client::Connect(options);
      if (!connected.has_value()) {
        std::fprintf(stderr, "--rpc %s: %s\n", a_.rpc.c_str(),
                     connected.error().ToString().c_str());
        stop_.store(true);
        return;
      }
      client = std::move(*connected);
    }
    // --local-index: the router embeds a replica of the map that follows the server's change
    // feed (docs/feed.md §LocalIndex) and looks up in process, without a round trip.
    std::unique_ptr<kvatlas::LocalIndex> local;
    if (a_.local_index) {
      kvatlas::LocalIndexOptions options;
      options.client.endpoints = {a_.rpc};
      options.contexts = {kvatlas::ContextKey{"default", a_.model, "", a_.block_size, ""}};
      auto started = kvatlas::LocalIndex::Start(options);
      if (!started.has_value() || !(*started)->WaitSynced(std::chrono::seconds(10)).ok()) {
        std::fprintf(stderr, "--local-index: the replica did not sync\n");
        stop_.store(true);
        return;
      }
      local = std::move(*started);
    }
    std::mt19937_64 rng(42);
    const auto start = Clock::now();
    const auto stop_at = start + std::chrono::duration<double>(a_.seconds);
    const uint32_t tokens = a_.blocks_per_event * a_.block_size;
    for (uint64_t i = 0;; ++i) {
      const auto due =
          start + std::chrono::duration<double>(static_cast<double>(i) / a_.lookup_rate);
      if (due >= stop_at || Clock::now() >= stop_at) break;  // a slow server ends it on time
      Publisher& p = *pubs_[rng() % pubs_.size()];
      const int64_t applied =
          paced_ ? p.applied_seq.load() : static_cast<int64_t>(p.sent.load()) - 1;
      if (applied < 0) {  // nothing applied yet: skip this slot
        std::this_thread::sleep_until(due);
        continue;
      }
      const uint64_t known = applied >= static_cast<int64_t>(p.batches.size())
                                 ? p.batches.back().prompts_end
                                 : p.batches[applied].prompts_end;
      const Prompt prompt = MakePrompt(a_, p.index, rng() % known);
      if (client) {
        kvatlas::LookupRequest request;
        request.context = kvatlas::ContextKey{"default", a_.model, "", a_.block_size, ""};
        request.token_ids = prompt.tokens;
        request.instance_id = Instance(p.index);
        std::this_thread::sleep_until(due);
        const kvatlas::Result<kvatlas::LookupAnswer> answer =
            local ? local->Lookup(request) : client->Lookup(std::move(request));
        latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - due).count());
        if (!answer.has_value()) {
          ++failed;
          continue;
        }
        if (!answer->instances.empty() &&
            answer->instances[0].blocks.disk * a_.block_size == tokens) {
          ++full_hits;
        }
        continue;
      }
      const Json body = {{"model", a_.model},
                         {"block_size", a_.block_size},
                         {"instance_id", Instance(p.index)},
                         {"token_ids", prompt.tokens}};
      const std::string text = body.dump();  // built before it is due: not timed
      std::this_thread::sleep_until(due);
      auto res = rest->Post("/query", text, "application/json");
      latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - due).count());
      if (!res || res->status != 200) {
        ++failed;
        continue;
      }
      const Json j = Json::parse(res->body, nullptr, false);
      const Json* inst = j.is_object() && j.contains("default") && j["default"].is_object() &&
                                 j["default"].contains(Instance(p.index))
                             ? &j["default"][Instance(p.index)]
                             : nullptr;
      if (inst && inst->value("longest_matched", 0u) == tokens) ++full_hits;
    }
    stop_.store(true);
  }

  void Report(const Totals& s, const Totals& e, const Totals& d, double window, uint64_t sent,
              uint64_t sent_blocks, double cpu_window, double cpu_drain,
              const std::vector<double>& latency, uint64_t failed, uint64_t hits) {
    auto per_s = [](uint64_t n, double secs) {
      return secs > 0 ? static_cast<double>(n) / secs : 0;
    };
    std::printf(
        "\n%d publishers x %u events/batch x %u blocks, %.1f s, max lag %lld batches, rate "
        "%s%s, publishers at nice %d\n",
        a_.publishers, a_.events_per_batch, a_.blocks_per_event, window,
        static_cast<long long>(a_.max_lag),
        a_.rate > 0 ? std::to_string(static_cast<uint64_t>(a_.rate)).c_str() : "max",
        paced_ ? "" : " (unpaced)", a_.publisher_nice);
    std::printf("%-34s %14s %14s\n", "", "count", "per second");
    std::printf("%-34s %14llu %14.0f\n", "batches sent", static_cast<unsigned long long>(sent),
                per_s(sent, window));
    std::printf("%-34s %14llu %14.0f\n", "block events sent",
                static_cast<unsigned long long>(sent_blocks), per_s(sent_blocks, window));
    std::printf("%-34s %14llu %14.0f\n", "batches received (window)",
                static_cast<unsigned long long>(e.batches - s.batches),
                per_s(e.batches - s.batches, window));
    std::printf("%-34s %14llu %14.0f\n", "block events applied (window)",
                static_cast<unsigned long long>(e.block_events - s.block_events),
                per_s(e.block_events - s.block_events, window));
    const double drain = d.at - e.at;
    std::printf("%-34s %14llu %14.0f   (+%.2f s drain)\n", "block events applied (all)",
                static_cast<unsigned long long>(d.block_events - s.block_events),
                per_s(d.block_events - s.block_events, d.at - s.at), drain);
    std::printf("%-34s %14llu%s\n", "batches applied (all)",
                static_cast<unsigned long long>(d.batches_applied - s.batches_applied),
                CaughtUp() ? "" : "   (NOT drained: the server stopped applying for 5 s)");
    std::printf(
        "streams %d/%d: gaps %llu, lost batches %llu, replays %llu, restarts %llu, skipped "
        "events %llu, decode/apply failures %llu\n",
        d.streams, a_.publishers, static_cast<unsigned long long>(d.gaps - s.gaps),
        static_cast<unsigned long long>(d.lost - s.lost),
        static_cast<unsigned long long>(d.replays - s.replays),
        static_cast<unsigned long long>(d.restarts - s.restarts),
        static_cast<unsigned long long>(d.skipped - s.skipped),
        static_cast<unsigned long long>(d.failures - s.failures));
    std::printf(
        "lookups (%s, %.0f/s open loop): p50 %.0f us, p99 %.0f us, p999 %.0f us, "
        "%zu done, %llu failed, %.1f%% full-prompt hits\n",
        a_.local_index   ? "kvatlas::LocalIndex, in process"
        : a_.rpc.empty() ? "POST /query"
                         : "binary, kvatlas::Client",
        a_.lookup_rate, Pct(latency, 0.5), Pct(latency, 0.99), Pct(latency, 0.999), latency.size(),
        static_cast<unsigned long long>(failed),
        latency.empty() ? 0.0
                        : 100.0 * static_cast<double>(hits) / static_cast<double>(latency.size()));
    if (a_.server_pid) {
      std::printf("server CPU: %.0f%% of one core during the window, %.0f%% incl. drain\n",
                  100 * cpu_window / window, 100 * cpu_drain / (d.at - s.at));
    }
    std::printf("bench process CPU: %.0f%% of one core overall\n",
                100 * CpuSeconds(getpid()) / Now());
    PrintWriteLock(d.at - s.at);
  }

  // The index's write lock, which lookups wait for, from the server's /metrics (totals
  // since start: the run is nearly all of the server's life).
  void PrintWriteLock(double seconds) {
    auto res = poll_http_->Get("/metrics");
    if (!res || res->status != 200) return;
    auto value = [&](const std::string& name) {
      const size_t at = res->body.find("\n" + name + " ");
      return at == std::string::npos ? -1.0 : std::atof(res->body.c_str() + at + name.size() + 2);
    };
    const double holds = value("kvatlas_index_write_lock_holds_total{duration=\"all\"}");
    const double over = value("kvatlas_index_write_lock_holds_total{duration=\"over_1ms\"}");
    const double held = value("kvatlas_index_write_lock_held_seconds_total");
    const double max = value("kvatlas_index_write_lock_hold_max_seconds");
    if (holds < 0 || over < 0 || held < 0 || max < 0) return;
    std::printf(
        "index write lock: %.0f holds, %.0f over 1 ms (%.2f%%), held %.1f%% of the time, "
        "longest %.1f ms\n",
        holds, over, holds > 0 ? 100 * over / holds : 0.0, 100 * held / seconds, 1e3 * max);
  }

  Args a_;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<httplib::Client> poll_http_ = Http(a_.http);
  Clock::time_point t0_;
  zmq::context_t ctx_{1};
  std::vector<std::unique_ptr<Publisher>> pubs_;
  std::map<std::string, Publisher*> by_endpoint_;
  std::atomic<bool> stop_{false};
  bool paced_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--http")
      a.http = v;
    else if (k == "--server-pid")
      a.server_pid = std::atol(v.c_str());
    else if (k == "--publishers")
      a.publishers = std::max(1, std::atoi(v.c_str()));
    else if (k == "--seconds")
      a.seconds = std::atof(v.c_str());
    else if (k == "--blocks-per-event")
      a.blocks_per_event = std::max(1, std::atoi(v.c_str()));
    else if (k == "--events-per-batch")
      a.events_per_batch = std::max(1, std::atoi(v.c_str()));
    else if (k == "--shared-blocks")
      a.shared_blocks = std::atoi(v.c_str());
    else if (k == "--prefix-groups")
      a.prefix_groups = std::max(1, std::atoi(v.c_str()));
    else if (k == "--max-blocks")
      a.max_blocks = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--rate")
      a.rate = std::atof(v.c_str());
    else if (k == "--max-lag")
      a.max_lag = std::atoll(v.c_str());
    else if (k == "--hwm")
      a.hwm = std::atoi(v.c_str());
    else if (k == "--lookup-rate")
      a.lookup_rate = std::max(1.0, std::atof(v.c_str()));
    else if (k == "--rpc")
      a.rpc = v;
    else if (k == "--local-index")
      a.local_index = v != "0";
    else if (k == "--publisher-nice")
      a.publisher_nice = std::atoi(v.c_str());
    else if (k == "--model")
      a.model = v;
    else if (k == "--report-mode")
      a.report_mode = v;
    else if (k == "--dump-batch")
      a.dump_batch = v;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  a.shared_blocks = std::min(a.shared_blocks, a.blocks_per_event - 1);
  if (!a.dump_batch.empty()) {
    const std::vector<Batch> batches = MakeBatches(a, 0, 1);
    std::ofstream(a.dump_batch, std::ios::binary) << batches[0].bytes;
    return 0;
  }
  if (a.http.empty() || (a.local_index && a.rpc.empty())) {
    std::fprintf(
        stderr,
        "usage: ingest_zmq_bench --http HOST:PORT [--server-pid PID] [--publishers 16]\n"
        "  [--seconds 10] [--blocks-per-event 32] [--events-per-batch 4]\n"
        "  [--shared-blocks 8] [--prefix-groups 64] [--max-blocks 6000000]\n"
        "  [--max-lag 256] [--rate BLOCKS_PER_S] [--hwm 100000] [--lookup-rate 1000]\n"
        "  [--model NAME] [--rpc HOST:PORT (binary lookups)] [--local-index 1 (with --rpc)]\n"
        "  [--publisher-nice N] [--report-mode full]\n"
        "  [--dump-batch FILE]\n");
    return 2;
  }
  return Bench(std::move(a)).Run();
}
