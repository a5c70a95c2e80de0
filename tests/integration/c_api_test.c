/* The C ABI test: a C11 program (compiled as C, so c_api.h is checked to be plain C) that
 * drives a real server through kvatlas/client/c_api.h. client_tools_test.cc starts the
 * server and runs it:
 *
 *   c_api_test HOST:PORT DEAD_HOST:PORT
 *   c_api_test HOST:PORT READ_TOKEN      (a server with access control on)
 *
 * Exit code 0 when every check passed; otherwise 1, after printing the failed checks. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include "kvatlas/client/c_api.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "c_api_test.c:%d: CHECK(%s) failed\n", __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static const char kEvents[] =
    "[{\"event_type\": \"stored\", \"model_name\": \"llama\", \"block_size\": 4,"
    "  \"backend_id\": \"engine-a\", \"medium\": \"GPU\", \"token_ids\": [1,2,3,4,5,6,7,8]},"
    " {\"event_type\": \"stored\", \"model_name\": \"llama\", \"block_size\": 4,"
    "  \"backend_id\": \"engine-b\", \"medium\": \"cpu\", \"seq_hashes\": [111, 222, 333]},"
    " {\"event_type\": \"stored\", \"model_name\": \"llama\", \"block_size\": 4,"
    "  \"backend_id\": \"pool\", \"medium\": \"shared\", \"seq_hashes\": [111, 222],"
    "  \"location\": [\"nvme://0\", \"nvme://1\"]}]";

static void TestErrors(const char* endpoint, const char* dead_endpoint) {
  kvatlas_client* client = NULL;
  kvatlas_error* err = NULL;
  CHECK(kvatlas_open("nohost", 1000, &client, &err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(client == NULL);
  CHECK(kvatlas_error_code(err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "nohost") != NULL);
  kvatlas_error_free(err);

  CHECK(kvatlas_open(dead_endpoint, 1000, &client, &err) == KVATLAS_UNAVAILABLE);
  CHECK(strcmp(kvatlas_code_name(kvatlas_error_code(err)), "unavailable") == 0);
  kvatlas_error_free(err);
  CHECK(kvatlas_open(endpoint, 0, &client, NULL) == KVATLAS_INVALID_ARGUMENT);
}

static void TestCalls(kvatlas_client* client) {
  kvatlas_error* err = NULL;
  CHECK(kvatlas_ping(client, &err) == KVATLAS_OK);
  CHECK(err == NULL);

  kvatlas_ingest_result ack;
  CHECK(kvatlas_ingest_json(client, kEvents, strlen(kEvents), &ack, &err) == KVATLAS_OK);
  CHECK(ack.events == 3);
  CHECK(ack.blocks == 7);
  CHECK(ack.revision > 0);

  const char bad[] = "[{\"event_type\": \"stored\", \"model_name\": \"m\", \"block_size\": 0}]";
  CHECK(kvatlas_ingest_json(client, bad, strlen(bad), &ack, &err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "block_size") != NULL);
  kvatlas_error_free(err);
  err = NULL;

  kvatlas_context context = {NULL, "llama", NULL, 4, NULL};
  const uint32_t tokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kvatlas_lookup_result* result = NULL;
  CHECK(kvatlas_lookup_tokens(client, &context, tokens, 10, &result, &err) == KVATLAS_OK);
  if (result != NULL) {
    CHECK(result->blocks_queried == 2);
    CHECK(result->blocks_found == 2);
    CHECK(result->num_instances == 1);
    if (result->num_instances == 1) {
      CHECK(strcmp(result->instances[0].instance_id, "engine-a") == 0);
      CHECK(result->instances[0].longest == 2);
      CHECK(result->instances[0].gpu == 2);
    }
    kvatlas_free_lookup_result(result);
  }

  const uint64_t hashes[] = {111, 222, 999};
  result = NULL;
  CHECK(kvatlas_lookup_hashes(client, &context, hashes, 3, &result, &err) == KVATLAS_OK);
  if (result != NULL) {
    CHECK(result->blocks_found == 2);
    CHECK(result->num_instances == 1);
    if (result->num_instances == 1) {
      CHECK(strcmp(result->instances[0].instance_id, "engine-b") == 0);
      CHECK(result->instances[0].gpu == 0);
      CHECK(result->instances[0].cpu == 2);
    }
    CHECK(result->num_shared == 1);
    if (result->num_shared == 1) {
      CHECK(strcmp(result->shared[0].backend_id, "pool") == 0);
      CHECK(result->shared[0].blocks == 2);
      CHECK(result->shared[0].num_locations == 2);
      if (result->shared[0].num_locations == 2) {
        CHECK(strcmp(result->shared[0].locations[1], "nvme://1") == 0);
      }
    }
    kvatlas_free_lookup_result(result);
  }

  kvatlas_context no_model = {NULL, NULL, NULL, 4, NULL};
  result = NULL;
  CHECK(kvatlas_lookup_hashes(client, &no_model, hashes, 3, &result, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(result == NULL);
  kvatlas_error_free(err);

  char* stats = NULL;
  CHECK(kvatlas_stats_json(client, &stats, NULL) == KVATLAS_OK);
  CHECK(stats != NULL && strstr(stats, "\"index\"") != NULL);
  kvatlas_free_string(stats);
}

/* A route by tokens in the test's context with the default options; NULL (a failed
 * check) when it fails. */
