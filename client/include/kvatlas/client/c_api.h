/* The kvatlas C ABI: a C interface to kvatlas::Client for schedulers written in C, Rust,
 * Go or Python (ctypes/cffi), exported by libkvatlas.so.N and stable within that SONAME
 * (docs/abi.md). Opaque handles and plain structs only; no C++ type or exception crosses
 * it. Every function that can fail returns a kvatlas_code and, when `err` is not NULL,
 * stores a kvatlas_error the caller frees with kvatlas_error_free.
 *
 * Thread-safety: a kvatlas_client may be used from many threads at once (calls pipeline
 * over its connections), except kvatlas_close, which must not race with other calls on the
 * same handle. Results are owned by the caller until freed. */
#ifndef KVATLAS_CLIENT_C_API_H_
#define KVATLAS_CLIENT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "kvatlas/common/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The numbers of status_codes.def (stable, part of the wire protocol). */
typedef enum kvatlas_code {
  KVATLAS_OK = 0,
  KVATLAS_INVALID_ARGUMENT = 1,
  KVATLAS_NOT_FOUND = 2,
  KVATLAS_ALREADY_EXISTS = 3,
  KVATLAS_FAILED_PRECONDITION = 4,
  KVATLAS_NOT_LEADER = 5,
  KVATLAS_UNAVAILABLE = 6, /* no connection or connection lost: safe to retry reads */
  KVATLAS_DEADLINE_EXCEEDED = 7,
  KVATLAS_RESOURCE_EXHAUSTED = 8,
  KVATLAS_CORRUPTION = 9,
  KVATLAS_IO_ERROR = 10,
  KVATLAS_INTERNAL = 11,
  KVATLAS_PAYLOAD_TOO_LARGE = 12,
  KVATLAS_UNAUTHENTICATED = 18,   /* no token, or one the server refuses (or removed) */
  KVATLAS_PERMISSION_DENIED = 19, /* the token's role does not allow the call */
  KVATLAS_WRONG_GROUP = 20 /* a group refused a write of a context just placed elsewhere: resend */
} kvatlas_code;

typedef struct kvatlas_client kvatlas_client; /* opaque */
typedef struct kvatlas_error kvatlas_error;   /* opaque */

/* The error's code and message ("field: problem"). The message lives as long as `err`. */
KVATLAS_EXPORT kvatlas_code kvatlas_error_code(const kvatlas_error* err);
KVATLAS_EXPORT const char* kvatlas_error_message(const kvatlas_error* err);
KVATLAS_EXPORT void kvatlas_error_free(kvatlas_error* err); /* NULL is a no-op */
/* "invalid_argument", "unavailable", ...; "unknown" for other values. Static storage. */
KVATLAS_EXPORT const char* kvatlas_code_name(kvatlas_code code);

/* Connects to `endpoints`, a comma-separated list of "host:port" (tried in order).
 * `timeout_ms` (> 0) bounds each connect attempt and is every call's deadline.
 * On success *out is a handle to release with kvatlas_close. Returns
 * KVATLAS_INVALID_ARGUMENT for a malformed list, KVATLAS_UNAVAILABLE if no endpoint
 * accepted a connection. */
KVATLAS_EXPORT kvatlas_code kvatlas_open(const char* endpoints, int64_t timeout_ms,
                                         kvatlas_client** out, kvatlas_error** err);
/* TLS for kvatlas_open_tls and kvatlas_open_with (docs/security.md, TLS). Zero-initialise
 * it, then set what you need; NULL fields take the defaults. */
typedef struct kvatlas_tls_options {
  const char* ca_file;     /* PEM CA certificates the server's must chain to; NULL: the
                              system's trust store */
  const char* cert_file;   /* this client's certificate chain (PEM), for servers that
                              require client certificates; with key_file, or NULL */
  const char* key_file;    /* its private key (PEM, unencrypted) */
  const char* server_name; /* the name the server's certificate must carry; NULL: each
                              endpoint's host */
} kvatlas_tls_options;

