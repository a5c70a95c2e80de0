// The C ABI over kvatlas::Client. Every entry point catches everything: an exception (in
// practice std::bad_alloc) becomes KVATLAS_INTERNAL and never unwinds into C. Results are
// allocated with malloc so that they are plain C memory, freed by the kvatlas_free_*
// functions.
#include "kvatlas/client/c_api.h"

#include <cstddef>
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
static_assert(static_cast<int>(StatusCode::kWrongGroup) == KVATLAS_WRONG_GROUP);

// Codes past the C enum (REST-only ones) are reported as internal.
kvatlas_code CodeOf(StatusCode code) {
  const auto n = static_cast<int>(code);
  if (code == StatusCode::kUnauthenticated || code == StatusCode::kPermissionDenied ||
      code == StatusCode::kWrongGroup) {
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

// Hands `answer` to the caller as a calloc'd C result built by `fill`; a partly built one is
// freed with `release` before the exception (bad_alloc) goes on to Guarded.
template <typename Out, typename Answer, typename Fill, typename Release>
void Publish(const Answer& answer, Out** out, Fill&& fill, Release&& release) {
  auto* result = static_cast<Out*>(std::calloc(1, sizeof(Out)));
  if (result == nullptr) throw std::bad_alloc();
  try {
    fill(answer, result);
  } catch (...) {
    release(result);
    throw;
  }
  *out = result;
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
  Publish(*answer, out, FillLookup, kvatlas_free_lookup_result);
  return KVATLAS_OK;
}

// The sizes of kvatlas_route_options this library knows: its first version's (up to
// `reserved`), whose callers get the cost terms' defaults, and today's.
constexpr size_t kRouteOptionsSizeV1 = offsetof(kvatlas_route_options, replica_credit);
constexpr size_t kRouteOptionsSize = sizeof(kvatlas_route_options);

Status ToRouteOptions(const kvatlas_route_options* in, kvatlas::RoutingOptions* out) {
  if (in == nullptr) return Status::Ok();
  if (in->struct_size != kRouteOptionsSize && in->struct_size != kRouteOptionsSizeV1) {
    return Status::InvalidArgument("options.struct_size: must be sizeof(kvatlas_route_options) = " +
                                   std::to_string(kRouteOptionsSize) + " (or " +
                                   std::to_string(kRouteOptionsSizeV1) +
                                   ", its first version's; kvatlas_route_options_init sets it), "
                                   "got " +
                                   std::to_string(in->struct_size));
  }
  if (in->reserved != 0) return Status::InvalidArgument("options.reserved: must be 0");
  out->weights = kvatlas::TierWeights{in->gpu, in->cpu, in->disk, in->shared, in->predicted};
  out->prefill_scale = in->prefill_scale;
  out->queue_scale = in->queue_scale;
  out->decode_scale = in->decode_scale;
  out->temperature = in->temperature;
  if (in->has_seed != 0) out->seed = in->seed;
  if (in->struct_size >= kRouteOptionsSize) {
    out->replica_credit = in->replica_credit;
    out->excess_queue_scale = in->excess_queue_scale;
    out->excess_queue_epsilon = in->excess_queue_epsilon;
  }
  return Status::Ok();
}

Status ToCandidates(const kvatlas_route_candidate* in, size_t n,
                    std::vector<kvatlas::RouteCandidate>* out) {
  out->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const kvatlas_route_candidate& c = in[i];
    const std::string at = "candidates[" + std::to_string(i) + "].";
    if (c.instance_id == nullptr || c.instance_id[0] == '\0') {
      return Status::InvalidArgument(at + "instance_id: must be a non-empty string");
    }
    if (c.reserved != 0) return Status::InvalidArgument(at + "reserved: must be 0");
    kvatlas::RouteCandidate& o = out->emplace_back();
    o.instance_id = c.instance_id;
    if (c.has_dp_rank != 0) o.dp_rank = c.dp_rank;
    o.queued_prefill_tokens = c.queued_prefill_tokens;
    o.active_decode_blocks = c.active_decode_blocks;
    o.predict = c.predict != 0;
  }
  return Status::Ok();
}

void FillRoute(const kvatlas::RoutingAnswer& answer, kvatlas_route_result* out) {
  out->revision = answer.revision;
  out->prompt_blocks = answer.prompt_blocks;
  out->blocks_found = answer.blocks_found;
  out->ranked = AllocArray<kvatlas_scored_candidate>(answer.ranked.size());
  for (const kvatlas::ScoredCandidate& s : answer.ranked) {
    kvatlas_scored_candidate& o = out->ranked[out->num_ranked];
    o.instance_id = CopyString(s.candidate.instance_id);
    ++out->num_ranked;
    o.index = s.index;
    o.dp_rank = s.candidate.dp_rank.value_or(0);
    o.has_dp_rank = s.candidate.dp_rank.has_value() ? 1 : 0;
    o.queued_prefill_tokens = s.candidate.queued_prefill_tokens;
    o.active_decode_blocks = s.candidate.active_decode_blocks;
    o.matched_gpu = s.matched.gpu;
    o.matched_cpu = s.matched.cpu;
    o.matched_disk = s.matched.disk;
    o.matched_shared = s.matched.shared;
    o.matched_predicted = s.matched.predicted;
    o.gpu_blocks = s.gpu_blocks;
    o.cpu_blocks = s.cpu_blocks;
    o.disk_blocks = s.disk_blocks;
    o.shared_blocks = s.shared_blocks;
    o.predicted_blocks = s.predicted_blocks;
    o.credit = s.credit;
    o.new_prefill_blocks = s.new_prefill_blocks;
    o.queued_prefill_blocks = s.queued_prefill_blocks;
    o.prefill_cost = s.prefill_cost;
    o.decode_cost = s.decode_cost;
    o.cost = s.cost;
    o.probability = s.probability;
  }
}

// As Lookup, for a route: the query, the candidates and the options.
template <typename Fill>
kvatlas_code Route(kvatlas_client* client, const kvatlas_context* context, const void* query,
                   size_t query_size, const kvatlas_route_candidate* candidates,
                   size_t num_candidates, const kvatlas_route_options* options,
                   kvatlas_route_result** out, kvatlas_error** err, Fill&& fill) {
  if (client == nullptr || out == nullptr || (query == nullptr && query_size > 0) ||
      (candidates == nullptr && num_candidates > 0)) {
    return Invalid("route: NULL argument", err);
  }
  *out = nullptr;
  kvatlas::RoutingRequest request;
  if (Status s = ToContext(context, &request.lookup.context); !s.ok()) return Fail(s, err);
  if (Status s = ToCandidates(candidates, num_candidates, &request.candidates); !s.ok()) {
    return Fail(s, err);
  }
  if (Status s = ToRouteOptions(options, &request.options); !s.ok()) return Fail(s, err);
  fill(&request.lookup);
  kvatlas::Result<kvatlas::RoutingAnswer> answer = client->client->Route(std::move(request));
  if (!answer) return Fail(answer.error(), err);
  Publish(*answer, out, FillRoute, kvatlas_free_route_result);
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

void kvatlas_route_options_init(kvatlas_route_options* options) {
  if (options == nullptr) return;
  const kvatlas::RoutingOptions d;
  *options = kvatlas_route_options{kRouteOptionsSize,
                                   d.weights.gpu,
                                   d.weights.cpu,
                                   d.weights.disk,
                                   d.weights.shared,
                                   d.weights.predicted,
                                   d.prefill_scale,
                                   d.queue_scale,
                                   d.decode_scale,
                                   d.temperature,
                                   0,
                                   0,
                                   0,
                                   d.replica_credit,
                                   d.excess_queue_scale,
                                   d.excess_queue_epsilon};
}

kvatlas_code kvatlas_route_tokens(kvatlas_client* client, const kvatlas_context* context,
                                  const uint32_t* tokens, size_t num_tokens,
                                  const kvatlas_route_candidate* candidates, size_t num_candidates,
                                  const kvatlas_route_options* options, kvatlas_route_result** out,
                                  kvatlas_error** err) {
  return Guarded(err, [&] {
    return Route(
        client, context, tokens, num_tokens, candidates, num_candidates, options, out, err,
        [&](kvatlas::LookupRequest* r) { r->token_ids.assign(tokens, tokens + num_tokens); });
  });
}

kvatlas_code kvatlas_route_hashes(kvatlas_client* client, const kvatlas_context* context,
                                  const uint64_t* hashes, size_t num_hashes,
                                  const kvatlas_route_candidate* candidates, size_t num_candidates,
                                  const kvatlas_route_options* options, kvatlas_route_result** out,
                                  kvatlas_error** err) {
  return Guarded(err, [&] {
    return Route(client, context, hashes, num_hashes, candidates, num_candidates, options, out, err,
                 [&](kvatlas::LookupRequest* r) {
                   r->by_hash = true;
                   r->seq_hashes.assign(hashes, hashes + num_hashes);
                 });
  });
}

void kvatlas_free_route_result(kvatlas_route_result* result) {
  if (result == nullptr) return;
  for (size_t i = 0; i < result->num_ranked; ++i) std::free(result->ranked[i].instance_id);
  std::free(result->ranked);
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

kvatlas_code kvatlas_record_prediction(kvatlas_client* client, const kvatlas_context* context,
                                       const char* backend_id, uint32_t dp_rank,
                                       const uint64_t* hashes, size_t num_hashes,
                                       uint32_t* out_queued, kvatlas_error** err) {
  return Guarded(err, [&] {
    if (client == nullptr || backend_id == nullptr || (hashes == nullptr && num_hashes > 0)) {
      return Invalid("kvatlas_record_prediction: NULL argument", err);
    }
    kvatlas::ContextKey key;
    if (Status s = ToContext(context, &key); !s.ok()) return Fail(s, err);
    kvatlas::Result<uint32_t> queued = client->client->RecordPrediction(
        key, kvatlas::HolderKey{backend_id, dp_rank},
        std::vector<kvatlas::BlockKey>(hashes, hashes + num_hashes));
    if (!queued) return Fail(queued.error(), err);
    if (out_queued != nullptr) *out_queued = *queued;
    return KVATLAS_OK;
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
    if (interval_ms < 0) return Invalid("interval_ms: must be >= 0 (0: 10 ms)", err);
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
