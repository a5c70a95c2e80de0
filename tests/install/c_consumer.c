/* The C consumer of install_test.py, built with nothing but `pkg-config kvatlas` (shared
 * and --static): ingests a 3-block chain for HOLDER over the C ABI, looks it up, and
 * reports a load on HOLDER through a load reporter (seen in kvatlas_fetch_loads_json).
 *
 *   c_consumer HOST:PORT HOLDER      exit 0 when every check passed, 1 otherwise */
#include <kvatlas/client/c_api.h>

#include <stdio.h>
#include <string.h>

static int Fail(const char* what, kvatlas_error* err) {
  fprintf(stderr, "c_consumer: %s: %s\n", what, err ? kvatlas_error_message(err) : "check failed");
  kvatlas_error_free(err);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: c_consumer HOST:PORT HOLDER", NULL);
  kvatlas_open_options options;
  memset(&options, 0, sizeof options);
  options.endpoints = argv[1];
  options.timeout_ms = 5000;
  kvatlas_client* client = NULL;
  kvatlas_error* err = NULL;
  if (kvatlas_open_with(&options, &client, &err) != KVATLAS_OK) return Fail("open", err);

  char events[512];
  snprintf(events, sizeof events,
           "[{\"event_type\": \"stored\", \"model_name\": \"install-test\", \"block_size\": 4,"
           " \"backend_id\": \"%s\", \"medium\": \"GPU\", \"seq_hashes\": [4097, 4098, 4099]}]",
           argv[2]);
  kvatlas_ingest_result ack;
  if (kvatlas_ingest_json(client, events, strlen(events), &ack, &err) != KVATLAS_OK) {
    kvatlas_close(client);
    return Fail("ingest", err);
  }

  const kvatlas_context context = {NULL, "install-test", NULL, 4, NULL};
  const uint64_t hashes[] = {4097, 4098, 4099};
  kvatlas_lookup_result* result = NULL;
  if (kvatlas_lookup_hashes(client, &context, hashes, 3, &result, &err) != KVATLAS_OK) {
    kvatlas_close(client);
    return Fail("lookup", err);
  }
  int found = 0;
  for (size_t i = 0; i < result->num_instances; ++i) {
    if (strcmp(result->instances[i].instance_id, argv[2]) == 0) {
      found = result->instances[i].gpu == 3;
    }
  }
  printf("c_consumer %s: revision %llu, %u blocks found\n", argv[2],
         (unsigned long long)result->revision, result->blocks_found);
  kvatlas_free_lookup_result(result);
  if (!found) {
    kvatlas_close(client);
    return Fail("lookup: the holder does not hold the 3 GPU blocks", NULL);
  }

  char router_id[300];
  snprintf(router_id, sizeof router_id, "router-%s", argv[2]);
  kvatlas_load_reporter* reporter = NULL;
  uint64_t token = 0;
  char* loads = NULL;
  if (kvatlas_load_reporter_create(client, router_id, 0, 0, &reporter, &err) != KVATLAS_OK ||
      kvatlas_load_reporter_route_started(reporter, argv[2], 0, 3, 3, &token, &err) !=
          KVATLAS_OK ||
      kvatlas_load_reporter_flush(reporter, &err) != KVATLAS_OK ||
      kvatlas_fetch_loads_json(client, &loads, &err) != KVATLAS_OK) {
    kvatlas_load_reporter_destroy(reporter);
    kvatlas_close(client);
    return Fail("load reporter", err);
  }
  found = strstr(loads, router_id) != NULL;
  kvatlas_free_string(loads);
  kvatlas_load_reporter_destroy(reporter);
  kvatlas_close(client);
  return found ? 0 : Fail("fetch loads: the reporter's report is missing", NULL);
}