/* kvatlas_open over TLS 1.2 or later. A certificate the client does not trust (another CA,
 * expired, another name) fails the connect: KVATLAS_UNAVAILABLE with the reason
 * ("... certificate has expired"); unreadable files are KVATLAS_INVALID_ARGUMENT. */
KVATLAS_EXPORT kvatlas_code kvatlas_open_tls(const char* endpoints, int64_t timeout_ms,
                                             const kvatlas_tls_options* tls, kvatlas_client** out,
                                             kvatlas_error** err);

/* kvatlas_open with more options. Fields added later go at the end; zero-initialise the
 * struct ({0}) so that they take their defaults (source compatibility; a new field is a new
 * SONAME for binaries, docs/abi.md). */
typedef struct kvatlas_open_options {
  const char* endpoints;          /* as kvatlas_open's */
  int64_t timeout_ms;             /* as kvatlas_open's */
  const char* token;              /* the access token (docs/security.md); NULL or "" = none */
  const kvatlas_tls_options* tls; /* TLS as kvatlas_open_tls's; NULL = plain TCP */
} kvatlas_open_options;
/* As kvatlas_open (or kvatlas_open_tls with `tls`); also KVATLAS_UNAUTHENTICATED when the
 * server refuses the token. */
KVATLAS_EXPORT kvatlas_code kvatlas_open_with(const kvatlas_open_options* options,
                                              kvatlas_client** out, kvatlas_error** err);

/* Fails calls still pending, closes the connections, frees the handle. NULL is a no-op. */
KVATLAS_EXPORT void kvatlas_close(kvatlas_client* client);

/* A hash namespace. NULL strings take the defaults: tenant "default", no LoRA, no salt.
 * `model` is required and `block_size` must be > 0. */
typedef struct kvatlas_context {
  const char* tenant;
  const char* model;
  const char* lora_name;
  uint32_t block_size;
  const char* salt;
} kvatlas_context;

/* One instance's longest cached prefix, in blocks. gpu <= cpu <= disk are cumulative by
 * tier (GPU, GPU+CPU, GPU+CPU+DISK = longest); cpu_only and disk_only count that medium
 * alone. Values are the maximum over the instance's dp ranks. */
typedef struct kvatlas_instance_match {
  char* instance_id;
  uint32_t longest;
  uint32_t gpu;
  uint32_t cpu;
  uint32_t disk;
  uint32_t cpu_only;
  uint32_t disk_only;
} kvatlas_instance_match;

/* A shared storage backend holding a prefix; locations[i] is block i's descriptor. */
typedef struct kvatlas_shared_match {
  char* backend_id;
  uint32_t dp_rank;
  uint32_t blocks;
  size_t num_locations;
  char** locations;
} kvatlas_shared_match;

/* A lookup answer (see POST /v1/lookup in docs/api.md). Instances are ordered by longest
 * match, descending. Free with kvatlas_free_lookup_result. */
typedef struct kvatlas_lookup_result {
  uint64_t revision;
  uint32_t blocks_queried;
  uint32_t blocks_found;
  size_t num_instances;
  kvatlas_instance_match* instances;
  size_t num_shared;
  kvatlas_shared_match* shared;
} kvatlas_lookup_result;

/* The longest cached prefix of a prompt given as tokens (only complete blocks count) or as
 * its block keys (standard rolling hashes). On success *out is a result to free with
 * kvatlas_free_lookup_result. */
KVATLAS_EXPORT kvatlas_code kvatlas_lookup_tokens(kvatlas_client* client,
                                                  const kvatlas_context* context,
                                                  const uint32_t* tokens, size_t num_tokens,
                                                  kvatlas_lookup_result** out, kvatlas_error** err);
KVATLAS_EXPORT kvatlas_code kvatlas_lookup_hashes(kvatlas_client* client,
                                                  const kvatlas_context* context,
                                                  const uint64_t* hashes, size_t num_hashes,
                                                  kvatlas_lookup_result** out, kvatlas_error** err);
