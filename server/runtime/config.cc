#include "server/runtime/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "common/internal/log.h"
#include "kvatlas/common/json_codec.h"
#include "kvatlas/common/placement.h"
#include "kvatlas/common/protocol.h"
#include "server/api/registration_json.h"
#include "server/peer/peer_auth.h"
#include "server/runtime/access_config.h"

namespace kvatlas::server {
namespace {

using nlohmann::json;

constexpr uint64_t kNoMax = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kMaxMillis = 3'600'000;

using Member = std::variant<std::string Config::*, uint64_t Config::*, bool Config::*>;

// One setting: its JSON key (the flag is the key with '-' for '_'), the Config member,
// the accepted range of an integer, the --help line, and optionally a second, shorter flag
// for the same setting. The one list of settings: the config file, the flags, --help and
// --print-config all read it.
struct Field {
  std::string_view key;
  Member member;
  uint64_t min = 0;
  uint64_t max = kNoMax;
  std::string_view help;
  std::string_view alias = {};
};

const Field kFields[] = {
    {"data_dir", &Config::data_dir, 0, 0,
     "data directory: RocksDB in DIR/db, addresses in DIR/http.addr, DIR/rpc.addr"},
    {"backup_dir", &Config::backup_dir, 0, 0,
     "root directory of online backups (POST /v1/admin/backup); empty = off"},
    {"http_listen", &Config::http_listen, 0, 0,
     "REST address HOST:PORT ([v6]:PORT); port 0 = any free port"},
    {"rpc_listen", &Config::rpc_listen, 0, 0,
     "binary protocol address HOST:PORT ([v6]:PORT); port 0 = any free port"},
    {"log_level", &Config::log_level, 0, 0, "debug, info, warning or error"},
    {"hash_seed", &Config::hash_seed, 0, kNoMax,
     "seed of the standard block hash (fixed per data dir)"},
    {"max_entries_per_context", &Config::max_entries_per_context, 1, kNoMax,
     "entries per context before its oldest blocks are evicted"},
    {"max_lookup_blocks", &Config::max_lookup_blocks, 1, std::numeric_limits<uint32_t>::max(),
     "longest key chain a lookup walks"},
    {"storage_sync", &Config::storage_sync, 0, 0,
     "fsync the WAL on every applied group (true/false)"},
    {"storage_memory_bytes", &Config::storage_memory_bytes, 0, kNoMax,
     "RocksDB memory budget: memtables and block cache in one cache; 0 = unbudgeted"},
    {"storage_block_cache_bytes", &Config::storage_block_cache_bytes, 0, kNoMax,
     "RocksDB block cache: the part of storage_memory_bytes kept from memtables"},
    {"storage_write_buffer_bytes", &Config::storage_write_buffer_bytes, 1 << 20, kNoMax,
     "RocksDB write buffer (one memtable) size"},
    {"feed_window_bytes", &Config::feed_window_bytes, 64 << 10, kNoMax,
     "memory of the change feed's window of recent records; older watches resync"},
    {"malloc_arena_max", &Config::malloc_arena_max, 0, 1024,
     "glibc malloc arenas (fewer strand less freed memory); 0 = glibc's default; ignored with "
     "jemalloc"},
    {"http_threads", &Config::http_threads, 1, 1024, "HTTP worker threads"},
    {"max_body_bytes", &Config::max_body_bytes, 1024, kNoMax,
     "largest accepted request body (else 413)"},
    {"http_read_timeout_ms", &Config::http_read_timeout_ms, 1, kMaxMillis,
     "close a keep-alive connection idle this long between requests"},
    {"http_request_timeout_ms", &Config::http_request_timeout_ms, 1, kMaxMillis,
     "a request's headers and body must arrive within this (else the connection closes)"},
    {"http_write_timeout_ms", &Config::http_write_timeout_ms, 1, kMaxMillis,
     "an answer (or an event stream's chunk) must be sent within this (else close)"},
    {"http_max_connections", &Config::http_max_connections, 1, 1'000'000,
     "open REST connections (else 503 and close)"},
    {"http_max_connections_per_peer", &Config::http_max_connections_per_peer, 1, 1'000'000,
     "open REST connections per peer address (else 503 and close)"},
    {"http_max_queued_requests", &Config::http_max_queued_requests, 1, 1'000'000,
     "REST requests waiting for a worker thread (else 503)"},
    {"rpc_threads", &Config::rpc_threads, 1, 256, "binary protocol io threads"},
    {"rpc_max_frame_bytes", &Config::rpc_max_frame_bytes, 1024, protocol::kMaxPayloadBytes,
     "largest binary protocol frame payload (else error and close)"},
    {"rpc_idle_timeout_ms", &Config::rpc_idle_timeout_ms, 1, kMaxMillis,
     "close binary protocol connections idle this long"},
    {"rpc_max_in_flight", &Config::rpc_max_in_flight, 1, 1'000'000,
     "requests in flight per binary protocol connection before reading pauses"},
    {"rpc_max_connections", &Config::rpc_max_connections, 1, 1'000'000,
     "open binary protocol connections (else an unavailable error frame and close)"},
    {"rpc_max_connections_per_peer", &Config::rpc_max_connections_per_peer, 1, 1'000'000,
     "open binary protocol connections per peer address (else error frame and close)"},
    {"rpc_max_buffered_bytes", &Config::rpc_max_buffered_bytes, 1ull << 20, kNoMax,
     "bytes of incomplete frames over 64 KiB buffered across all binary protocol connections"},
    {"rpc_frame_timeout_ms", &Config::rpc_frame_timeout_ms, 1, kMaxMillis,
     "a frame over 64 KiB must get its buffer share, then arrive, within this (else error, close)"},
    {"tls_cert", &Config::tls_cert, 0, 0,
     "PEM certificate chain: TLS on tls_listeners (with tls_key; reloaded on SIGHUP)"},
    {"tls_key", &Config::tls_key, 0, 0, "PEM private key of tls_cert"},
    {"tls_client_ca", &Config::tls_client_ca, 0, 0,
     "PEM CA file: TLS clients must present a certificate it issued (mutual TLS)"},
    {"tls_listeners", &Config::tls_listeners, 0, 0,
     "listeners serving TLS when tls_cert is set: comma-separated http, rpc"},
    {"tls_peer_ca", &Config::tls_peer_ca, 0, 0,
     "PEM CA file for other members' REST certificates (forwarding); empty = system store"},
    {"apply_timeout_ms", &Config::apply_timeout_ms, 1, kMaxMillis,
     "how long a write waits to be applied (else 504 / deadline_exceeded)"},
    {"max_events_per_batch", &Config::max_events_per_batch, 1, 10'000'000,
     "events per POST /v1/events (else 413)"},
    {"max_snapshot_streams", &Config::max_snapshot_streams, 1, 1'024,
     "context snapshots (GET /v1/snapshot, kSnapshot) streamed at once (else 429)"},
    {"snapshot_page_copies", &Config::snapshot_page_copies, 1, 65'536,
     "copies per page of a context snapshot (one kSnapshot part)"},
    {"feed_window_keys", &Config::feed_window_keys, 1, 1'000'000'000,
     "block keys of recent change-feed records kept for watches (older: compacted)"},
    {"max_name_bytes", &Config::max_name_bytes, 1, kMaxNameBytes,
     "model, LoRA, tenant names, instance/backend ids, media (else 400); at most the default"},
    {"max_salt_bytes", &Config::max_salt_bytes, 1, kMaxSaltBytes,
     "additional_salt of events, lookups, registrations (else 400); at most the default"},
    {"max_location_bytes", &Config::max_location_bytes, 1, kMaxLocationBytes,
     "one location of a stored block (else 400); at most the default"},
    {"max_blocks_per_event", &Config::max_blocks_per_event, 1, std::numeric_limits<uint32_t>::max(),
     "blocks per event (else 413)"},
    {"applier_max_queue", &Config::applier_max_queue, 1, 10'000'000,
     "write batches queued for the applier (else 429)"},
    {"applier_max_group_batches", &Config::applier_max_group_batches, 1, 1'000'000,
     "batches per group commit"},
    {"id", &Config::id, 1, kNoMax, "this server's raft id (> 0)"},
    {"raft_listen", &Config::raft_listen, 0, 0,
     "raft transport HOST:PORT; empty = this id's --peers entry (single server: any port)"},
    {"raft_bind", &Config::raft_bind, 0, 0,
     "IPv4 HOST:PORT the raft transport binds, e.g. 0.0.0.0:7072; empty = the raft address "
     "(needed when that is a host name)"},
    {"peers", &Config::peers, 0, 0,
     "initial voters 1@host:port,2@host:port,...; empty = single server"},
    {"cluster_id", &Config::cluster_id, 0, 0,
     "this cluster's name, the same on every server (needed with cluster_secret_file)"},
    {"cluster_secret_file", &Config::cluster_secret_file, 0, 0,
     "file with the cluster secret peers prove (head -c 32 /dev/urandom | base64 > FILE)"},
    {"raft_handshake_timeout_ms", &Config::raft_handshake_timeout_ms, 100, 60'000,
     "a raft connection's peer handshake must complete within this (else closed)"},
    {"raft_election_timeout_ms", &Config::raft_election_timeout_ms, 50, 60'000,
     "raft election timeout (randomised up to 2x)"},
    {"shutdown_drain_ms", &Config::shutdown_drain_ms, 0, 600'000,
     "a stopping server hands the groups it leads to others for at most this long; 0 = off"},
    {"raft_heartbeat_timeout_ms", &Config::raft_heartbeat_timeout_ms, 10, 10'000,
     "raft leader heartbeat interval"},
    {"raft_snapshot_threshold", &Config::raft_snapshot_threshold, 16, 1'000'000,
     "log entries between snapshots"},
    {"raft_snapshot_trailing", &Config::raft_snapshot_trailing, 0, 1'000'000,
     "log entries kept after a snapshot"},
    {"raft_snapshot_log_bytes", &Config::raft_snapshot_log_bytes, 0, 1ull << 40,
     "snapshot once the raft log held in memory reaches this many bytes (or 1/16 of the last "
     "snapshot, if more); 0 = entries only"},
    {"raft_segment_bytes", &Config::raft_segment_bytes, 1ull << 20, 1ull << 30,
     "size of each raft log segment file (preallocated, ~3 at a time)"},
    {"raft_apply_queue", &Config::raft_apply_queue, 0, 1'000'000,
     "committed log entries waiting for the apply thread; 0 = apply on the raft loop"},
    {"min_free_disk_bytes", &Config::min_free_disk_bytes, 0, kNoMax,
     "refuse writes and give up leadership below this much free disk"},
    {"snapshot_stop_bytes", &Config::snapshot_stop_bytes, 0, kNoMax,
     "take no new contexts once the last raft snapshot reaches this many bytes (again below "
     "3/4 of it); 0 = never refuse"},
    {"groups", &Config::groups, 1, kMaxGroups,
     "raft groups the map is spread over; fixed when the cluster is made"},
    {"replicas", &Config::replicas, 0, kMaxGroupMembers,
     "servers holding each group's replicas (group 1: every server); 0 = every server; "
     "fixed when the data directory is made"},
    {"holder_ttl_seconds", &Config::holder_ttl_seconds, 0, 7 * 24 * 3600,
     "expire holders silent (no event, no heartbeat) this long; 0 = leases off", "--holder-ttl"},
    {"audit_interval_ms", &Config::audit_interval_ms, 0, kMaxMillis,
     "the leader proposes a replica audit point this often (when anything was applied); "
     "0 = off"},
    {"predicted_ttl_ms", &Config::predicted_ttl_ms, 100, kMaxMillis,
     "how long the blocks of a route to a candidate flagged predict count as cached there"},
    {"predicted_max_entries", &Config::predicted_max_entries, 0, 100'000'000,
     "the most predicted (block, instance) entries a server keeps; 0 = none"},
    {"zmq_listen", &Config::zmq_listen, 0, 0,
     "bind a ZMQ SUB socket for engines that connect (e.g. tcp://*:5557); empty = none"},
    {"zmq_listen_model", &Config::zmq_listen_model, 0, 0,
     "model of zmq_listen streams whose topic does not name one"},
    {"zmq_listen_block_size", &Config::zmq_listen_block_size, 1,
     std::numeric_limits<uint32_t>::max(), "block size (tokens) of zmq_listen streams"},
    {"zmq_max_concurrent_replays", &Config::zmq_max_concurrent_replays, 1, 1024,
     "engine replays running at once"},
    {"zmq_replay_timeout_ms", &Config::zmq_replay_timeout_ms, 1, kMaxMillis,
     "abandon a replay silent this long"},
    {"zmq_replay_cooldown_ms", &Config::zmq_replay_cooldown_ms, 0, kMaxMillis,
     "no replays on a stream this long after one failed"},
    {"zmq_receive_hwm", &Config::zmq_receive_hwm, 1, 10'000'000,
     "ZMQ SUB receive high-water mark (messages)"},
    {"max_registrations", &Config::max_registrations, 1, 10'000,
     "publishers registered at once, config file included (else 429)"},
    {"zmq_allowed_transports", &Config::zmq_allowed_transports, 0, 0,
     "transports registered publishers may use: comma-separated tcp, ipc, inproc"},
    {"zmq_allowed_hosts", &Config::zmq_allowed_hosts, 0, 0,
     "hosts tcp publishers may name: comma-separated *, ADDRESS[/BITS], NAME, *.SUFFIX"},
    {"zmq_reconnect_interval_ms", &Config::zmq_reconnect_interval_ms, 1, 60'000,
     "first reconnect delay to a registered publisher (then doubling)"},
    {"zmq_reconnect_interval_max_ms", &Config::zmq_reconnect_interval_max_ms, 1, 600'000,
     "longest reconnect delay to a registered publisher"},
    {"token_file", &Config::token_file, 0, 0,
     "access tokens, one NAME:ROLE:SHA256HEX per line (kvatlas-server gen-token); reread on "
     "SIGHUP"},
    {"insecure", &Config::insecure, 0, 0,
     "start without tokens on non-loopback listeners, and with peers on non-loopback "
     "addresses without a cluster secret (else such a server refuses to start)"},
    {"http_allowed_hosts", &Config::http_allowed_hosts, 0, 0,
     "comma-separated host names REST clients use (besides localhost, IP literals and the "
     "listen host); \"*\" = any"},
};

// Keys whose values are lists of objects (config file only, no flag).
constexpr std::string_view kPublishersKey = "publishers";
constexpr std::string_view kListenersKey = "zmq_listeners";
constexpr std::string_view kTokensKey = "tokens";

bool IsListKey(std::string_view key) {
  return key == kPublishersKey || key == kListenersKey || key == kTokensKey;
}

Result<ZmqListenerConfig> ListenerFromJson(const json& value, const std::string& path) {
  auto invalid = [&](const std::string& what) {
    return Status::InvalidArgument(path + ": " + what);
  };
  if (!value.is_object()) return invalid("must be an object");
  ZmqListenerConfig listener;
  for (const auto& [key, field] : value.items()) {
    if (key == "block_size") {
      if (!field.is_number_unsigned() || field.get<uint64_t>() == 0 ||
          field.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return invalid("block_size: must be a positive integer");
      }
      listener.block_size = static_cast<uint32_t>(field.get<uint64_t>());
      continue;
    }
    if (!field.is_string()) return invalid(key + ": must be a string");
    const std::string text = field.get<std::string>();
    if (key == "bind") {
      listener.bind = text;
    } else if (key == "topic") {
      listener.topic = text;
    } else if (key == "type") {
      const std::optional<EngineType> type = ParseEngineType(text);
      if (!type) return invalid("type: must be \"vLLM\", \"SGLang\" or \"Mooncake\"");
      listener.type = *type;
    } else if (key == "modelname") {
      listener.model = text;
    } else if (key == "tenant_id") {
      listener.tenant_id = text.empty() ? "default" : text;
    } else if (key == "lora_name") {
      listener.lora_name = text;
    } else if (key == "additionalsalt") {
      listener.additional_salt = text;
    } else if (key == "report_mode") {
      const std::optional<ReportMode> mode = ParseReportMode(text);
      if (!mode) return invalid("report_mode: must be \"incremental\" or \"full\"");
      listener.report_mode = *mode;
    } else {
      return invalid("unknown key \"" + key + "\"");
    }
  }
  if (std::string problem = ReportModeProblem(listener.type, listener.report_mode);
      !problem.empty()) {
    return invalid("report_mode: " + problem);
  }
  if (Status s = ZmqIngest::ValidateEndpoint(listener.bind, /*for_bind=*/true); !s.ok()) {
    return invalid("bind: " + s.message());
  }
  return listener;
}

Status SetListFromJson(std::string_view key, const json& value, Config* config) {
  if (!value.is_array()) {
    return Status::InvalidArgument(std::string(key) + ": must be an array of objects");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string path = std::string(key) + "[" + std::to_string(i) + "]";
    if (key == kPublishersKey) {
      KVATLAS_ASSIGN_OR_RETURN(Registration r, RegistrationFromJson(value[i], path));
      config->publishers.push_back(std::move(r));
    } else if (key == kTokensKey) {
      KVATLAS_ASSIGN_OR_RETURN(TokenEntry t, TokenFromJson(value[i], path));
      config->tokens.push_back(std::move(t));
    } else {
      KVATLAS_ASSIGN_OR_RETURN(ZmqListenerConfig l, ListenerFromJson(value[i], path));
      config->zmq_listeners.push_back(std::move(l));
    }
  }
  return Status::Ok();
}

nlohmann::ordered_json ListenerToJson(const ZmqListenerConfig& l) {
  return {{"bind", l.bind},
          {"topic", l.topic},
          {"type", std::string(EngineTypeName(l.type))},
          {"modelname", l.model},
          {"tenant_id", l.tenant_id},
          {"lora_name", l.lora_name},
          {"block_size", l.block_size},
          {"additionalsalt", l.additional_salt},
          {"report_mode", std::string(ReportModeName(l.report_mode))}};
}

std::string FlagOf(std::string_view key) {
  std::string flag = "--" + std::string(key);
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// What --help shows after a flag: what its value is ("[true|false]" for a switch, which
// needs none).
std::string Placeholder(const Field& field) {
  if (std::holds_alternative<bool Config::*>(field.member)) return "[true|false]";
  if (std::holds_alternative<uint64_t Config::*>(field.member)) return "N";
  const std::string_view key = field.key;
  if (key.ends_with("_listen") || key.ends_with("_bind")) {
    return key.starts_with("zmq") ? "ENDPOINT" : "HOST:PORT";
  }
  if (key.ends_with("_dir")) return "DIR";
  if (key.ends_with("_file") || key.ends_with("_ca") || key == "tls_cert" || key == "tls_key") {
    return "FILE";
  }
  if (key == "peers") return "ID@HOST:PORT,...";
  return key.ends_with("s") ? "LIST" : "VALUE";
}

const Field* FindByKey(std::string_view key) {
  for (const Field& field : kFields) {
    if (field.key == key) return &field;
  }
  return nullptr;
}

const Field* FindByFlag(std::string_view flag) {
  for (const Field& field : kFields) {
    if (FlagOf(field.key) == flag || (!field.alias.empty() && field.alias == flag)) return &field;
  }
  return nullptr;
}

Status CheckRange(const Field& field, uint64_t value) {
  if (value >= field.min && value <= field.max) return Status::Ok();
  return Status::InvalidArgument(std::string(field.key) + ": " + std::to_string(value) +
                                 " is out of range [" + std::to_string(field.min) + ", " +
                                 (field.max == kNoMax ? "2^64-1" : std::to_string(field.max)) +
                                 "]");
}

// Sets `field` from a flag's text.
Status SetFromText(const Field& field, std::string_view text, Config* config) {
  const std::string flag = FlagOf(field.key);
  if (auto* s = std::get_if<std::string Config::*>(&field.member)) {
    config->** s = std::string(text);
    return Status::Ok();
  }
  if (auto* b = std::get_if<bool Config::*>(&field.member)) {
    if (text == "true" || text == "1") {
      config->** b = true;
    } else if (text == "false" || text == "0") {
      config->** b = false;
    } else {
      return Status::InvalidArgument(flag + ": expected true or false, got \"" + std::string(text) +
                                     "\"");
    }
    return Status::Ok();
  }
  uint64_t value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return Status::InvalidArgument(flag + ": expected an unsigned integer, got \"" +
                                   std::string(text) + "\"");
  }
  config->*std::get<uint64_t Config::*>(field.member) = value;
  return Status::Ok();
}

// Sets `field` from a config-file value.
Status SetFromJson(const Field& field, const json& value, Config* config) {
  const auto wrong = [&](std::string_view expected) {
    return Status::InvalidArgument(std::string(field.key) + ": must be " + std::string(expected) +
                                   ", got " + DumpJson(value));
  };
  if (auto* s = std::get_if<std::string Config::*>(&field.member)) {
    if (!value.is_string()) return wrong("a string");
    config->** s = value.get<std::string>();
  } else if (auto* b = std::get_if<bool Config::*>(&field.member)) {
    if (!value.is_boolean()) return wrong("true or false");
    config->** b = value.get<bool>();
  } else {
    if (!value.is_number_unsigned()) return wrong("an unsigned integer");
    config->*std::get<uint64_t Config::*>(field.member) = value.get<uint64_t>();
  }
  return Status::Ok();
}

// Ordered: --print-config and the example file list settings in the table's order.
nlohmann::ordered_json FieldToJson(const Field& field, const Config& config) {
  return std::visit([&](auto member) { return nlohmann::ordered_json(config.*member); },
                    field.member);
}

// The items of a comma-separated list, trimmed; empty items skipped.
std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> items;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) items.emplace_back(item);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return items;
}

