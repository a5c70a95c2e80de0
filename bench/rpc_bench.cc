// Binary-protocol benchmark against a running kvatlas server (scripts/bench/rpc starts
// one): ingest throughput through kvatlas::Client with batching, then 128-block lookup
// latency at fixed open-loop request rates and at saturation, and the same lookups over
// REST, with the server's CPU time per lookup for each. Each lookup latency phase (sequential,
// then each rate) is preceded by the same measurement of a loopback TCP echo in this process
// with the lookup frames' sizes — the floor this machine puts under any request/reply over
// loopback — and the lookup p50 and p99 are reported as multiples of it, next to the
// targets (p50 <= 1.5x, p99 <= 2x the floor; server CPU <= 8 us per lookup). Prints
// figures; asserts nothing.
//   rpc_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID [--entries N]
//             [--rates 2000,5000,20000] [--seconds S]
// With --tls-rpc HOST:PORT --tls-pid PID --ca FILE (scripts/bench/rpc --tls) it compares
// transports instead: the same ingest, sequential lookups and saturation against the server
// at --rpc in plaintext and the one at --tls-rpc over TLS (same settings, own data), one
// after the other, and prints TLS / plain ratios; with --tls-token-rpc HOST:PORT
// --tls-token-pid PID --token T also a TLS server with access control on, reached with a token.
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "kvatlas/client/client.h"
#include "kvatlas/common/protocol.h"

namespace {

using kvatlas::bench::CpuSeconds;
using kvatlas::bench::Mix;
using kvatlas::bench::Pct;
using kvatlas::bench::RunOpenLoop;
using kvatlas::bench::SleepUntil;

using Clock = std::chrono::steady_clock;
using kvatlas::BlockEvent;
using kvatlas::LookupRequest;

constexpr uint32_t kChain = 128;
constexpr uint32_t kHolders = 1000;

struct Args {
  std::string rpc, http;
  long server_pid = 0;
  std::string tls_rpc, ca;
  long tls_pid = 0;
  std::string tls_token_rpc, token;  // a TLS server with access control, and the token
  long tls_token_pid = 0;
  uint64_t entries = 1'000'000;
  std::vector<uint64_t> rates{2000, 5000, 20000};
  double seconds = 3;
  bool memory = false;  // ingest, then print the server's RSS against its index; no lookups
};

std::vector<uint64_t> ChainKeys(uint64_t c) {
  std::vector<uint64_t> keys(kChain);
  for (uint32_t i = 0; i < kChain; ++i) keys[i] = Mix(c * kChain + i);
  return keys;
}

kvatlas::ContextKey Context() { return kvatlas::ContextKey{"default", "bench", "", 16, ""}; }

LookupRequest Lookup(uint64_t c) {
  LookupRequest r;
  r.context = Context();
  r.by_hash = true;
  r.seq_hashes = ChainKeys(c);
  return r;
}

// This process's CPU seconds (user + system, all threads): the client library's cost.
double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Returns the throughput in block events per second.
double Ingest(kvatlas::Client& client, uint64_t chains) {
  constexpr uint64_t kPerBatch = 64;
  // The batches are built before the clock starts: generating test data is not the client's
  // or the server's work, and on a 2-core machine it would take CPU from both.
  std::vector<std::vector<BlockEvent>> batches;
  for (uint64_t c = 0; c < chains; c += kPerBatch) {
    std::vector<BlockEvent> events;
    for (uint64_t i = c; i < std::min(chains, c + kPerBatch); ++i) {
      BlockEvent e;
      e.type = kvatlas::EventType::kStored;
      e.context = Context();
      e.holder = kvatlas::HolderKey{"instance-" + std::to_string(i % kHolders), 0};
      e.seq_hashes = ChainKeys(i);
      events.push_back(std::move(e));
    }
    batches.push_back(std::move(events));
  }
  const auto t0 = Clock::now();
  std::deque<std::future<kvatlas::Result<kvatlas::IngestAnswer>>> inflight;
  for (std::vector<BlockEvent>& events : batches) {
    inflight.push_back(client.IngestAsync(std::move(events), std::chrono::seconds(60)));
    while (inflight.size() > 8) {
      auto r = inflight.front().get();
      inflight.pop_front();
      if (!r.has_value()) std::fprintf(stderr, "ingest: %s\n", r.error().ToString().c_str());
    }
  }
  for (auto& f : inflight) (void)f.get();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "binary ingest: %llu block events (64 events x 128 blocks per call, 8 in "
      "flight) in %.2f s = %.0f k block events/s\n",
      static_cast<unsigned long long>(chains * kChain), s,
      static_cast<double>(chains * kChain) / s / 1e3);
  return static_cast<double>(chains * kChain) / s;
}

