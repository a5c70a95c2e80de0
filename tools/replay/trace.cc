#include "tools/replay/trace.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace kvatlas::replay {
namespace {

using nlohmann::json;

Result<uint32_t> U32Field(const json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_unsigned() ||
      it->get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument(std::string(key) + ": must be an integer from 0 to 2^32-1");
  }
  return static_cast<uint32_t>(it->get<uint64_t>());
}

uint64_t SplitMix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Result<TraceRequest> ParseTraceLine(std::string_view line) {
  try {
    const json doc = json::parse(line);
    if (!doc.is_object()) return Status::InvalidArgument("line: must be a JSON object");
    TraceRequest request;
    const auto ts = doc.find("timestamp");
    if (ts == doc.end() || !ts->is_number() || ts->get<double>() < 0) {
      return Status::InvalidArgument("timestamp: must be a number >= 0 (milliseconds)");
    }
    request.timestamp_ms = ts->get<double>();
    KVATLAS_ASSIGN_OR_RETURN(request.input_length, U32Field(doc, "input_length"));
    KVATLAS_ASSIGN_OR_RETURN(request.output_length, U32Field(doc, "output_length"));
    const auto ids = doc.find("hash_ids");
    if (ids == doc.end() || !ids->is_array()) {
      return Status::InvalidArgument("hash_ids: must be an array of block ids");
    }
    for (size_t i = 0; i < ids->size(); ++i) {
      const json& id = (*ids)[i];
      if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
        return Status::InvalidArgument("hash_ids[" + std::to_string(i) +
                                       "]: must be an integer from 0 to 2^32-1");
      }
      request.hash_ids.push_back(static_cast<uint32_t>(id.get<uint64_t>()));
    }
    return request;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("line: invalid JSON: ") + e.what());
  }
}

Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit) {
  std::ifstream in(path);
  if (!in) return Status::IOError(path + ": cannot open");
  std::vector<TraceRequest> out;
  std::string line;
  size_t number = 0;
  while ((limit == 0 || out.size() < limit) && std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<TraceRequest> request = ParseTraceLine(line);
    if (!request) return request.error().WithContext(path + ":" + std::to_string(number));
    out.push_back(std::move(*request));
  }
  if (in.bad()) return Status::IOError(path + ": read failed");
  return out;
}

std::vector<uint32_t> BlockTokens(uint32_t hash_id, uint32_t block_tokens) {
  std::vector<uint32_t> tokens(block_tokens);
  const uint64_t base = SplitMix(hash_id);
  for (uint32_t j = 0; j < block_tokens; ++j) {
    tokens[j] = static_cast<uint32_t>(SplitMix(base + j) % 128000);  // a typical vocabulary
  }
  return tokens;
}

std::vector<uint32_t> RequestTokens(const TraceRequest& request, uint32_t block_tokens) {
  std::vector<uint32_t> tokens;
  tokens.reserve(request.hash_ids.size() * block_tokens);
  for (uint32_t id : request.hash_ids) {
    const std::vector<uint32_t> block = BlockTokens(id, block_tokens);
    tokens.insert(tokens.end(), block.begin(), block.end());
  }
  return tokens;
}

BlockTable::BlockTable(const std::vector<TraceRequest>& trace, uint32_t block_tokens,
                       const BlockHasher& hasher) {
  for (const TraceRequest& request : trace) {
    std::optional<uint64_t> parent;
    for (size_t i = 0; i < request.hash_ids.size(); ++i) {
      const uint32_t id = request.hash_ids[i];
      auto it = blocks_.find(id);
      if (it == blocks_.end()) {
        const std::vector<uint32_t> tokens = BlockTokens(id, block_tokens);
        BlockInfo info;
        info.key = hasher.SequenceHashes(tokens, block_tokens, parent).front();
        info.parent_key = parent;
        info.depth = static_cast<uint32_t>(i);
        it = blocks_.emplace(id, info).first;
      } else if (it->second.parent_key != parent) {
        ++inconsistent_;
      }
      parent = it->second.key;
    }
  }
}

}  // namespace kvatlas::replay