Status ValidateTls(const Config& config) {
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return Status::InvalidArgument("tls_cert and tls_key: give both (TLS) or neither (plaintext)");
  }
  if (config.tls_cert.empty() && !config.tls_client_ca.empty()) {
    return Status::InvalidArgument("tls_client_ca: needs tls_cert and tls_key (TLS)");
  }
  const std::vector<std::string> listeners = SplitList(config.tls_listeners);
  for (const std::string& listener : listeners) {
    if (listener != "http" && listener != "rpc") {
      return Status::InvalidArgument("tls_listeners: unknown listener \"" + listener +
                                     "\" (expected http, rpc)");
    }
  }
  if (!config.tls_cert.empty() && listeners.empty()) {
    return Status::InvalidArgument("tls_listeners: empty, but tls_cert is set (http, rpc)");
  }
  return Status::Ok();
}

}  // namespace

TlsListeners TlsListenersOf(const Config& config) {
  TlsListeners on;
  if (config.tls_cert.empty()) return on;
  for (const std::string& listener : SplitList(config.tls_listeners)) {
    on.http = on.http || listener == "http";
    on.rpc = on.rpc || listener == "rpc";
  }
  return on;
}

Result<Config> LoadConfigFile(const std::string& path, Config base) {
  std::ifstream in(path);
  if (!in) {
    return Status::IOError("cannot read config file " + path + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::exception& e) {
    return Status::InvalidArgument("config file " + path + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument("config file " + path + ": must be a JSON object");
  }
  // A typo must not silently fall back to a default: name every unknown key.
  std::string unknown;
  for (const auto& [key, value] : doc.items()) {
    if (FindByKey(key) == nullptr && !IsListKey(key))
      unknown += (unknown.empty() ? "\"" : ", \"") + key + "\"";
  }
  if (!unknown.empty()) {
    return Status::InvalidArgument("config file " + path + ": unknown key(s) " + unknown +
                                   " (see kvatlas-server --help for the known keys)");
  }
  for (const auto& [key, value] : doc.items()) {
    if (IsListKey(key)) {
      // The file's list replaces the base's: lists do not merge.
      if (key == kPublishersKey) base.publishers.clear();
      if (key == kListenersKey) base.zmq_listeners.clear();
      if (key == kTokensKey) base.tokens.clear();
      KVATLAS_RETURN_IF_ERROR(
          SetListFromJson(key, value, &base).WithContext("config file " + path));
      continue;
    }
    KVATLAS_RETURN_IF_ERROR(
        SetFromJson(*FindByKey(key), value, &base).WithContext("config file " + path));
    base.given.insert(key);
  }
  return base;
}

namespace {

// The raft transport binds only numeric IPv4 addresses (tcp_transport.h): raft_bind must be
// one, and without it so must this server's own raft address.
Status CheckRaftBind(const Config& config,
                     const std::vector<std::pair<uint64_t, std::string>>& peers) {
  const auto ipv4 = [](const std::string& host) {
    in_addr unused{};
    return inet_pton(AF_INET, host.c_str(), &unused) == 1;
  };
  if (!config.raft_bind.empty()) {
    const Result<HostPort> bind = ParseHostPort(config.raft_bind);
    if (!bind.has_value()) return bind.status().WithContext("raft_bind");
    if (!ipv4(bind->host)) {
      return Status::InvalidArgument("raft_bind: " + config.raft_bind +
                                     ": the host must be an IPv4 address (e.g. 0.0.0.0)");
    }
    return Status::Ok();
  }
  std::string own = config.raft_listen;
  for (const auto& [id, address] : peers) {
    if (id == config.id) own = address;
  }
  if (own.empty()) return Status::Ok();
  const Result<HostPort> parsed = ParseHostPort(own);
  if (parsed.has_value() && !ipv4(parsed->host)) {
    return Status::InvalidArgument(
        "raft_bind: must be set when this server's raft address " + own +
        " is a host name (peers resolve it; the transport binds an IPv4 address, e.g. "
        "--raft-bind 0.0.0.0:" +
        std::to_string(parsed->port) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateConfig(const Config& config) {
  if (config.data_dir.empty()) return Status::InvalidArgument("data_dir: must not be empty");
  if (config.replicas > 0 && config.groups == 1 && config.Given("replicas")) {
    return Status::InvalidArgument(
        "replicas: places the replicas of groups 2 and up, so it needs groups > 1 (got replicas " +
        std::to_string(config.replicas) + " with one group)");
  }
  KVATLAS_RETURN_IF_ERROR(ParseHostPort(config.http_listen).status().WithContext("http_listen"));
  KVATLAS_RETURN_IF_ERROR(ParseHostPort(config.rpc_listen).status().WithContext("rpc_listen"));
  if (!ParseLogLevel(config.log_level)) {
    return Status::InvalidArgument("log_level: expected debug, info, warning or error, got \"" +
                                   config.log_level + "\"");
  }
  for (const Field& field : kFields) {
    if (const auto* member = std::get_if<uint64_t Config::*>(&field.member)) {
      KVATLAS_RETURN_IF_ERROR(CheckRange(field, config.**member));
    }
  }
  if (config.storage_memory_bytes != 0 &&
      config.storage_memory_bytes <
          config.storage_block_cache_bytes + config.storage_write_buffer_bytes) {
    return Status::InvalidArgument(
        "storage_memory_bytes: must be 0 or hold storage_block_cache_bytes plus one "
        "storage_write_buffer_bytes");
  }
  KVATLAS_RETURN_IF_ERROR(ValidateTls(config));
  KVATLAS_ASSIGN_OR_RETURN(auto peers, ParsePeers(config.peers));
  if (!config.raft_listen.empty()) {
    KVATLAS_RETURN_IF_ERROR(ParseHostPort(config.raft_listen).status().WithContext("raft_listen"));
  }
  if (!peers.empty()) {
    auto own = std::find_if(peers.begin(), peers.end(),
                            [&](const auto& p) { return p.first == config.id; });
    if (own == peers.end() && config.raft_listen.empty()) {
      return Status::InvalidArgument("peers: has no entry for this server's id " +
                                     std::to_string(config.id) +
                                     " (a server joining an existing cluster needs raft_listen)");
    }
    if (own != peers.end() && !config.raft_listen.empty() && config.raft_listen != own->second) {
      return Status::InvalidArgument("raft_listen: " + config.raft_listen +
                                     " differs from this server's peers entry " + own->second);
    }
  }
  KVATLAS_RETURN_IF_ERROR(CheckRaftBind(config, peers));
  KVATLAS_RETURN_IF_ERROR(CheckClusterId(config.cluster_id));
  if (!config.cluster_secret_file.empty() && config.cluster_id.empty()) {
    return Status::InvalidArgument(
        "cluster_id: must be set with cluster_secret_file (a name for this cluster, the same on "
        "all its servers)");
  }
  if (config.cluster_secret_file.empty() && !config.insecure && PeersExposed(config)) {
    return Status::InvalidArgument(
        "cluster_secret_file: required for a cluster whose servers use non-loopback addresses "
        "(without it anyone who reaches them can pose as a member); make one with `head -c 32 "
        "/dev/urandom | base64 > FILE`, give every server the same file and a cluster_id, or "
        "pass --insecure");
  }
  if (!config.zmq_listen.empty()) {
    KVATLAS_RETURN_IF_ERROR(ZmqIngest::ValidateEndpoint(config.zmq_listen, /*for_bind=*/true)
                                .WithContext("zmq_listen"));
  }
  KVATLAS_ASSIGN_OR_RETURN(const std::vector<std::string> transports,
                           ParseTransports(config.zmq_allowed_transports));
  KVATLAS_ASSIGN_OR_RETURN(const std::vector<HostPattern> hosts,
                           ParseHostPatterns(config.zmq_allowed_hosts));
  for (size_t i = 0; i < config.publishers.size(); ++i) {
    const Registration& r = config.publishers[i];
    const std::string path = std::string(kPublishersKey) + "[" + std::to_string(i) + "].";
    if (r.PublishesEvents()) {
      KVATLAS_RETURN_IF_ERROR(CheckTransport(path + "endpoint", r.endpoint, transports));
      KVATLAS_RETURN_IF_ERROR(CheckHost(path + "endpoint", r.endpoint, hosts));
    }
    if (!r.replay_endpoint.empty()) {
      KVATLAS_RETURN_IF_ERROR(
          CheckTransport(path + "replay_endpoint", r.replay_endpoint, transports));
      KVATLAS_RETURN_IF_ERROR(CheckHost(path + "replay_endpoint", r.replay_endpoint, hosts));
    }
  }
  // libraft 0.15 does not survive its own log running out of space (a failed segment
  // allocation crashes the leader), so the guard must leave room for the next segment.
  if (config.min_free_disk_bytes < config.raft_segment_bytes) {
    return Status::InvalidArgument(
        "min_free_disk_bytes: " + std::to_string(config.min_free_disk_bytes) +
        " is less than raft_segment_bytes (" + std::to_string(config.raft_segment_bytes) +
        "): writes must stop while the raft log can still allocate its next segment");
  }
  KVATLAS_RETURN_IF_ERROR(CheckTokenSet(config.tokens));
  KVATLAS_RETURN_IF_ERROR(CheckExposure(config));
  if (config.publishers.size() > config.max_registrations) {
    return Status::InvalidArgument(
        std::string(kPublishersKey) + ": " + std::to_string(config.publishers.size()) +
        " entries, more than max_registrations (" + std::to_string(config.max_registrations) + ")");
  }
  return Status::Ok();
}

bool PeersExposed(const Config& config) {
  const Result<std::vector<std::pair<uint64_t, std::string>>> peers = ParsePeers(config.peers);
  if (!peers.has_value() || peers->empty()) return false;
  const auto exposed = [](const std::string& address) {
    const Result<HostPort> parsed = ParseHostPort(address);
    if (!parsed.has_value()) return true;
    const std::string& host = parsed->host;
    return !(host == "localhost" || host == "::1" || host.starts_with("127."));
  };
  if (exposed(config.http_listen)) return true;
  if (!config.raft_listen.empty() && exposed(config.raft_listen)) return true;
  if (!config.raft_bind.empty() && exposed(config.raft_bind)) return true;
  return std::any_of(peers->begin(), peers->end(),
                     [&](const auto& peer) { return exposed(peer.second); });
}

Result<std::vector<std::pair<uint64_t, std::string>>> ParsePeers(std::string_view text) {
  std::vector<std::pair<uint64_t, std::string>> peers;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    start = end + 1;
    const auto bad = [&](const std::string& why) {
      return Status::InvalidArgument("peers: \"" + std::string(item) + "\": " + why +
                                     " (expected ID@HOST:PORT)");
    };
    const size_t at = item.find('@');
    if (at == std::string_view::npos) return bad("no '@'");
    uint64_t id = 0;
    const std::string_view id_text = item.substr(0, at);
    const auto [ptr, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (id_text.empty() || ec != std::errc() || ptr != id_text.data() + id_text.size() || id == 0) {
      return bad("the id must be a positive integer");
    }
    const std::string_view address = item.substr(at + 1);
    if (!ParseHostPort(address).has_value()) return bad("bad HOST:PORT");
    for (const auto& [other, unused] : peers) {
      if (other == id) return bad("id " + std::to_string(id) + " appears twice");
    }
    peers.emplace_back(id, std::string(address));
  }
  return peers;
}

RegistrationLimits RegistrationLimitsOf(const Config& config) {
  RegistrationLimits limits;
  limits.max_registrations = config.max_registrations;
  Result<std::vector<std::string>> transports = ParseTransports(config.zmq_allowed_transports);
  if (transports.has_value()) limits.allowed_transports = std::move(*transports);
  Result<std::vector<HostPattern>> hosts = ParseHostPatterns(config.zmq_allowed_hosts);
  if (hosts.has_value()) limits.allowed_hosts = std::move(*hosts);
  return limits;
}

std::string ConfigToJson(const Config& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const Field& field : kFields) out[std::string(field.key)] = FieldToJson(field, config);
  nlohmann::ordered_json publishers = nlohmann::ordered_json::array();
  for (const Registration& r : config.publishers) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(RegistrationToJson(r).dump());
    j.erase("key");
    publishers.push_back(std::move(j));
  }
  out[std::string(kPublishersKey)] = std::move(publishers);
  nlohmann::ordered_json listeners = nlohmann::ordered_json::array();
  for (const ZmqListenerConfig& l : config.zmq_listeners) listeners.push_back(ListenerToJson(l));
  out[std::string(kListenersKey)] = std::move(listeners);
  nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
  for (const TokenEntry& t : config.tokens) tokens.push_back(TokenToJson(t));
  out[std::string(kTokensKey)] = std::move(tokens);
  return out.dump(2) + "\n";
}

Result<CommandLine> ParseCommandLine(std::span<const std::string> args) {
  CommandLine command;
  // Split "--flag=value" and "--flag value" into pairs; the file goes first.
  std::vector<std::pair<std::string, std::string>> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      command.action = CommandAction::kHelp;
      return command;
    }
    if (arg == "--print-config") {
      command.action = CommandAction::kPrintConfig;
      continue;
    }
    if (!arg.starts_with("--")) {
      return Status::InvalidArgument("unexpected argument \"" + arg + "\"");
    }
    const size_t eq = arg.find('=');
    const Field* field = FindByFlag(arg.substr(0, eq));
    if (field == nullptr && arg.substr(0, eq) != "--config") {
      return Status::InvalidArgument("unknown flag " + arg.substr(0, eq));
    }
    const bool boolean = field != nullptr && std::holds_alternative<bool Config::*>(field->member);
    if (eq != std::string::npos) {
      flags.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    } else if (boolean && (i + 1 == args.size() || args[i + 1].starts_with("--"))) {
      flags.emplace_back(arg, "true");  // `--insecure` alone
    } else if (i + 1 < args.size()) {
      flags.emplace_back(arg, args[++i]);
    } else {
      return Status::InvalidArgument(arg + ": needs a value");
    }
    if (flags.back().first != "--config" && FindByFlag(flags.back().first) == nullptr) {
      return Status::InvalidArgument("unknown flag " + flags.back().first);
    }
  }
  for (const auto& [flag, value] : flags) {
    if (flag != "--config") continue;
    KVATLAS_ASSIGN_OR_RETURN(command.config, LoadConfigFile(value, command.config));
  }
  for (const auto& [flag, value] : flags) {
    if (flag == "--config") continue;
    const Field& field = *FindByFlag(flag);
    KVATLAS_RETURN_IF_ERROR(SetFromText(field, value, &command.config));
    command.config.given.insert(std::string(field.key));
  }
  KVATLAS_RETURN_IF_ERROR(ValidateConfig(command.config));
  return command;
}

std::string UsageText() {
  std::string out =
      "Usage: kvatlas-server [--config FILE] [--FLAG VALUE ...]\n"
      "       kvatlas-server gen-token --name NAME --role read|write|admin\n"
      "       kvatlas-server backup --data-dir DIR --to BACKUP_DIR   (a stopped server)\n"
      "       kvatlas-server restore --from BACKUP_DIR --data-dir NEW_DIR\n"
      "       kvatlas-server verify-backup --from BACKUP_DIR\n"
      "       kvatlas-server COMMAND --help   (a command's own help)\n"
      "\n"
      "Serves the kvatlas KV-cache block index over REST (docs/api.md) and the binary\n"
      "protocol (docs/protocol.md).\n"
      "Flags override the JSON config file, whose keys are the flag names with '_' for '-';\n"
      "--FLAG=VALUE works too. A true/false flag alone means true (--insecure).\n"
      "SIGHUP reloads the access tokens and the TLS certificate (docs/security.md);\n"
      "SIGINT/SIGTERM stop the server, also while it recovers its state (a second one exits\n"
      "at once). gen-token prints a new token and the lines that configure it. backup,\n"
      "restore and verify-backup: docs/operations.md §Backup and restore (a running server\n"
      "is backed up with `kvatlas cluster backup`).\n"
      "Exit codes: 0 stopped cleanly (also while starting), 1 failed to start or failed\n"
      "while running, 2 bad command line or config file, 128 + the signal's number after a\n"
      "second SIGINT/SIGTERM.\n"
      "\n";
  const auto add = [&out](std::string usage, std::string_view help) {
    usage.resize(std::max<size_t>(usage.size() + 2, 40), ' ');
    out += "  " + usage + std::string(help) + "\n";
  };
  add("-h, --help", "print this help and exit");
  add("--version", "print the version and exit");
  add("--print-config", "print the effective configuration as JSON and exit");
  add("--config FILE", "read settings from a JSON config file");
  const Config defaults;
  for (const Field& field : kFields) {
    const std::string alias = field.alias.empty() ? "" : " (also " + std::string(field.alias) + ")";
    add(FlagOf(field.key) + " " + Placeholder(field),
        std::string(field.help) + alias + " (default: " + FieldToJson(field, defaults).dump() +
            ")");
  }
  return out;
}

}  // namespace kvatlas::server