void WaitForQuietServer(long pid) {
  std::printf("(server quiet %.1f s after the ingest)\n", kvatlas::bench::WaitForQuietServer(pid));
}

// Open loop: request i is due at t0 + i/rate; latency counts from when it was due, so a
// stalled server (or a late sender) is charged for the requests it delayed (no coordinated
// omission). The sender sleeps to absolute deadlines and sends every request already due
// when it wakes; nothing spins. Returns the p99 in microseconds.
struct Percentiles {
  double p50 = 0, p99 = 0;  // microseconds
};

// Prints one open-loop phase's line and returns its p50 and p99 (µs): "<what> at R req/s:
// p50 ... p99 ... p999 ... (N requests, E errors; <cpu>)".
Percentiles PrintOpenLoop(const char* what, uint64_t rate, const std::vector<double>& latency,
                          uint64_t errors, const char* cpu) {
  std::printf(
      "%s at %6llu req/s: p50 %7.1f us  p99 %7.1f us  p999 %7.1f us  (%zu requests, %llu "
      "errors; %s)\n",
      what, static_cast<unsigned long long>(rate), Pct(latency, 0.5), Pct(latency, 0.99),
      Pct(latency, 0.999), latency.size(), static_cast<unsigned long long>(errors), cpu);
  return {Pct(latency, 0.5), Pct(latency, 0.99)};
}

Percentiles OpenLoop(kvatlas::Client& client, uint64_t chains, uint64_t rate, double seconds,
                     long pid) {
  const uint64_t n = static_cast<uint64_t>(static_cast<double>(rate) * seconds);
  std::vector<double> latency(n);
  std::mt19937_64 rng(rate);
  std::vector<LookupRequest> requests;
  for (int i = 0; i < 4096; ++i) requests.push_back(Lookup(rng() % chains));
  const double server_cpu0 = CpuSeconds(pid);
  const double client_cpu0 = SelfCpuSeconds();
  uint64_t errors = 0;
  RunOpenLoop(
      n, static_cast<double>(rate), Clock::now() + std::chrono::milliseconds(10),
      [&](uint64_t i) {
        return client.LookupAsync(requests[i % requests.size()], std::chrono::seconds(5));
      },
      [&](uint64_t i, kvatlas::Result<kvatlas::LookupAnswer> r, Clock::time_point due) {
        latency[i] = std::chrono::duration<double, std::micro>(Clock::now() - due).count();
        errors += r.has_value() ? 0 : 1;
      });
  const double server_cpu_us = (CpuSeconds(pid) - server_cpu0) / static_cast<double>(n) * 1e6;
  const double client_cpu_us = (SelfCpuSeconds() - client_cpu0) / static_cast<double>(n) * 1e6;
  char cpu[96];
  std::snprintf(cpu, sizeof(cpu), "CPU/request server %.1f us, client %.1f us", server_cpu_us,
                client_cpu_us);
  return PrintOpenLoop("binary lookup", rate, latency, errors, cpu);
}

struct Saturation {
  double lookups_per_s = 0;
  double server_cpu_us = 0;  // per lookup
};

// Closed loop with `depth` calls in flight: throughput and server CPU per lookup.
Saturation BinarySaturation(kvatlas::Client& client, uint64_t chains, long pid) {
  constexpr int kDepth = 64;
  constexpr uint64_t kCount = 100000;
  std::mt19937_64 rng(1);
  std::deque<std::future<kvatlas::Result<kvatlas::LookupAnswer>>> inflight;
  const double cpu0 = CpuSeconds(pid);
  const double client_cpu0 = SelfCpuSeconds();
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    inflight.push_back(client.LookupAsync(Lookup(rng() % chains), std::chrono::seconds(5)));
    if (inflight.size() >= kDepth) {
      (void)inflight.front().get();
      inflight.pop_front();
    }
  }
  for (auto& f : inflight) (void)f.get();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_us = (CpuSeconds(pid) - cpu0) / kCount * 1e6;
  const double client_cpu_us = (SelfCpuSeconds() - client_cpu0) / kCount * 1e6;
  std::printf(
      "binary lookup saturation (%d in flight, 1 connection): %.0f k lookups/s, "
      "server CPU %.1f us/lookup, client CPU %.1f us/lookup\n",
      kDepth, static_cast<double>(kCount) / s / 1e3, cpu_us, client_cpu_us);
  return {static_cast<double>(kCount) / s, cpu_us};
}

