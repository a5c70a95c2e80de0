// The C ABI over kvatlas::Client. Every entry point catches everything: an exception (in
// practice std::bad_alloc) becomes KVATLAS_INTERNAL and never unwinds into C. Results are
// allocated with malloc so that they are plain C memory, freed by the kvatlas_free_*
// functions.
#include "kvatlas/client/c_api.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/client/client.h"
#include "kvatlas/client/load_reporter.h"
#include "kvatlas/common/json_codec.h"

struct kvatlas_client {
  std::unique_ptr<kvatlas::Client> client;
};

struct kvatlas_load_reporter {
  std::unique_ptr<kvatlas::LoadReporter> reporter;
};

struct kvatlas_error {
  kvatlas_code code;
  std::string message;
};

namespace {

using kvatlas::Status;
using kvatlas::StatusCode;

static_assert(static_cast<int>(StatusCode::kPayloadTooLarge) == KVATLAS_PAYLOAD_TOO_LARGE);
static_assert(static_cast<int>(StatusCode::kUnavailable) == KVATLAS_UNAVAILABLE);
static_assert(static_cast<int>(StatusCode::kDeadlineExceeded) == KVATLAS_DEADLINE_EXCEEDED);

static_assert(static_cast<int>(StatusCode::kUnauthenticated) == KVATLAS_UNAUTHENTICATED);
static_assert(static_cast<int>(StatusCode::kPermissionDenied) == KVATLAS_PERMISSION_DENIED);

// Codes past the C enum (REST-only ones) are reported as internal.
kvatlas_code CodeOf(StatusCode code) {
  const auto n = static_cast<int>(code);
  if (code == StatusCode::kUnauthenticated || code == StatusCode::kPermissionDenied) {
    return static_cast<kvatlas_code>(n);
  }
  return n <= KVATLAS_PAYLOAD_TOO_LARGE ? static_cast<kvatlas_code>(n) : KVATLAS_INTERNAL;
}

kvatlas_code Fail(const Status& status, kvatlas_error** err) {
  const kvatlas_code code = CodeOf(status.code());
  if (err != nullptr) *err = new (std::nothrow) kvatlas_error{code, status.message()};
  return code;
}

kvatlas_code Invalid(const char* message, kvatlas_error** err) {
  return Fail(Status::InvalidArgument(message), err);
}

// Runs `body`, turning any exception into KVATLAS_INTERNAL.
template <typename F>
kvatlas_code Guarded(kvatlas_error** err, F&& body) {
  if (err != nullptr) *err = nullptr;
  try {
    return body();
  } catch (const std::exception& e) {
    return Fail(Status::Internal(std::string("kvatlas C API: ") + e.what()), err);
  } catch (...) {
    return Fail(Status::Internal("kvatlas C API: unknown exception"), err);
  }
}

// A malloc'd NUL-terminated copy; throws bad_alloc (caught by Guarded) when out of memory.
char* CopyString(std::string_view s) {
  auto* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

template <typename T>
T* AllocArray(size_t n) {
  if (n == 0) return nullptr;
  auto* out = static_cast<T*>(std::calloc(n, sizeof(T)));
  if (out == nullptr) throw std::bad_alloc();
  return out;
}

Status ToContext(const kvatlas_context* in, kvatlas::ContextKey* out) {
  if (in == nullptr || in->model == nullptr || in->model[0] == '\0' || in->block_size == 0) {
    return Status::InvalidArgument("context: needs a model and a block_size > 0");
  }
  if (in->tenant != nullptr && in->tenant[0] != '\0') out->tenant = in->tenant;
  out->model = in->model;
  if (in->lora_name != nullptr) out->lora_name = in->lora_name;
  out->block_size = in->block_size;
  if (in->salt != nullptr) out->salt = in->salt;
  return Status::Ok();
}

// Fills a calloc'd result; on bad_alloc the partly built result is freed by the caller.
void FillLookup(const kvatlas::LookupAnswer& answer, kvatlas_lookup_result* out) {
  out->revision = answer.revision;
  out->blocks_queried = answer.blocks_queried;
  out->blocks_found = answer.blocks_found;
  out->instances = AllocArray<kvatlas_instance_match>(answer.instances.size());
  for (const kvatlas::InstanceMatch& m : answer.instances) {
    kvatlas_instance_match& o = out->instances[out->num_instances];
    o.instance_id = CopyString(m.instance_id);
    ++out->num_instances;
    o.longest = m.blocks.disk;
    o.gpu = m.blocks.gpu;
    o.cpu = m.blocks.cpu;
    o.disk = m.blocks.disk;
    o.cpu_only = m.blocks.cpu_only;
    o.disk_only = m.blocks.disk_only;
  }
  out->shared = AllocArray<kvatlas_shared_match>(answer.shared.size());
  for (const kvatlas::SharedMatch& m : answer.shared) {
    kvatlas_shared_match& o = out->shared[out->num_shared];
    ++out->num_shared;
    o.backend_id = CopyString(m.backend_id);
    o.dp_rank = m.dp_rank;
    o.blocks = m.blocks;
    o.locations = AllocArray<char*>(m.locations.size());
    for (const std::string& location : m.locations) {
      o.locations[o.num_locations] = CopyString(location);
      ++o.num_locations;
    }
  }
}

// Checks the arguments, builds the request (`fill` sets the query) and runs it.
template <typename Fill>
kvatlas_code Lookup(kvatlas_client* client, const kvatlas_context* context, const void* query,
                    size_t query_size, kvatlas_lookup_result** out, kvatlas_error** err,
                    Fill&& fill) {
  if (client == nullptr || out == nullptr || (query == nullptr && query_size > 0)) {
    return Invalid("lookup: NULL argument", err);
  }
  *out = nullptr;
  kvatlas::LookupRequest request;
  if (Status s = ToContext(context, &request.context); !s.ok()) return Fail(s, err);
  fill(&request);
  kvatlas::Result<kvatlas::LookupAnswer> answer = client->client->Lookup(std::move(request));
  if (!answer) return Fail(answer.error(), err);
  auto* result = static_cast<kvatlas_lookup_result*>(std::calloc(1, sizeof(kvatlas_lookup_result)));
  if (result == nullptr) throw std::bad_alloc();
  try {
    FillLookup(*answer, result);
  } catch (...) {
    kvatlas_free_lookup_result(result);
    throw;
  }
  *out = result;
  return KVATLAS_OK;
}

kvatlas_code Open(const kvatlas_open_options& open, kvatlas_client** out, kvatlas_error** err) {
  if (out == nullptr) return Invalid("kvatlas_open: out is NULL", err);
  *out = nullptr;
  const char* endpoints = open.endpoints;
  const int64_t timeout_ms = open.timeout_ms;
  const kvatlas_tls_options* tls = open.tls;
  if (endpoints == nullptr) return Invalid("kvatlas_open: endpoints is NULL", err);
  if (timeout_ms <= 0) return Invalid("kvatlas_open: timeout_ms must be > 0", err);
  kvatlas::ClientOptions options;
  if (open.token != nullptr) options.token = open.token;
  std::string_view list(endpoints);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) options.endpoints.emplace_back(item);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  options.connect_timeout = std::chrono::milliseconds(timeout_ms);
  options.default_deadline = std::chrono::milliseconds(timeout_ms);
  if (tls != nullptr) {
    const auto text = [](const char* s) { return s == nullptr ? std::string() : std::string(s); };
    options.tls.enabled = true;
    options.tls.ca_file = text(tls->ca_file);
    options.tls.cert_file = text(tls->cert_file);
    options.tls.key_file = text(tls->key_file);
    options.tls.server_name = text(tls->server_name);
  }
  kvatlas::Result<std::unique_ptr<kvatlas::Client>> client =
      kvatlas::Client::Connect(std::move(options));
  if (!client) return Fail(client.error(), err);
  *out = new kvatlas_client{std::move(client).value()};
  return KVATLAS_OK;
}

}  // namespace