static kvatlas_route_result* RouteTokens(kvatlas_client* client, const uint32_t* tokens,
                                         size_t num_tokens,
                                         const kvatlas_route_candidate* candidates,
                                         size_t num_candidates) {
  const kvatlas_context context = {NULL, "llama", NULL, 4, NULL};
  kvatlas_route_result* result = NULL;
  kvatlas_error* err = NULL;
  if (kvatlas_route_tokens(client, &context, tokens, num_tokens, candidates, num_candidates, NULL,
                           &result, &err) != KVATLAS_OK) {
    fprintf(stderr, "kvatlas_route_tokens: %s\n", kvatlas_error_message(err));
    kvatlas_error_free(err);
    ++failures;
    return NULL;
  }
  CHECK(result->num_ranked == num_candidates);
  return result;
}

/* The loaded candidate's prefill cost (it ranks second) with `options`; -1 when the route
 * fails. */
static double LoadedPrefillCost(kvatlas_client* client, const kvatlas_route_candidate* candidates,
                                const kvatlas_route_options* options) {
  const kvatlas_context context = {NULL, "llama", NULL, 4, NULL};
  const uint32_t tokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kvatlas_route_result* result = NULL;
  double cost = -1;
  if (kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, options, &result, NULL) ==
      KVATLAS_OK) {
    if (result->num_ranked == 2) cost = result->ranked[1].prefill_cost;
    kvatlas_free_route_result(result);
  }
  return cost;
}

/* The relative cost terms reach the server: candidates[0] queues 2 blocks against a mean
 * of 1, so at the defaults (excess_queue_scale 0.7, epsilon 0.5) its prefill cost carries
 * 0.7 x (2 - 1.5) = 0.35 more than with the term off. A caller built with the first
 * version of the struct (struct_size ending at `reserved`) gets the defaults whatever lies
 * past it. */
static void TestRouteTerms(kvatlas_client* client, const kvatlas_route_candidate* candidates) {
  kvatlas_route_options options;
  kvatlas_route_options_init(&options);
  CHECK(options.replica_credit == 1.0 && options.excess_queue_scale == 0.7 &&
        options.excess_queue_epsilon == 0.5 && options.queue_scale == 0.4);
  const double with_term = LoadedPrefillCost(client, candidates, &options);
  options.excess_queue_scale = 0;
  const double without_term = LoadedPrefillCost(client, candidates, &options);
  CHECK(with_term >= 0 && without_term >= 0);
  CHECK(fabs(with_term - without_term - 0.35) < 1e-9);
  options.struct_size = offsetof(kvatlas_route_options, replica_credit);
  CHECK(LoadedPrefillCost(client, candidates, &options) == with_term);
}