// The number after `"key":` following `after` in `json`, or 0.
uint64_t JsonNumber(const std::string& json, std::string_view after, std::string_view key) {
  size_t at = json.find(after);
  if (at == std::string::npos) return 0;
  at = json.find(std::string("\"") + std::string(key) + "\":", at);
  if (at == std::string::npos) return 0;
  return std::strtoull(json.c_str() + at + key.size() + 3, nullptr, 10);
}

uint64_t VmRssKib(long pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  uint64_t rss_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) rss_kib = std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return rss_kib;
}

// The server's resident set (VmRSS) against its index's own accounting (GET /v1/stats),
// after an ingest: what docs/operations.md §Sizing is made of. Twice: once the server is
// quiet, and settled, 65 s later: the server gives malloc's free memory back to the system
// at most once a minute (its malloc-trim thread), and a snapshot the ingest brought due may
// still be writing at the first.
int PrintServerMemory(const std::string& http, long pid) {
  const size_t colon = http.rfind(':');
  httplib::Client rest(http.substr(0, colon), std::atoi(http.c_str() + colon + 1));
  const auto stats = rest.Get("/v1/stats");
  if (!stats || stats->status != 200) {
    std::fprintf(stderr, "GET /v1/stats failed\n");
    return 1;
  }
  const uint64_t entries = JsonNumber(stats->body, "\"index\"", "entries");
  const uint64_t index_bytes = JsonNumber(stats->body, "\"index\"", "memory_bytes");
  if (entries == 0 || index_bytes == 0 || VmRssKib(pid) == 0) {
    std::fprintf(stderr, "no entries, index memory or VmRSS to report\n");
    return 1;
  }
  const double n = static_cast<double>(entries);
  const double index = static_cast<double>(index_bytes);
  std::printf("server memory: %llu entries; index %.1f B/entry (%.0f MB)\n",
              static_cast<unsigned long long>(entries), index / n, index / 1e6);
  const auto print_rss = [&](const char* when) {
    const double rss = static_cast<double>(VmRssKib(pid)) * 1024;
    std::printf("  %-8s RSS %.1f B/entry (%.0f MB); RSS / index %.3f; outside the index %.0f MB\n",
                when, rss / n, rss / 1e6, rss / index, (rss - index) / 1e6);
    std::fflush(stdout);
  };
  print_rss("quiet:");
  std::this_thread::sleep_for(std::chrono::seconds(65));
  print_rss("settled:");
  return 0;
}

