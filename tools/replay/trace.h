// Mooncake-format request traces (one JSON object per line: timestamp in ms, input_length,
// output_length, hash_ids of 512-token prefix blocks; tests/data/README.md) and
// the deterministic mapping from trace block ids to token ids and standard block keys.
//
// Pure values and functions: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/result.h"

namespace kvatlas::replay {

struct TraceRequest {
  double timestamp_ms = 0;
  uint32_t input_length = 0;       // tokens
  uint32_t output_length = 0;      // tokens
  std::vector<uint32_t> hash_ids;  // one per prompt block, prefix-unique
};

// One trace line. kInvalidArgument naming the field for a malformed one.
[[nodiscard]] Result<TraceRequest> ParseTraceLine(std::string_view line);
// The first `limit` requests of a trace file (0 = all); blank lines are skipped. Errors name
// the line ("trace.jsonl:12: hash_ids: ...").
[[nodiscard]] Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit);

// The tokens of one trace block: block_tokens ids derived from the block's hash id alone,
// so that two requests sharing a block id share its tokens.
[[nodiscard]] std::vector<uint32_t> BlockTokens(uint32_t hash_id, uint32_t block_tokens);
// A request's prompt as tokens: the blocks' tokens, concatenated.
[[nodiscard]] std::vector<uint32_t> RequestTokens(const TraceRequest& request,
                                                  uint32_t block_tokens);

// Where a trace block sits in the prefix tree and its standard kvatlas block key (the
// rolling hash of its tokens after its parent's: what the server computes from the tokens).
struct BlockInfo {
  uint64_t key = 0;
  std::optional<uint64_t> parent_key;
  uint32_t depth = 0;
};

// Block keys of every block of `trace`. A block id seen under two different parents (the
// trace would then not be prefix-unique) keeps its first placement and is counted.
class BlockTable {
 public:
  BlockTable(const std::vector<TraceRequest>& trace, uint32_t block_tokens,
             const BlockHasher& hasher);
  const BlockInfo& Get(uint32_t hash_id) const { return blocks_.at(hash_id); }
  size_t size() const { return blocks_.size(); }
  size_t inconsistent() const { return inconsistent_; }

 private:
  std::unordered_map<uint32_t, BlockInfo> blocks_;
  size_t inconsistent_ = 0;
};

}  // namespace kvatlas::replay
