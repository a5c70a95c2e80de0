/* The C ABI test: a C11 program (compiled as C, so c_api.h is checked to be plain C) that
 * drives a real server through kvatlas/client/c_api.h. client_tools_test.cc starts the
 * server and runs it:
 *
 *   c_api_test HOST:PORT DEAD_HOST:PORT
 *   c_api_test HOST:PORT READ_TOKEN      (a server with access control on)
 *
 * Exit code 0 when every check passed; otherwise 1, after printing the failed checks. */
#include "kvatlas/client/c_api.h"

#include <stdio.h>
#include <string.h>

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
  TestLoadReporter(client);
  kvatlas_close(client);
  kvatlas_close(NULL);
  kvatlas_free_lookup_result(NULL);
  kvatlas_error_free(NULL);
  if (failures == 0) printf("c_api_test: ok\n");
  return failures == 0 ? 0 : 1;
}