double RestLookups(const std::string& http, uint64_t chains, long pid) {
  const size_t colon = http.rfind(':');
  httplib::Client rest(http.substr(0, colon), std::atoi(http.c_str() + colon + 1));
  rest.set_tcp_nodelay(true);
  rest.set_keep_alive(true);
  constexpr uint64_t kCount = 20000;
  std::mt19937_64 rng(2);
  std::vector<std::string> bodies;
  for (int i = 0; i < 1024; ++i) {
    std::string body = R"({"model_name":"bench","block_size":16,"seq_hashes":[)";
    for (uint64_t k : ChainKeys(rng() % chains)) body += std::to_string(k) + ",";
    body.back() = ']';
    body += "}";
    bodies.push_back(std::move(body));
  }
  std::vector<double> latency;
  const double cpu0 = CpuSeconds(pid);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < kCount; ++i) {
    const auto a = Clock::now();
    auto res = rest.Post("/v1/lookup", bodies[i % bodies.size()], "application/json");
    latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    if (!res || res->status != 200) {
      std::fprintf(stderr, "REST lookup failed\n");
      return 0;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_us = (CpuSeconds(pid) - cpu0) / kCount * 1e6;
  std::printf(
      "REST lookup (1 client, sequential): p50 %.1f us, p99 %.1f us, %.1f k/s, "
      "server CPU %.1f us/lookup\n",
      Pct(latency, 0.5), Pct(latency, 0.99), static_cast<double>(kCount) / s / 1e3, cpu_us);
  return cpu_us;
}

Percentiles BinarySequential(kvatlas::Client& client, uint64_t chains) {
  std::mt19937_64 rng(3);
  std::vector<double> latency;
  for (int i = 0; i < 20000; ++i) {
    const LookupRequest r = Lookup(rng() % chains);
    const auto a = Clock::now();
    (void)client.Lookup(r);
    latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  std::printf("binary lookup (1 client, sequential): p50 %.1f us, p99 %.1f us\n", Pct(latency, 0.5),
              Pct(latency, 0.99));
  return {Pct(latency, 0.5), Pct(latency, 0.99)};
}

// ---------------------------------------------------------------------------------------
// Transports compared (--tls-rpc): each is a server and the client options that reach it.
// Another connection setting (a different cipher, say) is one more entry.
struct Transport {
  std::string name;
  kvatlas::ClientOptions options;
  long pid = 0;
};

struct Figures {
  double ingest_per_s = 0;
  Percentiles sequential;
  Saturation saturation;
};

// Ingest, then sequential lookups and saturation, through a new client of `transport`.
std::optional<Figures> Measure(const Transport& transport, uint64_t chains) {
  std::printf("== %s (%s) ==\n", transport.name.c_str(), transport.options.endpoints[0].c_str());
  auto client = kvatlas::Client::Connect(transport.options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return std::nullopt;
  }
  Figures figures;
  figures.ingest_per_s = Ingest(**client, chains);
  WaitForQuietServer(transport.pid);
  figures.sequential = BinarySequential(**client, chains);
  figures.saturation = BinarySaturation(**client, chains, transport.pid);
  return figures;
}

// Measures every transport one after another and prints each one's figures relative to the
// first (a ratio > 1 is more time or CPU, < 1 less throughput).
int CompareTransports(const std::vector<Transport>& transports, uint64_t chains) {
  std::vector<Figures> figures;
  for (const Transport& transport : transports) {
    std::optional<Figures> f = Measure(transport, chains);
    if (!f) return 1;
    figures.push_back(*f);
  }
  const Figures& base = figures[0];
  for (size_t i = 1; i < transports.size(); ++i) {
    const Figures& f = figures[i];
    std::printf(
        "%s / %s: ingest throughput %.2fx, sequential lookup p50 %.2fx, p99 %.2fx, "
        "saturation throughput %.2fx, server CPU per lookup %.2fx\n",
        transports[i].name.c_str(), transports[0].name.c_str(), f.ingest_per_s / base.ingest_per_s,
        f.sequential.p50 / base.sequential.p50, f.sequential.p99 / base.sequential.p99,
        f.saturation.lookups_per_s / base.saturation.lookups_per_s,
        f.saturation.server_cpu_us / base.saturation.server_cpu_us);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------
// The loopback floor. On a small VM the latency of any request/reply over loopback TCP —
// syscalls, the kernel's TCP path and above all the wake-ups of the threads a request passes
// through — is a large part of a lookup's latency, and its tail can exceed a latency target on
// its own. An echo with the lookup frames' sizes and the same threads, measured in the same
// run just before the lookups, shows how much of the lookups' latency kvatlas adds at all.

// Blocking send of exactly `size` bytes; false on an error.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Blocking recv of what has arrived, up to `size` bytes; 0 on EOF or an error.
size_t ReadSome(int fd, char* data, size_t size) {
  for (;;) {
    const ssize_t n = recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    return n > 0 ? static_cast<size_t>(n) : 0;
  }
}

// Read buffers of the echo's two reading threads: one recv() takes every frame that has
// arrived, as the server's and the client library's readers do.
constexpr size_t kEchoReadBytes = 64 << 10;

// An echo server thread on 127.0.0.1 (port 0) that answers every `request_bytes` it reads
// with `reply_bytes`, and one client connection to it; TCP_NODELAY on both ends, as the
// kvatlas client and server set it. A request passes through the same threads as a binary
// lookup's: the caller (or the open-loop sender) writes it itself, as the client library's
// fast path does; the server thread reads it and answers, as the server's RPC I/O thread
// does; a receiver thread reads the reply and completes a promise, as the client's I/O
// thread does; the caller wakes on the future. Both readers take everything that has arrived
// in one recv() and the server answers all complete requests in it with one send(), as the
// server's connection coalesces its answers: answering one request per system call would
// cost more per request than the lookups at high rates, and the floor would be none. What
// the floor leaves out: the server being another process (its wake-ups switch address
// spaces), epoll (the floor blocks in recv), frame coding and the lookup itself.
class EchoFloor {
 public:
  EchoFloor(size_t request_bytes, size_t reply_bytes)
      : request_(request_bytes, 'q'), reply_bytes_(reply_bytes) {
    const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t addr_len = sizeof addr;
    auto* sa = reinterpret_cast<sockaddr*>(&addr);
    const bool listening = listener >= 0 && bind(listener, sa, sizeof addr) == 0 &&
                           listen(listener, 1) == 0 && getsockname(listener, sa, &addr_len) == 0;
    const int client = listening ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
    // connect() completes from the listen backlog, so one thread can make both ends.
    const bool connected = client >= 0 && connect(client, sa, sizeof addr) == 0;
    const int server = connected ? accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
    if (server < 0) std::perror("echo floor: loopback connection");
    if (listener >= 0) close(listener);
    if (server < 0) {
      if (client >= 0) close(client);
      return;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    client_ = client;
    server_ = std::thread([server, request_bytes, reply_bytes] {
      // Only sizes matter: a request is `request_bytes` received, whatever they hold.
      std::string in(kEchoReadBytes, '\0');
      const std::string replies((kEchoReadBytes / request_bytes + 1) * reply_bytes, 'a');
      size_t partial = 0;  // bytes of a request not yet complete
      for (size_t n; (n = ReadSome(server, in.data(), in.size())) > 0;) {
        const size_t complete = (partial + n) / request_bytes;
        partial = (partial + n) % request_bytes;
        if (complete > 0 && !WriteAll(server, replies.data(), complete * reply_bytes)) break;
      }
      close(server);
    });
  }

  EchoFloor(const EchoFloor&) = delete;
  EchoFloor& operator=(const EchoFloor&) = delete;

  ~EchoFloor() {
    if (client_ < 0) return;
    shutdown(client_, SHUT_RDWR);  // the server thread reads EOF and ends
    server_.join();
    close(client_);
  }

  bool ok() const { return client_ >= 0; }

  void PrintNote() const {
    std::printf(
        "(echo floor: %zu-byte requests, %zu-byte replies (a 128-hash lookup frame, a real "
        "answer frame) over one loopback TCP connection to an echo thread in this process, "
        "blocking I/O, answers coalesced per read; per request the same 4 threads as a binary "
        "lookup: sender, server, receiver, waiting caller; without a second process, epoll, "
        "frame coding or the lookup)\n",
        request_.size(), reply_bytes_);
  }

  // `n` round trips one after another, as BinarySequential makes its lookups; prints p50 and
  // p99 and returns the p99 in microseconds.
  double Sequential(uint64_t n) {
    std::vector<std::promise<bool>> promises(n);
    std::vector<double> latency;
    uint64_t errors = 0;
    std::thread receiver = StartReceiver(&promises);
    for (uint64_t i = 0; i < n; ++i) {
      const auto a = Clock::now();
      errors += Send(promises[i]).get() ? 0 : 1;
      latency.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
    }
    receiver.join();
    std::printf("loopback echo floor (1 client, sequential): p50 %.1f us, p99 %.1f us%s\n",
                Pct(latency, 0.5), Pct(latency, 0.99), errors > 0 ? " (errors)" : "");
    return Pct(latency, 0.99);
  }

  // The open loop of the binary lookups (RunOpenLoop, latency from the due time) at `rate`;
  // prints p50, p99 and p999 and returns the p50 and p99 in microseconds.
  Percentiles OpenLoop(uint64_t rate, double seconds) {
    const uint64_t n = static_cast<uint64_t>(static_cast<double>(rate) * seconds);
    // Made before the clock starts; the client library makes one per call instead, on the
    // caller's thread (a small part of its CPU/request, which the binary line reports).
    std::vector<std::promise<bool>> promises(n);
    std::vector<double> latency(n);
    uint64_t errors = 0;
    const double cpu0 = SelfCpuSeconds();
    std::thread receiver = StartReceiver(&promises);
    RunOpenLoop(
        n, static_cast<double>(rate), Clock::now() + std::chrono::milliseconds(10),
        [&](uint64_t i) { return Send(promises[i]); },
        [&](uint64_t i, bool answered, Clock::time_point due) {
          latency[i] = std::chrono::duration<double, std::micro>(Clock::now() - due).count();
          errors += answered ? 0 : 1;
        });
    receiver.join();
    // Both ends' CPU: the echo server is this process's thread.
    const double cpu_us = (SelfCpuSeconds() - cpu0) / static_cast<double>(n) * 1e6;
    char cpu[64];
    std::snprintf(cpu, sizeof(cpu), "CPU/request both ends %.1f us", cpu_us);
    return PrintOpenLoop("loopback echo floor", rate, latency, errors, cpu);
  }

 private:
  // Writes one request; its reply completes `promise` (on the receiver thread).
  std::future<bool> Send(std::promise<bool>& promise) {
    std::future<bool> reply = promise.get_future();
    // A failed write would leave the receiver waiting for a reply that never comes; shutting
    // the socket down makes it fail every outstanding promise instead.
    if (!WriteAll(client_, request_.data(), request_.size())) shutdown(client_, SHUT_RDWR);
    return reply;
  }

  // A thread that reads one reply per promise, in order (the echo answers in order), and
  // completes each with whether its reply arrived. It reads no further than the last reply,
  // so that the next phase starts with an empty socket.
  std::thread StartReceiver(std::vector<std::promise<bool>>* promises) {
    return std::thread([this, promises] {
      std::string in(std::max(kEchoReadBytes, reply_bytes_), '\0');
      size_t next = 0;     // the promise the next complete reply completes
      size_t partial = 0;  // bytes of a reply not yet complete
      while (next < promises->size()) {
        const size_t left = (promises->size() - next) * reply_bytes_ - partial;
        const size_t n = ReadSome(client_, in.data(), std::min(in.size(), left));
        if (n == 0) break;
        const size_t complete = (partial + n) / reply_bytes_;
        partial = (partial + n) % reply_bytes_;
        for (size_t end = next + complete; next < end; ++next) (*promises)[next].set_value(true);
      }
      for (; next < promises->size(); ++next) (*promises)[next].set_value(false);
    });
  }

  std::string request_;
  size_t reply_bytes_;
  int client_ = -1;
  std::thread server_;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::vector<std::string> args;  // flag-value pairs; --memory is a lone flag
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--memory") {
      a.memory = true;
    } else {
      args.emplace_back(argv[i]);
    }
  }
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string &k = args[i], &v = args[i + 1];
    if (k == "--rpc")
      a.rpc = v;
    else if (k == "--http")
      a.http = v;
    else if (k == "--server-pid")
      a.server_pid = std::atol(v.c_str());
    else if (k == "--tls-rpc")
      a.tls_rpc = v;
    else if (k == "--tls-pid")
      a.tls_pid = std::atol(v.c_str());
    else if (k == "--tls-token-rpc")
      a.tls_token_rpc = v;
    else if (k == "--tls-token-pid")
      a.tls_token_pid = std::atol(v.c_str());
    else if (k == "--token")
      a.token = v;
    else if (k == "--ca")
      a.ca = v;
    else if (k == "--entries")
      a.entries = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--seconds")
      a.seconds = std::atof(v.c_str());
    else if (k == "--rates")
      a.rates = kvatlas::bench::ParseRates(v);
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (a.rpc.empty() || a.http.empty() || a.server_pid == 0) {
    std::fprintf(
        stderr,
        "usage: rpc_bench --rpc HOST:PORT --http HOST:PORT --server-pid PID "
        "[--entries N] [--memory] [--rates R1,R2] [--seconds S] [--tls-rpc HOST:PORT --tls-pid "
        "PID --ca FILE [--tls-token-rpc HOST:PORT --tls-token-pid PID --token T]]\n");
    return 2;
  }
  if (!a.tls_rpc.empty()) {
    Transport plain{"plain", {}, a.server_pid};
    plain.options.endpoints = {a.rpc};
    Transport tls{"tls", {}, a.tls_pid};
    tls.options.endpoints = {a.tls_rpc};
    tls.options.tls.enabled = true;
    tls.options.tls.ca_file = a.ca;
    std::vector<Transport> transports = {plain, tls};
    if (!a.tls_token_rpc.empty()) {
      Transport with_token{"tls+token", tls.options, a.tls_token_pid};
      with_token.options.endpoints = {a.tls_token_rpc};
      with_token.options.token = a.token;
      transports.push_back(with_token);
    }
    return CompareTransports(transports, a.entries / kChain);
  }
  kvatlas::ClientOptions options;
  options.endpoints = {a.rpc};
  auto client = kvatlas::Client::Connect(options);
  if (!client.has_value()) {
    std::fprintf(stderr, "connect: %s\n", client.error().ToString().c_str());
    return 1;
  }
  const uint64_t chains = a.entries / kChain;
  Ingest(**client, chains);
  WaitForQuietServer(a.server_pid);
  if (a.memory) return PrintServerMemory(a.http, a.server_pid);
  // The echo floor's frame sizes: what the client library writes for a lookup (header plus
  // the request payload) and what the server writes back for a real one.
  const LookupRequest sample = Lookup(chains / 2);
  const auto answer = (*client)->Lookup(sample);
  if (!answer.has_value()) {
    std::fprintf(stderr, "lookup: %s\n", answer.error().ToString().c_str());
    return 1;
  }
  namespace protocol = kvatlas::protocol;
  double floor_sequential_p99 = 0, binary_sequential_p99 = 0;     // µs
  std::vector<std::pair<Percentiles, Percentiles>> floor_binary;  // per rate
  {
    EchoFloor floor(protocol::kHeaderBytes + protocol::EncodeLookupRequestBinary(sample).size(),
                    protocol::kHeaderBytes + protocol::EncodeLookupAnswerBinary(*answer).size());
    if (!floor.ok()) return 1;
    floor.PrintNote();
    // Each floor runs right before its lookups so that both see the same machine state; the
    // server is idle meanwhile.
    floor_sequential_p99 = floor.Sequential(20000);
    binary_sequential_p99 = BinarySequential(**client, chains).p99;
    for (uint64_t rate : a.rates) {
      const Percentiles floor_at_rate = floor.OpenLoop(rate, a.seconds);
      floor_binary.emplace_back(floor_at_rate,
                                OpenLoop(**client, chains, rate, a.seconds, a.server_pid));
    }
  }
  const Saturation saturation = BinarySaturation(**client, chains, a.server_pid);
  const double binary_cpu = saturation.server_cpu_us;
  const double rest_cpu = RestLookups(a.http, chains, a.server_pid);
  if (binary_cpu > 0) {
    std::printf("server CPU per lookup, REST / binary: %.1fx\n", rest_cpu / binary_cpu);
  }
  if (floor_sequential_p99 > 0) {
    std::printf("binary lookup p99 / echo floor p99, sequential: %.1fx\n",
                binary_sequential_p99 / floor_sequential_p99);
  }
  // Targets are ratios to the floor measured in the same run (docs: README §Benchmarks):
  // p50 <= 1.5x and p99 <= 2x the echo's up to half the saturation throughput.
  for (size_t i = 0; i < floor_binary.size(); ++i) {
    const auto& [echo, lookup] = floor_binary[i];
    if (echo.p50 <= 0 || echo.p99 <= 0) continue;
    const double load = saturation.lookups_per_s > 0
                            ? static_cast<double>(a.rates[i]) / saturation.lookups_per_s
                            : 0;
    std::printf(
        "binary lookup / echo floor at %llu req/s (%.0f%% of saturation): p50 %.2fx (target "
        "<= 1.5x), p99 %.2fx (target <= 2x)\n",
        static_cast<unsigned long long>(a.rates[i]), 100 * load, lookup.p50 / echo.p50,
        lookup.p99 / echo.p99);
  }
  if (binary_cpu > 0) {
    std::printf("server CPU per 128-block lookup: %.1f us (target <= 8 us)\n", binary_cpu);
  }
  return 0;
}
