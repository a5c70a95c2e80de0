#include "tests/integration/rest_helpers.h"

#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstdio>

namespace kvatlas::testing {
namespace {

void PutLe(uint64_t value, int bytes, std::vector<unsigned char>* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<unsigned char>(value >> (8 * i)));
}

Answer ToAnswer(const httplib::Result& result) {
  Answer answer;
  REQUIRE_MESSAGE(result, "HTTP transport error " << httplib::to_string(result.error()));
  answer.status = result->status;
  answer.raw = result->body;
  answer.body = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (answer.body.is_discarded()) answer.body = nullptr;
  return answer;
}

}  // namespace

std::vector<uint64_t> ReferenceSeqHashes(const std::vector<uint32_t>& tokens, uint32_t block_size,
                                         uint64_t seed) {
  std::vector<uint64_t> out;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    std::vector<unsigned char> block;
    for (size_t i = start; i < start + block_size; ++i) PutLe(tokens[i], 4, &block);
    const uint64_t local = XXH3_64bits_withSeed(block.data(), block.size(), seed);
    if (out.empty()) {
      out.push_back(local);
      continue;
    }
    std::vector<unsigned char> pair;
    PutLe(out.back(), 8, &pair);
    PutLe(local, 8, &pair);
    out.push_back(XXH3_64bits_withSeed(pair.data(), pair.size(), seed));
  }
  return out;
}

std::string Hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> out(count);
  for (uint32_t i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

Answer Post(httplib::Client& client, const std::string& path, const std::string& body,
            const std::string& content_type) {
  return ToAnswer(client.Post(path.c_str(), body, content_type.c_str()));
}

Answer Post(httplib::Client& client, const std::string& path, const json& body) {
  return Post(client, path, body.dump());
}

Answer Get(httplib::Client& client, const std::string& path) {
  return ToAnswer(client.Get(path.c_str()));
}

json Ingest(httplib::Client& client, const json& events) {
  const Answer answer = Post(client, "/v1/events", events);
  REQUIRE_MESSAGE(answer.status == 200, answer.raw);
  return answer.body;
}

json ObservableState(httplib::Client& client, const std::vector<json>& lookups) {
  json state;
  for (const json& lookup : lookups) {
    state["v1"].push_back(Post(client, "/v1/lookup", lookup).body);
    json query = {{"model", lookup["model_name"]},
                  {"block_size", lookup["block_size"]},
                  {"token_ids", lookup["token_ids"]}};
    if (lookup.contains("tenant_id")) query["tenant_id"] = lookup["tenant_id"];
    state["conductor"].push_back(Post(client, "/query", query).body);
  }
  state["holders"] = Get(client, "/v1/holders").body;
  state["contexts"] = Get(client, "/v1/contexts").body;
  const json stats = Get(client, "/v1/stats").body;
  state["revision"] = stats["revision"];
  state["index"] = stats["index"];
  state["index"].erase("memory_bytes");  // layout, not content
  return state;
}

}  // namespace kvatlas::testing