/* Routes over the blocks TestCalls stored, and the argument checks. */
static void TestRoute(kvatlas_client* client) {
  const kvatlas_context context = {NULL, "llama", NULL, 4, NULL};
  const uint32_t tokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kvatlas_route_candidate candidates[2];
  memset(candidates, 0, sizeof(candidates));
  candidates[0].instance_id = "engine-b";
  candidates[0].queued_prefill_tokens = 8;
  candidates[1].instance_id = "engine-a";
  kvatlas_route_options options;
  kvatlas_route_options_init(&options);
  CHECK(options.struct_size == sizeof(options) && options.cpu == 0.75 && options.predicted == 1.0);
  options.has_seed = 1;
  options.seed = 7;
  kvatlas_route_result* result = NULL;
  kvatlas_error* err = NULL;
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, &options, &result,
                             &err) == KVATLAS_OK);
  if (result != NULL) {
    CHECK(result->prompt_blocks == 3 && result->blocks_found == 2 && result->revision > 0);
    CHECK(result->num_ranked == 2);
    if (result->num_ranked == 2) {
      const kvatlas_scored_candidate* pick = &result->ranked[0];
      CHECK(strcmp(pick->instance_id, "engine-a") == 0 && pick->index == 1);
      CHECK(pick->matched_gpu == 2 && pick->gpu_blocks == 2 && pick->credit == 2.0);
      CHECK(pick->probability == 1.0 && pick->predicted_blocks == 0);
      CHECK(result->ranked[1].queued_prefill_tokens == 8);
      CHECK(result->ranked[1].queued_prefill_blocks == 2.0);
    }
    kvatlas_free_route_result(result);
  }
  const uint64_t hashes[] = {111, 222};
  result = NULL;
  CHECK(kvatlas_route_hashes(client, &context, hashes, 2, candidates, 1, NULL, &result, NULL) ==
        KVATLAS_OK);
  if (result != NULL) {
    CHECK(result->num_ranked == 1 && result->ranked[0].matched_cpu == 2);
    kvatlas_free_route_result(result);
  }

  /* Bad input: each error names the field. */
  candidates[1].instance_id = "";
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, NULL, &result, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(result == NULL);
  CHECK(strstr(kvatlas_error_message(err), "candidates[1].instance_id") != NULL);
  kvatlas_error_free(err);
  candidates[1].instance_id = "engine-a";
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 0, NULL, &result, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "candidates") != NULL);
  kvatlas_error_free(err);
  options.struct_size = sizeof(options) + 8; /* a newer header's */
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, &options, &result,
                             &err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "struct_size") != NULL);
  kvatlas_error_free(err);
  kvatlas_route_options_init(&options);
  options.predicted = 1.5;
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, &options, &result,
                             &err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "weights.PREDICTED") != NULL);
  kvatlas_error_free(err);
  kvatlas_route_options_init(&options);
  options.replica_credit = 1.5;
  CHECK(kvatlas_route_tokens(client, &context, tokens, 10, candidates, 2, &options, &result,
                             &err) == KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "replica_credit") != NULL);
  kvatlas_error_free(err);
  TestRouteTerms(client, candidates);
  CHECK(kvatlas_route_tokens(NULL, &context, tokens, 10, candidates, 2, NULL, &result, NULL) ==
        KVATLAS_INVALID_ARGUMENT);
  kvatlas_free_route_result(NULL);
}

/* Approximate mode (docs/routing.md §Approximate mode): a route that picks a `predict`
 * candidate records the prompt's blocks as predicted on it; the next route with that prompt
 * credits them and prefers it. A candidate routed without the flag gets nothing recorded. */