KVATLAS_EXPORT void kvatlas_free_lookup_result(kvatlas_lookup_result* result); /* NULL is a no-op */

typedef struct kvatlas_ingest_result {
  uint64_t revision; /* the revision the batch was applied at */
  uint64_t events;
  uint64_t blocks;
} kvatlas_ingest_result;

/* Applies a batch of events given as the JSON body of POST /v1/events (an array of RFC
 * #1527 events, or {"events": [...]}); `json` need not be NUL-terminated. The batch is
 * applied atomically or not at all (KVATLAS_INVALID_ARGUMENT names the bad field). */
KVATLAS_EXPORT kvatlas_code kvatlas_ingest_json(kvatlas_client* client, const char* json,
                                                size_t json_len, kvatlas_ingest_result* out,
                                                kvatlas_error** err);

/* The stats document of GET /v1/stats; *out_json is NUL-terminated, freed with
 * kvatlas_free_string. */
KVATLAS_EXPORT kvatlas_code kvatlas_stats_json(kvatlas_client* client, char** out_json,
                                               kvatlas_error** err);
KVATLAS_EXPORT void kvatlas_free_string(char* s); /* NULL is a no-op */

/* A round trip touching no state. */
KVATLAS_EXPORT kvatlas_code kvatlas_ping(kvatlas_client* client, kvatlas_error** err);

/* --- Routing (docs/routing.md) -----------------------------------------------------------
 * A routing decision (binary kRoute, as POST /v1/route): the lookup over every instance,
 * then the candidates ranked by the common cost. */

/* A routing target and its current load. Zero-initialise it ({0}), then set what you need.
 * Its size is fixed within a SONAME: a later field will use `reserved` or come with new
 * functions (docs/abi.md). */
typedef struct kvatlas_route_candidate {
  const char* instance_id;        /* required, non-empty */
  uint32_t dp_rank;               /* with has_dp_rank: that rank's match is used */
  uint32_t has_dp_rank;           /* nonzero: use dp_rank; 0: the instance's best over its ranks */
  uint64_t queued_prefill_tokens; /* prefill work waiting on the candidate */
  uint64_t active_decode_blocks;  /* KV blocks of the requests it is decoding */
  /* Nonzero: the instance publishes no KV events (approximate mode, docs/routing.md
   * §Approximate mode). When a route picks it, the server records the request's blocks as
   * predicted on it for a while (in a batch, within about 50 ms), and later routes credit
   * them (kvatlas_scored_candidate.predicted_blocks). */
  uint32_t predict;
  uint32_t reserved; /* must be 0 */
} kvatlas_route_candidate;

/* The cost model's knobs (docs/routing.md, docs/api.md §Routing). Set them from
 * kvatlas_route_options_init (the server's defaults), then change what you need. Fields
 * added later go at the end: a later library of the same SONAME reads only the fields
 * `struct_size` covers (the others take their defaults), so programs built against this
 * header keep working; a library older than the header refuses a larger struct_size
 * (KVATLAS_INVALID_ARGUMENT naming it). */
typedef struct kvatlas_route_options {
  size_t struct_size;   /* sizeof(kvatlas_route_options), as kvatlas_route_options_init sets */
  double gpu;           /* tier weights, each 0 … 1: 1.0 */
  double cpu;           /* 0.75 */
  double disk;          /* 0.25 */
  double shared;        /* 0.5 */
  double predicted;     /* a predicted block (approximate mode): 1.0 */
  double prefill_scale; /* 1.0 */
  double queue_scale;   /* 0.4 */
  double decode_scale;  /* 0.01 */
  double temperature;   /* 0: lowest cost first; > 0: sampled */
  uint64_t seed;        /* the sampler's seed, with has_seed */
  uint32_t has_seed;    /* nonzero: use seed; 0: a random seed per call */
  uint32_t reserved;    /* must be 0 */
  /* Added second (a struct_size ending at `reserved` gives them their defaults). The
   * relative cost terms (docs/routing.md §The cost); 0 turns each off. */
  double replica_credit;       /* 0 … 1: 1.0 */
  double excess_queue_scale;   /* 0.7 */
  double excess_queue_epsilon; /* 0.5 */
} kvatlas_route_options;