extern "C" {

kvatlas_code kvatlas_error_code(const kvatlas_error* err) {
  return err == nullptr ? KVATLAS_OK : err->code;
}

const char* kvatlas_error_message(const kvatlas_error* err) {
  return err == nullptr ? "" : err->message.c_str();
}

void kvatlas_error_free(kvatlas_error* err) { delete err; }

const char* kvatlas_code_name(kvatlas_code code) {
  const bool known = (code >= KVATLAS_OK && code <= KVATLAS_PAYLOAD_TOO_LARGE) ||
                     code == KVATLAS_UNAUTHENTICATED || code == KVATLAS_PERMISSION_DENIED;
  if (!known) return "unknown";
  // WireNameOf returns views of string literals: NUL-terminated, static storage.
  return kvatlas::WireNameOf(static_cast<StatusCode>(code)).data();
}

kvatlas_code kvatlas_open(const char* endpoints, int64_t timeout_ms, kvatlas_client** out,
                          kvatlas_error** err) {
  const kvatlas_open_options options{endpoints, timeout_ms, nullptr, nullptr};
  return Guarded(err, [&] { return Open(options, out, err); });
}

kvatlas_code kvatlas_open_tls(const char* endpoints, int64_t timeout_ms,
                              const kvatlas_tls_options* tls, kvatlas_client** out,
                              kvatlas_error** err) {
  return Guarded(err, [&] {
    if (tls == nullptr) return Invalid("kvatlas_open_tls: tls is NULL", err);
    const kvatlas_open_options options{endpoints, timeout_ms, nullptr, tls};
    return Open(options, out, err);
  });
}

kvatlas_code kvatlas_open_with(const kvatlas_open_options* open, kvatlas_client** out,
                               kvatlas_error** err) {
  return Guarded(err, [&] {
    if (open == nullptr) {
      if (out != nullptr) *out = nullptr;
      return Invalid("kvatlas_open: options is NULL", err);
    }
    return Open(*open, out, err);
  });
}

void kvatlas_close(kvatlas_client* client) { delete client; }

kvatlas_code kvatlas_lookup_tokens(kvatlas_client* client, const kvatlas_context* context,
                                   const uint32_t* tokens, size_t num_tokens,
                                   kvatlas_lookup_result** out, kvatlas_error** err) {
  return Guarded(err, [&] {
    return Lookup(client, context, tokens, num_tokens, out, err, [&](kvatlas::LookupRequest* r) {
      r->token_ids.assign(tokens, tokens + num_tokens);
    });
  });
}

kvatlas_code kvatlas_lookup_hashes(kvatlas_client* client, const kvatlas_context* context,
                                   const uint64_t* hashes, size_t num_hashes,
                                   kvatlas_lookup_result** out, kvatlas_error** err) {
  return Guarded(err, [&] {
    return Lookup(client, context, hashes, num_hashes, out, err, [&](kvatlas::LookupRequest* r) {
      r->by_hash = true;
      r->seq_hashes.assign(hashes, hashes + num_hashes);
    });
  });
}

void kvatlas_free_lookup_result(kvatlas_lookup_result* result) {
  if (result == nullptr) return;
  for (size_t i = 0; i < result->num_instances; ++i) std::free(result->instances[i].instance_id);
  std::free(result->instances);
  for (size_t i = 0; i < result->num_shared; ++i) {
    kvatlas_shared_match& m = result->shared[i];
    std::free(m.backend_id);
    for (size_t j = 0; j < m.num_locations; ++j) std::free(m.locations[j]);
    std::free(m.locations);
  }
  std::free(result->shared);
  std::free(result);
}

kvatlas_code kvatlas_ingest_json(kvatlas_client* client, const char* json, size_t json_len,
                                 kvatlas_ingest_result* out, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (client == nullptr || json == nullptr || out == nullptr) {
      return Invalid("kvatlas_ingest_json: NULL argument", err);
    }
    kvatlas::Result<std::vector<kvatlas::BlockEvent>> events =
        kvatlas::DecodeEventBatch(std::string_view(json, json_len));
    if (!events) return Fail(events.error(), err);
    kvatlas::Result<kvatlas::IngestAnswer> answer = client->client->Ingest(std::move(*events));
    if (!answer) return Fail(answer.error(), err);
    *out = kvatlas_ingest_result{answer->revision, answer->events, answer->blocks};
    return KVATLAS_OK;
  });
}