static void TestRoutePredict(kvatlas_client* client) {
  uint32_t tokens[32]; /* 8 blocks nobody holds */
  uint32_t plain_tokens[32];
  for (uint32_t i = 0; i < 32; ++i) {
    tokens[i] = 5000 + i;
    plain_tokens[i] = 9000 + i;
  }
  kvatlas_route_candidate candidates[2];
  memset(candidates, 0, sizeof(candidates));
  candidates[0].instance_id = "plain";
  kvatlas_route_result* result = RouteTokens(client, plain_tokens, 32, candidates, 1);
  kvatlas_free_route_result(result);

  candidates[0].instance_id = "quiet";
  candidates[0].predict = 1;
  result = RouteTokens(client, tokens, 32, candidates, 1);
  if (result == NULL) return;
  CHECK(strcmp(result->ranked[0].instance_id, "quiet") == 0);
  CHECK(result->ranked[0].predicted_blocks == 0);
  kvatlas_free_route_result(result);

  candidates[0].instance_id = "other";
  candidates[0].predict = 0;
  candidates[1].instance_id = "quiet";
  candidates[1].predict = 1;
  /* Recorded within a 50 ms batch and one commit: a bounded wait (10 s), not a timed check. */
  const struct timespec pause = {0, 20 * 1000 * 1000};
  for (int attempt = 0;; ++attempt) {
    result = RouteTokens(client, tokens, 32, candidates, 2);
    if (result == NULL) return;
    if (result->ranked[0].predicted_blocks == 8 || attempt == 500) break;
    kvatlas_free_route_result(result);
    nanosleep(&pause, NULL);
  }
  const kvatlas_scored_candidate* pick = &result->ranked[0];
  CHECK(strcmp(pick->instance_id, "quiet") == 0 && pick->index == 1);
  CHECK(pick->predicted_blocks == 8 && pick->matched_predicted == 8 && pick->credit == 8.0);
  CHECK(result->ranked[1].predicted_blocks == 0 && result->ranked[1].matched_predicted == 0);
  kvatlas_free_route_result(result);

  /* "plain" was routed before "quiet"'s prediction, which has now applied. */
  candidates[0].instance_id = "plain";
  result = RouteTokens(client, plain_tokens, 32, candidates, 2);
  if (result == NULL) return;
  for (size_t i = 0; i < result->num_ranked; ++i) {
    CHECK(result->ranked[i].predicted_blocks == 0 && result->ranked[i].matched_predicted == 0);
  }
  kvatlas_free_route_result(result);
}

/* A local decision (kvatlas_record_prediction, binary kPredict): the keys are queued as
 * predicted on the named instance, and routes with that prompt credit them; bad arguments
 * are refused before anything is sent. */
