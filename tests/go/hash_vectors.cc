// hash_vectors: the C++ side of the Go client's hashing tests (client/go/hash_test.go).
// Reads one command per line on stdin and prints one answer line per command, computed
// with libxxhash, kvatlas::BlockHasher and kvatlas::VllmBlockHasher, so that the Go
// implementations are checked against the C++ ones on inputs the Go test chooses:
//
//   xxh3 SEED HEX                      XXH3_64bits_withSeed of the bytes → decimal
//   seq SEED BLOCK_SIZE TOKENS         BlockHasher::SequenceHashes → decimals
//   vllm PYSEED BLOCK_SIZE TOKENS LORA SALT
//                                      VllmBlockHasher::BlockHashes → decimals
//   block PARENT_HEX TOKENS ITEMS      VllmBlockHasher::HashBlock → the digest in hex
//
// TOKENS is comma-separated decimals, "-" for none; LORA and SALT "-" for empty; ITEMS is
// comma-separated t:TEXT | u:N | i:N | b:HEX | m:ID:OFFSET, "-" for none. A malformed line
// prints "error: <why>" and the tool exits 2.
#include <xxhash.h>

#include <charconv>
#include <cstdint>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "kvatlas/common/block_hasher.h"
#include "kvatlas/common/vllm_block_hasher.h"

namespace {

using kvatlas::VllmBlockHasher;

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  if (text == "-") return out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

template <typename T>
std::optional<T> ParseNumber(std::string_view text) {
  T value{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<std::vector<uint8_t>> ParseHex(std::string_view hex) {
  if (hex == "-") return std::vector<uint8_t>{};
  if (hex.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    uint8_t byte = 0;
    const auto [ptr, ec] = std::from_chars(hex.data() + i, hex.data() + i + 2, byte, 16);
    if (ec != std::errc() || ptr != hex.data() + i + 2) return std::nullopt;
    out.push_back(byte);
  }
  return out;
}

std::optional<std::vector<uint32_t>> ParseTokens(std::string_view text) {
  std::vector<uint32_t> out;
  for (std::string_view t : Split(text, ',')) {
    const std::optional<uint32_t> v = ParseNumber<uint32_t>(t);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::optional<std::vector<VllmBlockHasher::ExtraItem>> ParseItems(std::string_view text) {
  using Item = VllmBlockHasher::ExtraItem;
  std::vector<Item> out;
  for (std::string_view item : Split(text, ',')) {
    if (item.size() < 2 || item[1] != ':') return std::nullopt;
    const std::string_view arg = item.substr(2);
    switch (item[0]) {
      case 't':
        out.push_back(Item::Text(std::string(arg)));
        break;
      case 'u': {
        const auto v = ParseNumber<uint64_t>(arg);
        if (!v) return std::nullopt;
        out.push_back(Item::Uint(*v));
        break;
      }
      case 'i': {
        const auto v = ParseNumber<int64_t>(arg);
        if (!v) return std::nullopt;
        out.push_back(Item::Int(*v));
        break;
      }
      case 'b': {
        auto bytes = ParseHex(arg);
        if (!bytes) return std::nullopt;
        out.push_back(Item::Bytes(std::move(*bytes)));
        break;
      }
      case 'm': {
        const size_t colon = arg.rfind(':');
        const auto offset = colon == std::string_view::npos
                                ? std::nullopt
                                : ParseNumber<int64_t>(arg.substr(colon + 1));
        if (!offset) return std::nullopt;
        out.push_back(Item::Mm(std::string(arg.substr(0, colon)), *offset));
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return out;
}

template <typename List>
std::string JoinNumbers(const List& values) {
  std::string out;
  for (const auto v : values) {
    if (!out.empty()) out += ' ';
    out += std::to_string(v);
  }
  return out;
}

std::string Hex(const VllmBlockHasher::Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : digest) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// The answer line of one command, or nullopt when the line is malformed.
std::optional<std::string> Answer(const std::vector<std::string>& f) {
  if (f.size() == 3 && f[0] == "xxh3") {
    const auto seed = ParseNumber<uint64_t>(f[1]);
    const auto bytes = ParseHex(f[2]);
    if (!seed || !bytes) return std::nullopt;
    return std::to_string(XXH3_64bits_withSeed(bytes->data(), bytes->size(), *seed));
  }
  if (f.size() == 4 && f[0] == "seq") {
    const auto seed = ParseNumber<uint64_t>(f[1]);
    const auto block_size = ParseNumber<uint32_t>(f[2]);
    const auto tokens = ParseTokens(f[3]);
    if (!seed || !block_size || *block_size == 0 || !tokens) return std::nullopt;
    return JoinNumbers(kvatlas::BlockHasher(*seed).SequenceHashes(*tokens, *block_size));
  }
  if (f.size() == 6 && f[0] == "vllm") {
    const auto block_size = ParseNumber<uint32_t>(f[2]);
    const auto tokens = ParseTokens(f[3]);
    if (!block_size || !tokens) return std::nullopt;
    VllmBlockHasher::Extras extras;
    if (f[4] != "-") extras.lora_name = f[4];
    if (f[5] != "-") extras.cache_salt = f[5];
    return JoinNumbers(VllmBlockHasher(f[1]).BlockHashes(*tokens, *block_size, extras));
  }
  if (f.size() == 4 && f[0] == "block") {
    const auto parent = ParseHex(f[1]);
    const auto tokens = ParseTokens(f[2]);
    const auto items = ParseItems(f[3]);
    if (!parent || parent->size() != 32 || !tokens || !items) return std::nullopt;
    VllmBlockHasher::Digest digest{};
    std::copy(parent->begin(), parent->end(), digest.begin());
    return Hex(VllmBlockHasher("0").HashBlock(digest, *tokens, *items));
  }
  return std::nullopt;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    const std::optional<std::string> answer = Answer(fields);
    if (!answer) {
      std::cout << "error: malformed command: " << line << std::endl;
      return 2;
    }
    std::cout << *answer << '\n';
  }
  return 0;
}