kvatlas_code kvatlas_stats_json(kvatlas_client* client, char** out_json, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (client == nullptr || out_json == nullptr) {
      return Invalid("kvatlas_stats_json: NULL argument", err);
    }
    *out_json = nullptr;
    kvatlas::Result<kvatlas::StatsAnswer> stats = client->client->Stats();
    if (!stats) return Fail(stats.error(), err);
    *out_json = CopyString(stats->json);
    return KVATLAS_OK;
  });
}

void kvatlas_free_string(char* s) { std::free(s); }

kvatlas_code kvatlas_ping(kvatlas_client* client, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (client == nullptr) return Invalid("kvatlas_ping: NULL argument", err);
    Status s = client->client->Ping();
    return s.ok() ? KVATLAS_OK : Fail(s, err);
  });
}

kvatlas_code kvatlas_load_reporter_create(kvatlas_client* client, const char* router_id,
                                          int64_t interval_ms, uint32_t ttl_ms,
                                          kvatlas_load_reporter** out, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (out != nullptr) *out = nullptr;
    if (client == nullptr || router_id == nullptr || out == nullptr) {
      return Invalid("kvatlas_load_reporter_create: NULL argument", err);
    }
    if (interval_ms < 0) return Invalid("interval_ms: must be >= 0 (0: 100 ms)", err);
    kvatlas::LoadReporterOptions options;
    options.router_id = router_id;
    if (interval_ms > 0) options.interval = std::chrono::milliseconds(interval_ms);
    if (ttl_ms > 0) options.ttl_ms = ttl_ms;
    kvatlas::Result<std::unique_ptr<kvatlas::LoadReporter>> reporter =
        kvatlas::LoadReporter::Create(client->client.get(), std::move(options));
    if (!reporter) return Fail(reporter.error(), err);
    *out = new kvatlas_load_reporter{std::move(reporter).value()};
    return KVATLAS_OK;
  });
}

