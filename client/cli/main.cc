// kvatlas: the command-line client of a kvatlas server, over the binary protocol (and REST
// for `cluster` and `watch`).
//
//   kvatlas [--server HOST:PORT] [--timeout-ms N] [--token T] [--ca FILE]
//           [--cert FILE --key FILE] [--tls] <command> [args]
//
// Exit codes: 0 success; 1 the server could not be reached or refused the request;
// 2 bad command line (usage printed).
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "client/cli/args.h"
#include "client/cli/cluster_command.h"
#include "client/cli/watch_command.h"
#include "kvatlas/client/client.h"
#include "kvatlas/common/json_codec.h"
#include "kvatlas_version.h"

namespace kvatlas::cli {
namespace {

using nlohmann::json;

constexpr char kUsage[] =
    R"(usage: kvatlas [--server HOST:PORT] [--timeout-ms N] [--token T] [TLS flags]
               <command> [args]

The server defaults to $KVATLAS_SERVER, else 127.0.0.1:7071 (the binary protocol port).
The access token (a server with access control on) is --token, else $KVATLAS_TOKEN; prefer
the variable (a command line is visible to other users of the machine).

TLS (both protocols; on when any of these is given):
  --ca FILE      CA certificates (PEM) the server's certificate must chain to
                 (default $KVATLAS_CA; without one, the system's trust store)
  --cert FILE    this client's certificate (PEM), for servers with tls_client_ca
  --key FILE     its private key (PEM); with --cert (defaults $KVATLAS_CERT, $KVATLAS_KEY)
  --tls          TLS with the system's trust store

commands:
  lookup --model M --block-size N [--tenant T] [--lora L] [--salt S]
         (--tokens 1,2,3 | --hashes h1,h2) [--instance ID] [--json | --conductor]
      the longest cached prefix per instance; --json prints the REST /v1/lookup answer,
      --conductor the Mooncake Conductor /query answer (in tokens)
  ingest [FILE | -]
      applies RFC #1527 events, one JSON object per line (or a JSON array per line),
      from FILE or stdin, in batches; shows progress on a terminal
  stats
      the server's statistics (the REST /v1/stats document)
  blocks KEY [--model M --block-size N [--tenant T] [--lora L] [--salt S]] [--json]
      every copy of one block key (decimal or 0x-hex), in one context or all
  ping
      round-trip time to the server
  cluster status | ready | add ID RAFT_ADDRESS | remove ID | transfer [ID] | backup DIR
          | digest  [--http HOST:PORT] [--json]
      the raft cluster over the REST admin API (not the binary protocol): members, leader
      and addresses; whether this server takes writes now (GET /readyz, no token needed;
      exit 1 with the reason if not: a container health check); add or remove a server;
      hand leadership to server ID (or any voter); write a backup of the server asked into
      DIR under its backup_dir (ask the leader: docs/operations.md §Backup and restore);
      print its state digest.
      The REST address defaults to $KVATLAS_HTTP, else 127.0.0.1:7070; any server will do
      for the others (followers forward changes to the leader)
  watch [--from REV|now] [--model M] [--block-size N] [--tenant T] [--lora L] [--salt S]
        [--backend ID] [--dp-rank R] [--medium GPU|CPU|DISK|...] [--json] [--count N]
        [--http HOST:PORT]
      follows the change feed (REST GET /v1/watch, docs/feed.md): one line per record
      (revision, op, holder/rank, medium, model, keys) or --json the record as sent; from
      the records after revision REV (default: now), filters combined with AND; reconnects
      by itself when the server cuts a slow watcher; --count N exits after N records.
      The REST address is as for `cluster`
)";

constexpr size_t kIngestBatchEvents = 1000;
constexpr size_t kIngestBatchesInFlight = 4;

int Usage(const std::string& problem) {
  std::fprintf(stderr, "kvatlas: %s\n\n%s", problem.c_str(), kUsage);
  return 2;
}

// Whether the connection is plaintext: a server that closes it may be expecting TLS.
bool plaintext = true;

int Failed(const Status& status) {
  std::fprintf(stderr, "kvatlas: %s\n", status.ToString().c_str());
  if (status.code() == StatusCode::kUnauthenticated) {
    std::fprintf(stderr,
                 "  The server needs a valid access token: give it with --token or "
                 "KVATLAS_TOKEN.\n");
  }
  if (plaintext && status.code() == StatusCode::kUnavailable) {
    std::fprintf(stderr,
                 "  If the server uses TLS (tls_cert), pass --ca FILE (or KVATLAS_CA) or --tls.\n");
  }
  return 1;
}

std::unique_ptr<Client> ConnectOrExplain(const std::string& server,
                                         std::chrono::milliseconds timeout, const TlsFlags& tls,
                                         const std::string& token) {
  ClientOptions options;
  options.endpoints = {server};
  options.token = token;
  options.tls.enabled = tls.enabled;
  options.tls.ca_file = tls.ca_file;
  options.tls.cert_file = tls.cert_file;
  options.tls.key_file = tls.key_file;
  options.connect_timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(3));
  options.default_deadline = timeout;
  Result<std::unique_ptr<Client>> client = Client::Connect(std::move(options));
  if (client) return std::move(client).value();
  if (client.error().code() == StatusCode::kUnavailable) {
    std::fprintf(stderr,
                 "kvatlas: cannot reach a kvatlas server at %s: %s\n"
                 "  Is kvatlas-server running with --rpc-listen %s? Pick the server with "
                 "--server HOST:PORT or KVATLAS_SERVER.\n",
                 server.c_str(), client.error().message().c_str(), server.c_str());
  } else {
    (void)Failed(client.error());
  }
  return nullptr;
}

Result<ContextKey> ContextFrom(const Args& args, bool required) {
  ContextKey context;
  const std::optional<std::string> model = args.Flag("model");
  const std::optional<std::string> block_size = args.Flag("block-size");
  if (!model && !block_size && !required) return context;
  if (!model || model->empty()) return Status::InvalidArgument("--model is required");
  if (!block_size) return Status::InvalidArgument("--block-size is required");
  KVATLAS_ASSIGN_OR_RETURN(context.block_size, ParseU32(block_size.value_or(""), "--block-size"));
  if (context.block_size == 0) return Status::InvalidArgument("--block-size must be > 0");
  context.model = *model;
  if (auto tenant = args.Flag("tenant"); tenant && !tenant->empty()) context.tenant = *tenant;
  context.lora_name = args.Flag("lora").value_or("");
  context.salt = args.Flag("salt").value_or("");
  return context;
}

void PrintLookupTable(const LookupAnswer& a) {
  std::printf("revision %llu: %u of %u blocks found (block size %u, context %s)\n",
              static_cast<unsigned long long>(a.revision), a.blocks_found, a.blocks_queried,
              a.context.block_size, a.context.ToString().c_str());
  if (a.instances.empty() && a.shared.empty()) {
    std::printf("no instance holds a prefix\n");
    return;
  }
  if (!a.instances.empty()) {
    std::printf("%-24s %8s %8s %8s %8s %8s\n", "INSTANCE", "LONGEST", "GPU", "GPU+CPU", "CPU",
                "DISK");
    for (const InstanceMatch& m : a.instances) {
      std::printf("%-24s %8u %8u %8u %8u %8u\n", m.instance_id.c_str(), m.blocks.disk, m.blocks.gpu,
                  m.blocks.cpu, m.blocks.cpu_only, m.blocks.disk_only);
    }
    std::printf(
        "(blocks; LONGEST, GPU and GPU+CPU are prefixes over the tiers together, CPU "
        "and DISK in that medium alone)\n");
  }
  if (!a.shared.empty()) {
    std::printf("%-24s %8s %8s\n", "SHARED BACKEND", "RANK", "BLOCKS");
    for (const SharedMatch& m : a.shared) {
      std::printf("%-24s %8u %8u\n", m.backend_id.c_str(), m.dp_rank, m.blocks);
    }
  }
}

Result<LookupRequest> BuildLookup(const Args& args) {
  KVATLAS_ASSIGN_OR_RETURN(ContextKey context, ContextFrom(args, /*required=*/true));
  LookupRequest request;
  request.context = std::move(context);
  const std::optional<std::string> tokens = args.Flag("tokens");
  const std::optional<std::string> hashes = args.Flag("hashes");
  if (tokens.has_value() == hashes.has_value()) {
    return Status::InvalidArgument("give exactly one of --tokens and --hashes");
  }
  if (args.Has("json") && args.Has("conductor")) {
    return Status::InvalidArgument("give at most one of --json and --conductor");
  }
  if (tokens) {
    KVATLAS_ASSIGN_OR_RETURN(request.token_ids, ParseTokenList(*tokens));
  } else {
    KVATLAS_ASSIGN_OR_RETURN(request.seq_hashes, ParseHashList(*hashes));
    request.by_hash = true;
  }
  request.instance_id = args.Flag("instance").value_or("");
  return request;
}

int RunLookup(Client& client, LookupRequest request, const Args& args) {
  Result<LookupAnswer> answer = client.Lookup(std::move(request));
  if (!answer) return Failed(answer.error());
  if (args.Has("conductor")) {
    std::printf("%s\n", EncodeConductorAnswer(*answer).c_str());
  } else if (args.Has("json")) {
    std::printf("%s\n", EncodeLookupAnswer(*answer).c_str());
  } else {
    PrintLookupTable(*answer);
  }
  return 0;
}

int RunStats(Client& client) {
  Result<StatsAnswer> stats = client.Stats();
  if (!stats) return Failed(stats.error());
  const json doc = json::parse(stats->json, nullptr, /*allow_exceptions=*/false);
  std::printf("%s\n", doc.is_discarded() ? stats->json.c_str() : DumpJson(doc).c_str());
  return 0;
}

// The REST GET /v1/blocks/{key} shape.
json LocateJson(BlockKey key, const LocateAnswer& answer) {
  json copies = json::array();
  for (const BlockCopy& c : answer.copies) {
    copies.push_back({{"context", ContextKeyToJson(c.context)},
                      {"holder_id", c.holder.id},
                      {"dp_rank", c.holder.dp_rank},
                      {"tier", TierName(c.tier)},
                      {"depth", c.depth},
                      {"refcount", c.refcount},
                      {"engine_hash", c.engine_hash},
                      {"location", c.location}});
  }
  return {{"revision", answer.revision}, {"key", key}, {"copies", std::move(copies)}};
}

Result<LocateRequest> BuildLocate(const Args& args) {
  if (args.positional.size() != 1) return Status::InvalidArgument("give one block KEY");
  Result<uint64_t> key = ParseHashText(args.positional[0]);
  if (!key) return key.error().WithContext("KEY");
  KVATLAS_ASSIGN_OR_RETURN(ContextKey context, ContextFrom(args, /*required=*/false));
  LocateRequest request{*key, {}};
  if (!context.model.empty()) request.context = std::move(context);
  return request;
}

int RunBlocks(Client& client, const LocateRequest& request, bool as_json) {
  const BlockKey key = request.key;
  Result<LocateAnswer> answer = client.Locate(request);
  if (!answer) return Failed(answer.error());
  if (as_json) {
    std::printf("%s\n", DumpJson(LocateJson(key, *answer)).c_str());
    return 0;
  }
  std::printf("revision %llu: %zu copies of block %llu\n",
              static_cast<unsigned long long>(answer->revision), answer->copies.size(),
              static_cast<unsigned long long>(key));
  if (answer->copies.empty()) return 0;
  std::printf("%-24s %5s %-7s %6s %8s  %-32s %s\n", "HOLDER", "RANK", "TIER", "DEPTH", "REFS",
              "CONTEXT", "LOCATION");
  for (const BlockCopy& c : answer->copies) {
    std::printf("%-24s %5u %-7s %6u %8u  %-32s %s\n", c.holder.id.c_str(), c.holder.dp_rank,
                std::string(TierName(c.tier)).c_str(), c.depth, c.refcount,
                c.context.ToString().c_str(), c.location.c_str());
  }
  return 0;
}

int RunPing(Client& client) {
  const auto start = std::chrono::steady_clock::now();
  Status s = client.Ping();
  if (!s.ok()) return Failed(s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  std::printf("pong in %lld us\n", static_cast<long long>(us.count()));
  return 0;
}

// Sends events in batches, a few batches in flight, with a progress line on a terminal.
class Ingester {
 public:
  Ingester(Client& client, uint64_t total_bytes)
      : client_(client), total_bytes_(total_bytes), progress_(isatty(STDERR_FILENO) == 1) {}

  void Add(std::vector<BlockEvent> events, uint64_t bytes_read) {
    bytes_read_ = bytes_read;
    for (BlockEvent& e : events) batch_.push_back(std::move(e));
    if (batch_.size() >= kIngestBatchEvents) Flush();
  }

  // Sends the last batch and waits for every answer. The first failure, if any.
  Status Finish() {
    Flush();
    while (!in_flight_.empty()) Wait();
    if (progress_) std::fprintf(stderr, "\n");
    return first_error_;
  }

  bool failed() const { return !first_error_.ok(); }
  uint64_t events() const { return events_; }
  uint64_t blocks() const { return blocks_; }
  Revision revision() const { return revision_; }

 private:
  void Flush() {
    if (batch_.empty()) return;
    while (in_flight_.size() >= kIngestBatchesInFlight) Wait();
    in_flight_.push_back(client_.IngestAsync(std::exchange(batch_, {})));
  }

  void Wait() {
    Result<IngestAnswer> ack = in_flight_.front().get();
    in_flight_.pop_front();
    if (!ack) {
      if (first_error_.ok()) first_error_ = ack.error();
      return;
    }
    events_ += ack->events;
    blocks_ += ack->blocks;
    revision_ = std::max(revision_, ack->revision);
    if (progress_) ShowProgress();
  }

  void ShowProgress() const {
    if (total_bytes_ > 0) {
      const int percent =
          static_cast<int>(100 * std::min(bytes_read_, total_bytes_) / total_bytes_);
      const int filled = percent / 5;
      std::fprintf(stderr, "\r[%.*s%.*s] %3d%%  %llu events, %llu blocks", filled,
                   "####################", 20 - filled, "--------------------", percent,
                   static_cast<unsigned long long>(events_),
                   static_cast<unsigned long long>(blocks_));
    } else {
      std::fprintf(stderr, "\r%llu events, %llu blocks", static_cast<unsigned long long>(events_),
                   static_cast<unsigned long long>(blocks_));
    }
  }

  Client& client_;
  const uint64_t total_bytes_;
  const bool progress_;
  uint64_t bytes_read_ = 0;
  std::vector<BlockEvent> batch_;
  std::deque<std::future<Result<IngestAnswer>>> in_flight_;
  Status first_error_;
  uint64_t events_ = 0;
  uint64_t blocks_ = 0;
  Revision revision_ = 0;
};

int RunIngest(Client& client, const Args& args) {
  const std::string path = args.positional.empty() ? "-" : args.positional[0];
  std::ifstream file;
  uint64_t total_bytes = 0;
  if (path != "-") {
    file.open(path, std::ios::binary | std::ios::ate);
    if (!file) return Failed(Status::NotFound("cannot open " + path));
    total_bytes = static_cast<uint64_t>(file.tellg());
    file.seekg(0);
  }
  std::istream& in = path == "-" ? std::cin : file;
  Ingester ingester(client, total_bytes);
  std::string line;
  uint64_t line_no = 0;
  uint64_t bytes_read = 0;
  Status bad_line;
  while (!ingester.failed() && std::getline(in, line)) {
    ++line_no;
    bytes_read += line.size() + 1;
    Result<std::vector<BlockEvent>> events = DecodeEventLine(line);
    if (!events) {
      bad_line = events.error().WithContext(path + ":" + std::to_string(line_no));
      break;
    }
    ingester.Add(std::move(*events), bytes_read);
  }
  Status sent = ingester.Finish();
  const Status& error = !bad_line.ok() ? bad_line : sent;
  if (!error.ok()) {
    std::fprintf(stderr,
                 "kvatlas: %s\n  stopped: %llu events were applied before it (each batch is "
                 "atomic)\n",
                 error.ToString().c_str(), static_cast<unsigned long long>(ingester.events()));
    return 1;
  }
  std::printf("ingested %llu events, %llu blocks (revision %llu)\n",
              static_cast<unsigned long long>(ingester.events()),
              static_cast<unsigned long long>(ingester.blocks()),
              static_cast<unsigned long long>(ingester.revision()));
  return 0;
}

int Main(int argc, char** argv) {
  Result<Args> parsed = ParseArgs(argc, argv);
  if (!parsed) return Usage(parsed.error().message());
  Args& args = *parsed;
  if (args.Has("help") || args.command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.Has("version") || args.command == "version") {
    std::printf("%s\n", KVATLAS_VERSION_LINE("kvatlas"));
    return 0;
  }
  if (args.command.empty()) return Usage("no command given");
  Result<TlsFlags> tls = ParseTlsFlags(args);
  if (!tls) return Usage(tls.error().message());
  plaintext = !tls->enabled;
  const char* env_server = std::getenv("KVATLAS_SERVER");
  const std::string server = args.Flag("server").value_or(
      env_server != nullptr && env_server[0] != '\0' ? env_server : "127.0.0.1:7071");
  Result<uint32_t> timeout_ms = ParseU32(args.Flag("timeout-ms").value_or("30000"), "--timeout-ms");
  if (!timeout_ms || *timeout_ms == 0) return Usage("--timeout-ms must be a positive integer");
  static const std::map<std::string, std::vector<std::string>> kFlags = {
      {"lookup",
       {"model", "block-size", "tenant", "lora", "salt", "tokens", "hashes", "instance", "json",
        "conductor"}},
      {"ingest", {}},
      {"stats", {}},
      {"blocks", {"model", "block-size", "tenant", "lora", "salt", "json"}},
      {"ping", {}},
      {"cluster", {std::begin(kClusterFlags), std::end(kClusterFlags)}},
      {"watch", {std::begin(kWatchFlags), std::end(kWatchFlags)}}};
  const auto known = kFlags.find(args.command);
  if (known == kFlags.end()) return Usage("unknown command \"" + args.command + "\"");
  if (Status s = args.CheckFlags(known->second); !s.ok()) return Usage(s.message());
  if (args.command == "cluster") {
    return RunCluster(args, std::chrono::milliseconds(*timeout_ms), kUsage);
  }
  if (args.command == "watch") {
    return RunWatch(args, std::chrono::milliseconds(*timeout_ms), kUsage);
  }
  if (args.command != "ingest" && args.command != "blocks" && !args.positional.empty()) {
    return Usage(args.command + ": unexpected argument \"" + args.positional[0] + "\"");
  }

  // Requests are built before connecting, so that a usage error is reported as one.
  std::optional<LookupRequest> lookup;
  std::optional<LocateRequest> locate;
  if (args.command == "lookup") {
    Result<LookupRequest> r = BuildLookup(args);
    if (!r) return Usage("lookup: " + r.error().message());
    lookup = std::move(*r);
  } else if (args.command == "blocks") {
    Result<LocateRequest> r = BuildLocate(args);
    if (!r) return Usage("blocks: " + r.error().message());
    locate = std::move(*r);
  } else if (args.command == "ingest" && args.positional.size() > 1) {
    return Usage("ingest: give at most one FILE");
  }

  std::unique_ptr<Client> client =
      ConnectOrExplain(server, std::chrono::milliseconds(*timeout_ms), *tls, TokenFrom(args));
  if (client == nullptr) return 1;
  if (lookup) return RunLookup(*client, std::move(*lookup), args);
  if (locate) return RunBlocks(*client, *locate, args.Has("json"));
  if (args.command == "ingest") return RunIngest(*client, args);
  if (args.command == "stats") return RunStats(*client);
  return RunPing(*client);
}

}  // namespace
}  // namespace kvatlas::cli

int main(int argc, char** argv) {
  try {
    return kvatlas::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvatlas: internal error: %s\n", e.what());
    return 1;
  }
}
