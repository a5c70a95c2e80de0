// Helpers shared by the integration tests: REST calls that return parsed JSON, and the
// standard block hash computed independently of kvatlas's BlockHasher (straight from the
// Mooncake RFC #1403 definition over libxxhash), so that a test can tell whether the server
// hashes token_ids the way routers do.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvatlas::testing {

using nlohmann::json;

// seq[0] = local[0]; seq[i] = XXH3_64(le64(seq[i-1]) || le64(local[i]), seed), where
// local[i] = XXH3_64(block i's tokens as le32, seed). Complete blocks only.
std::vector<uint64_t> ReferenceSeqHashes(const std::vector<uint32_t>& tokens, uint32_t block_size,
                                         uint64_t seed = 1337);

// "0x..." as clients may send hashes.
std::string Hex(uint64_t value);

// tokens first, first+1, ..., first+count-1.
std::vector<uint32_t> Tokens(uint32_t first, uint32_t count);

struct Answer {
  int status = 0;
  std::string raw;
  json body;  // null when the body is not JSON
};

// Send a request and parse the answer; a transport failure fails the current test.
Answer Post(httplib::Client& client, const std::string& path, const std::string& body,
            const std::string& content_type = "application/json");
Answer Post(httplib::Client& client, const std::string& path, const json& body);
Answer Get(httplib::Client& client, const std::string& path);

// POST /v1/events with `events`, requiring 200. Returns the answer body.
json Ingest(httplib::Client& client, const json& events);

// The lookup answers and listings a test compares across restarts.
json ObservableState(httplib::Client& client, const std::vector<json>& lookups);

}  // namespace kvatlas::testing