kvatlas_code kvatlas_load_reporter_route_started(kvatlas_load_reporter* reporter,
                                                 const char* instance, uint32_t dp_rank,
                                                 uint64_t prompt_blocks, uint64_t decode_blocks,
                                                 uint64_t* token, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (reporter == nullptr || instance == nullptr || token == nullptr) {
      return Invalid("kvatlas_load_reporter_route_started: NULL argument", err);
    }
    if (instance[0] == '\0') return Invalid("instance: must not be empty", err);
    *token = reporter->reporter->RouteStarted(instance, dp_rank, prompt_blocks, decode_blocks);
    return KVATLAS_OK;
  });
}

void kvatlas_load_reporter_prefill_done(kvatlas_load_reporter* reporter, uint64_t token) {
  if (reporter == nullptr) return;
  (void)Guarded(nullptr, [&] {
    reporter->reporter->PrefillDone(token);
    return KVATLAS_OK;
  });
}

void kvatlas_load_reporter_route_finished(kvatlas_load_reporter* reporter, uint64_t token) {
  if (reporter == nullptr) return;
  (void)Guarded(nullptr, [&] {
    reporter->reporter->RouteFinished(token);
    return KVATLAS_OK;
  });
}

kvatlas_code kvatlas_load_reporter_flush(kvatlas_load_reporter* reporter, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (reporter == nullptr) return Invalid("kvatlas_load_reporter_flush: NULL argument", err);
    Status s = reporter->reporter->Flush();
    return s.ok() ? KVATLAS_OK : Fail(s, err);
  });
}

void kvatlas_load_reporter_destroy(kvatlas_load_reporter* reporter) {
  // The destructor sends the leaving report; a failure to send is the lease's to end.
  (void)Guarded(nullptr, [&] {
    delete reporter;
    return KVATLAS_OK;
  });
}

kvatlas_code kvatlas_fetch_loads_json(kvatlas_client* client, char** out_json,
                                      kvatlas_error** err) {
  return Guarded(err, [&] {
    if (client == nullptr || out_json == nullptr) {
      return Invalid("kvatlas_fetch_loads_json: NULL argument", err);
    }
    *out_json = nullptr;
    kvatlas::Result<kvatlas::protocol::LoadViewAnswer> view = client->client->FetchLoads();
    if (!view) return Fail(view.error(), err);
    nlohmann::json routers = nlohmann::json::array();
    for (const kvatlas::protocol::LoadViewRouter& router : view->routers) {
      nlohmann::json loads = nlohmann::json::array();
      for (const kvatlas::InstanceLoad& load : router.loads) {
        loads.push_back({{"instance_id", load.instance_id},
                         {"dp_rank", load.dp_rank},
                         {"prefill_blocks", load.prefill_blocks},
                         {"decode_blocks", load.decode_blocks}});
      }
      routers.push_back({{"router_id", router.router_id},
                         {"expires_in_ms", router.expires_in_ms},
                         {"loads", std::move(loads)}});
    }
    *out_json = CopyString(
        nlohmann::json{{"revision", view->revision}, {"routers", std::move(routers)}}.dump());
    return KVATLAS_OK;
  });
}

}  // extern "C"