static void TestRecordPrediction(kvatlas_client* client) {
  const kvatlas_context context = {NULL, "llama", NULL, 4, NULL};
  const kvatlas_context no_model = {NULL, "", NULL, 4, NULL};
  uint64_t hashes[6];
  for (uint32_t i = 0; i < 6; ++i) hashes[i] = 700000 + i;
  kvatlas_error* err = NULL;
  uint32_t queued = 0;
  CHECK(kvatlas_record_prediction(client, &context, "", 0, hashes, 6, &queued, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(strstr(kvatlas_error_message(err), "backend_id") != NULL);
  kvatlas_error_free(err);
  err = NULL;
  CHECK(kvatlas_record_prediction(client, &context, "local", 0, hashes, 0, &queued, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  kvatlas_error_free(err);
  err = NULL;
  CHECK(kvatlas_record_prediction(client, &no_model, "local", 0, hashes, 6, NULL, NULL) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(kvatlas_record_prediction(NULL, &context, "local", 0, hashes, 6, NULL, NULL) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(kvatlas_record_prediction(client, &context, "local", 0, hashes, 6, &queued, &err) ==
        KVATLAS_OK);
  CHECK(queued == 6);

  kvatlas_route_candidate candidates[2];
  memset(candidates, 0, sizeof(candidates));
  candidates[0].instance_id = "other";
  candidates[1].instance_id = "local";
  candidates[1].predict = 1; /* an approximate route: its answer carries predicted_blocks */
  kvatlas_route_result* result = NULL;
  /* Applied within a 50 ms batch and one commit: a bounded wait (10 s). */
  const struct timespec pause = {0, 20 * 1000 * 1000};
  for (int attempt = 0;; ++attempt) {
    result = NULL;
    if (kvatlas_route_hashes(client, &context, hashes, 6, candidates, 2, NULL, &result, &err) !=
        KVATLAS_OK) {
      fprintf(stderr, "kvatlas_route_hashes: %s\n", kvatlas_error_message(err));
      kvatlas_error_free(err);
      ++failures;
      return;
    }
    if (result->ranked[0].predicted_blocks == 6 || attempt == 500) break;
    kvatlas_free_route_result(result);
    nanosleep(&pause, NULL);
  }
  CHECK(strcmp(result->ranked[0].instance_id, "local") == 0);
  CHECK(result->ranked[0].predicted_blocks == 6);
  kvatlas_free_route_result(result);
}

/* Whether the kvatlas_fetch_loads_json document holds `needle`. */
static int LoadsContain(kvatlas_client* client, const char* needle) {
  char* json = NULL;
  kvatlas_error* err = NULL;
  int found = 0;
  if (kvatlas_fetch_loads_json(client, &json, &err) != KVATLAS_OK) {
    fprintf(stderr, "kvatlas_fetch_loads_json: %s\n", kvatlas_error_message(err));
    kvatlas_error_free(err);
    ++failures;
    return 0;
  }
  found = strstr(json, needle) != NULL;
  kvatlas_free_string(json);
  return found;
}

/* The C load reporter: its reports reach the server's table (kvatlas_fetch_loads_json),
 * and destroying it sends the leaving report. */
static void TestLoadReporter(kvatlas_client* client) {
  kvatlas_load_reporter* reporter = NULL;
  kvatlas_error* err = NULL;
  CHECK(kvatlas_load_reporter_create(client, "", 50, 2000, &reporter, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  CHECK(reporter == NULL);
  CHECK(strstr(kvatlas_error_message(err), "router_id") != NULL);
  kvatlas_error_free(err);
  err = NULL;
  CHECK(kvatlas_load_reporter_create(client, "c-router", 1000, 2000, &reporter, &err) ==
        KVATLAS_INVALID_ARGUMENT); /* the interval is past ttl / 3 */
  kvatlas_error_free(err);
  err = NULL;
  CHECK(kvatlas_load_reporter_create(NULL, "c-router", 0, 0, &reporter, NULL) ==
        KVATLAS_INVALID_ARGUMENT);

  CHECK(kvatlas_load_reporter_create(client, "c-router", 50, 2000, &reporter, &err) ==
        KVATLAS_OK);
  if (reporter == NULL) return;
  uint64_t first = 0;
  uint64_t second = 0;
  CHECK(kvatlas_load_reporter_route_started(reporter, "engine-a", 0, 4, 40, &first, &err) ==
        KVATLAS_OK);
  CHECK(kvatlas_load_reporter_route_started(reporter, "engine-a", 0, 2, 20, &second, &err) ==
        KVATLAS_OK);
  CHECK(first != second);
  CHECK(kvatlas_load_reporter_route_started(reporter, "", 0, 1, 1, &second, &err) ==
        KVATLAS_INVALID_ARGUMENT);
  kvatlas_error_free(err);
  err = NULL;
  CHECK(kvatlas_load_reporter_flush(reporter, &err) == KVATLAS_OK);
  CHECK(LoadsContain(client, "\"router_id\":\"c-router\""));
  CHECK(LoadsContain(client, "\"decode_blocks\":60,\"dp_rank\":0,\"instance_id\":\"engine-a\","
                             "\"prefill_blocks\":6"));
  kvatlas_load_reporter_prefill_done(reporter, first);
  kvatlas_load_reporter_route_finished(reporter, second);
  kvatlas_load_reporter_route_finished(reporter, 12345); /* unknown: a no-op */
  kvatlas_load_reporter_prefill_done(NULL, first);
  CHECK(kvatlas_load_reporter_flush(reporter, &err) == KVATLAS_OK);
  CHECK(LoadsContain(client, "\"decode_blocks\":40,\"dp_rank\":0,\"instance_id\":\"engine-a\","
                             "\"prefill_blocks\":0"));
  /* Destroying it sends the empty report: the router leaves before its lease ends. */
  kvatlas_load_reporter_destroy(reporter);
  CHECK(!LoadsContain(client, "c-router"));
  kvatlas_load_reporter_destroy(NULL);
  CHECK(kvatlas_load_reporter_flush(NULL, NULL) == KVATLAS_INVALID_ARGUMENT);
}

/* Against a server with access control on, `read_token` having the read role. */
static void TestToken(const char* endpoint, const char* read_token) {
  kvatlas_client* client = NULL;
  kvatlas_error* err = NULL;
  /* Without a token the connection opens; the server refuses the first call. */
  CHECK(kvatlas_open(endpoint, 20000, &client, &err) == KVATLAS_OK);
  if (client != NULL) {
    CHECK(kvatlas_ping(client, &err) == KVATLAS_UNAUTHENTICATED);
    CHECK(kvatlas_error_code(err) == KVATLAS_UNAUTHENTICATED);
    kvatlas_error_free(err);
    kvatlas_close(client);
    client = NULL;
  }
  CHECK(strcmp(kvatlas_code_name(KVATLAS_UNAUTHENTICATED), "unauthenticated") == 0);
  CHECK(strcmp(kvatlas_code_name(KVATLAS_PERMISSION_DENIED), "permission_denied") == 0);

  kvatlas_open_options options;
  memset(&options, 0, sizeof(options));
  options.endpoints = endpoint;
  options.timeout_ms = 20000;
  options.token = "not-the-token";
  err = NULL;
  CHECK(kvatlas_open_with(&options, &client, &err) == KVATLAS_UNAUTHENTICATED);
  kvatlas_error_free(err);

  options.token = read_token;
  CHECK(kvatlas_open_with(&options, &client, NULL) == KVATLAS_OK);
  if (client == NULL) return;
  char* stats = NULL;
  CHECK(kvatlas_stats_json(client, &stats, NULL) == KVATLAS_OK);
  kvatlas_free_string(stats);
  kvatlas_ingest_result ingested;
  err = NULL;
  CHECK(kvatlas_ingest_json(client, kEvents, strlen(kEvents), &ingested, &err) ==
        KVATLAS_PERMISSION_DENIED);
  CHECK(err != NULL && strstr(kvatlas_error_message(err), "write role") != NULL);
  kvatlas_error_free(err);

  /* Reading the fleet's loads takes the read role; reporting one takes the write role. */
  char* loads = NULL;
  CHECK(kvatlas_fetch_loads_json(client, &loads, NULL) == KVATLAS_OK);
  kvatlas_free_string(loads);
  kvatlas_load_reporter* reporter = NULL;
  uint64_t token = 0;
  CHECK(kvatlas_load_reporter_create(client, "read-router", 0, 0, &reporter, NULL) == KVATLAS_OK);
  if (reporter != NULL) {
    CHECK(kvatlas_load_reporter_route_started(reporter, "engine-a", 0, 1, 1, &token, NULL) ==
          KVATLAS_OK);
    err = NULL;
    CHECK(kvatlas_load_reporter_flush(reporter, &err) == KVATLAS_PERMISSION_DENIED);
    kvatlas_error_free(err);
    kvatlas_load_reporter_destroy(reporter);
  }
  kvatlas_close(client);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s HOST:PORT DEAD_HOST:PORT | HOST:PORT READ_TOKEN\n", argv[0]);
    return 2;
  }
  if (strncmp(argv[2], "kvt_", 4) == 0) {
    TestToken(argv[1], argv[2]);
    if (failures == 0) printf("c_api_test: ok (token)\n");
    return failures == 0 ? 0 : 1;
  }
  TestErrors(argv[1], argv[2]);
  kvatlas_client* client = NULL;
  kvatlas_error* err = NULL;
  if (kvatlas_open(argv[1], 20000, &client, &err) != KVATLAS_OK) {
    fprintf(stderr, "kvatlas_open %s: %s\n", argv[1], kvatlas_error_message(err));
    kvatlas_error_free(err);
    return 1;
  }
  TestCalls(client);
  TestRoute(client);
  TestRoutePredict(client);
  TestRecordPrediction(client);
  TestLoadReporter(client);
  kvatlas_close(client);
  kvatlas_close(NULL);
  kvatlas_free_lookup_result(NULL);
  kvatlas_error_free(NULL);
  if (failures == 0) printf("c_api_test: ok\n");
  return failures == 0 ? 0 : 1;
}