/* Sets `options` to the server's defaults (and struct_size). NULL is a no-op. */
KVATLAS_EXPORT void kvatlas_route_options_init(kvatlas_route_options* options);

/* One candidate's score and how it was reached (docs/api.md §Routing). matched_gpu <=
 * matched_cpu <= matched_disk are cumulative prefixes; the *_blocks counts are the blocks
 * served from each tier, each counted once. */
typedef struct kvatlas_scored_candidate {
  size_t index; /* the candidate's position in the request */
  char* instance_id;
  uint32_t dp_rank;
  uint32_t has_dp_rank;
  uint64_t queued_prefill_tokens;
  uint64_t active_decode_blocks;
  uint32_t matched_gpu;
  uint32_t matched_cpu;
  uint32_t matched_disk;
  uint32_t matched_shared;
  /* The candidate's predicted prefix (approximate mode); answered only to routes with a
   * `predict` candidate (or a `predicted` weight other than 1), 0 otherwise. */
  uint32_t matched_predicted;
  uint32_t gpu_blocks;
  uint32_t cpu_blocks;
  uint32_t disk_blocks;
  uint32_t shared_blocks;
  uint32_t predicted_blocks; /* credited as predicted: past disk, before shared; as above */
  double credit;
  double new_prefill_blocks;
  double queued_prefill_blocks;
  double prefill_cost;
  double decode_cost;
  double cost;
  double probability;
} kvatlas_scored_candidate;

/* A route answer: `ranked` holds every candidate, the pick first. Free with
 * kvatlas_free_route_result. */
typedef struct kvatlas_route_result {
  uint64_t revision;
  uint32_t prompt_blocks;
  uint32_t blocks_found; /* leading blocks some holder has */
  size_t num_ranked;
  kvatlas_scored_candidate* ranked;
} kvatlas_route_result;

/* Ranks `candidates` (1 … 65,536) for a prompt given as tokens or as its block keys.
 * `options` NULL = the server's defaults. KVATLAS_INVALID_ARGUMENT names the bad field
 * ("candidates[1].instance_id: ..."). On success *out is a result to free with
 * kvatlas_free_route_result. Predictions a follower records count in its own answers only
 * (docs/routing.md §Approximate mode). */
KVATLAS_EXPORT kvatlas_code kvatlas_route_tokens(
    kvatlas_client* client, const kvatlas_context* context, const uint32_t* tokens,
    size_t num_tokens, const kvatlas_route_candidate* candidates, size_t num_candidates,
    const kvatlas_route_options* options, kvatlas_route_result** out, kvatlas_error** err);
KVATLAS_EXPORT kvatlas_code kvatlas_route_hashes(
    kvatlas_client* client, const kvatlas_context* context, const uint64_t* hashes,
    size_t num_hashes, const kvatlas_route_candidate* candidates, size_t num_candidates,
    const kvatlas_route_options* options, kvatlas_route_result** out, kvatlas_error** err);
KVATLAS_EXPORT void kvatlas_free_route_result(kvatlas_route_result* result); /* NULL: no-op */

/* --- Shared load (docs/routing.md §Shared load) ------------------------------------------
 * A router replica's in-flight table, reported to the cluster (kvatlas::LoadReporter): the
 * router notes each request it sends to an instance, and a background thread sends the
 * summary at most once per interval when it changed (and every ttl / 3 when it did not).
 * Routes whose candidates give no load are then scored with the fleet's summed load.
 * Thread-safety: every function from any thread, except kvatlas_load_reporter_destroy,
 * which must not race with other calls on the same handle. The client must outlive its
 * reporters. */
typedef struct kvatlas_load_reporter kvatlas_load_reporter; /* opaque */

/* Starts reporting for router `router_id` (unique per router replica, 1 … 256 bytes)
 * through `client`. `interval_ms` bounds the report rate (0: 10 ms); `ttl_ms` is each
 * report's lease (0: 2,000 ms; 100 … 600,000), and the interval must be at most ttl / 3.
 * KVATLAS_INVALID_ARGUMENT names the bad field. On success *out is a handle to release
 * with kvatlas_load_reporter_destroy. */
KVATLAS_EXPORT kvatlas_code kvatlas_load_reporter_create(kvatlas_client* client,
                                                         const char* router_id, int64_t interval_ms,
                                                         uint32_t ttl_ms,
                                                         kvatlas_load_reporter** out,
                                                         kvatlas_error** err);
/* A request of `prompt_blocks` blocks (queued for prefill) that will hold `decode_blocks`
 * KV blocks while decoding was sent to `instance`'s `dp_rank`. *token names it for
 * kvatlas_load_reporter_prefill_done and kvatlas_load_reporter_route_finished. */
KVATLAS_EXPORT kvatlas_code kvatlas_load_reporter_route_started(
    kvatlas_load_reporter* reporter, const char* instance, uint32_t dp_rank, uint64_t prompt_blocks,
    uint64_t decode_blocks, uint64_t* token, kvatlas_error** err);
/* Its prefill finished: its prompt blocks are no longer queued. Unknown tokens and a NULL
 * reporter: no-op. */
KVATLAS_EXPORT void kvatlas_load_reporter_prefill_done(kvatlas_load_reporter* reporter,
                                                       uint64_t token);
/* It finished (or failed): none of its load counts any more. Unknown tokens and a NULL
 * reporter: no-op. */
KVATLAS_EXPORT void kvatlas_load_reporter_route_finished(kvatlas_load_reporter* reporter,
                                                         uint64_t token);
/* Sends the summary now, whatever the interval; the send's status (e.g.
 * KVATLAS_UNAVAILABLE, KVATLAS_PERMISSION_DENIED without the write role). */
KVATLAS_EXPORT kvatlas_code kvatlas_load_reporter_flush(kvatlas_load_reporter* reporter,
                                                        kvatlas_error** err);
/* Stops the reporter and sends an empty report, so the router's load stops counting at
 * once instead of when its lease ends; frees the handle. NULL is a no-op. */
KVATLAS_EXPORT void kvatlas_load_reporter_destroy(kvatlas_load_reporter* reporter);

/* The live load reports as the answering server sees them (binary kLoadView), as JSON:
 * {"revision": N, "routers": [{"router_id", "expires_in_ms", "loads": [{"instance_id",
 * "dp_rank", "prefill_blocks", "decode_blocks"}]}]} — GET /v1/load's `routers`. *out_json
 * is NUL-terminated, freed with kvatlas_free_string. */
KVATLAS_EXPORT kvatlas_code kvatlas_fetch_loads_json(kvatlas_client* client, char** out_json,
                                                     kvatlas_error** err);

/* A decision this router made locally (approximate mode, docs/routing.md): it sent the
 * request of block keys `hashes` (from block 0) to `backend_id` rank `dp_rank`, so the
 * cluster records them as predicted there for the server's predicted_ttl_ms (binary
 * kPredict; Client::RecordPrediction). Any server takes it; no log entry of its own. On
 * success *out_queued (may be NULL) is the number of keys queued. Errors:
 * KVATLAS_INVALID_ARGUMENT (no model or block_size, an empty backend_id, no hashes),
 * KVATLAS_PAYLOAD_TOO_LARGE (more than 65,536 hashes), KVATLAS_FAILED_PRECONDITION (the
 * server records no predictions), KVATLAS_RESOURCE_EXHAUSTED (its queue is full). */
KVATLAS_EXPORT kvatlas_code kvatlas_record_prediction(kvatlas_client* client,
                                                      const kvatlas_context* context,
                                                      const char* backend_id, uint32_t dp_rank,
                                                      const uint64_t* hashes, size_t num_hashes,
                                                      uint32_t* out_queued, kvatlas_error** err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVATLAS_CLIENT_C_API_H_ */
