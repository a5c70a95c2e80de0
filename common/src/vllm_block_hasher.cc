#include "kvatlas/common/vllm_block_hasher.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace kvatlas {
namespace {

// --- Canonical CBOR (RFC 8949 §4.2.1), just the types vLLM's block-hash tuples contain ----
// Every data item starts with a head: major type in the top 3 bits, then the argument in the
// shortest form: < 24 inline, else 1/2/4/8 big-endian bytes after 24/25/26/27. cbor2's
// `dumps(..., canonical=True)` emits exactly this for ints, strings, bytes, lists/tuples and
// None, so hashing our bytes reproduces vLLM's digests.
enum MajorType : uint8_t {
  kUnsigned = 0,
  kNegative = 1,
  kByteString = 2,
  kTextString = 3,
  kArray = 4,
};
constexpr uint8_t kNull = 0xf6;  // major 7, simple value 22

void PutHead(std::string* out, MajorType major, uint64_t arg) {
  const auto initial = static_cast<uint8_t>(major << 5);
  int width = 0;  // argument bytes after the initial byte
  if (arg < 24) {
    out->push_back(static_cast<char>(initial | arg));
    return;
  } else if (arg <= 0xff) {
    out->push_back(static_cast<char>(initial | 24));
    width = 1;
  } else if (arg <= 0xffff) {
    out->push_back(static_cast<char>(initial | 25));
    width = 2;
  } else if (arg <= 0xffffffffULL) {
    out->push_back(static_cast<char>(initial | 26));
    width = 4;
  } else {
    out->push_back(static_cast<char>(initial | 27));
    width = 8;
  }
  for (int i = width - 1; i >= 0; --i) out->push_back(static_cast<char>(arg >> (8 * i)));
}

void PutUint(std::string* out, uint64_t v) { PutHead(out, kUnsigned, v); }

void PutInt(std::string* out, int64_t v) {
  if (v >= 0) {
    PutHead(out, kUnsigned, static_cast<uint64_t>(v));
  } else {
    // CBOR major 1 carries -1 - v; computed without overflow for INT64_MIN.
    PutHead(out, kNegative, static_cast<uint64_t>(-(v + 1)));
  }
}

void PutBytes(std::string* out, const uint8_t* data, size_t n) {
  PutHead(out, kByteString, n);
  out->append(reinterpret_cast<const char*>(data), n);
}

void PutText(std::string* out, std::string_view s) {
  PutHead(out, kTextString, s.size());
  out->append(s);
}

void PutItem(std::string* out, const VllmBlockHasher::ExtraItem& item) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          PutText(out, v);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          PutUint(out, v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          PutInt(out, v);
        } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
          PutBytes(out, v.data(), v.size());
        } else {
          static_assert(std::is_same_v<T, VllmBlockHasher::ExtraItem::MmRef>);
          PutHead(out, kArray, 2);
          PutText(out, v.identifier);
          PutInt(out, v.offset);
        }
      },
      item.value);
}

// SHA-256 via OpenSSL's EVP one-shot. With the default provider it fails only when it cannot
// allocate its context. That is treated like any other allocation failure (fatal) rather than
// as an error value that every hashing caller would have to check.
VllmBlockHasher::Digest Sha256(std::string_view data) {
  VllmBlockHasher::Digest digest{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != digest.size()) {
    std::fputs("kvatlas: EVP_Digest(SHA-256) failed\n", stderr);
    std::abort();
  }
  return digest;
}

}  // namespace

VllmBlockHasher::VllmBlockHasher(std::string_view python_hash_seed) {
  // vLLM: NONE_HASH = hash_fn(os.getenv("PYTHONHASHSEED")), the seed *string*, not an int.
  std::string cbor;
  PutText(&cbor, python_hash_seed);
  none_hash_ = Sha256(cbor);
}

VllmBlockHasher::Digest VllmBlockHasher::HashBlock(const Digest& parent,
                                                   std::span<const uint32_t> tokens,
                                                   std::span<const ExtraItem> extra) const {
  // (parent_block_hash, tuple(token_ids), extra_keys) → CBOR array of 3.
  std::string cbor;
  cbor.reserve(3 + 2 + parent.size() + 9 + 5 * tokens.size() + (extra.empty() ? 1 : 64));
  PutHead(&cbor, kArray, 3);
  PutBytes(&cbor, parent.data(), parent.size());
  PutHead(&cbor, kArray, tokens.size());
  for (uint32_t t : tokens) PutUint(&cbor, t);
  if (extra.empty()) {
    cbor.push_back(static_cast<char>(kNull));
  } else {
    PutHead(&cbor, kArray, extra.size());
    for (const ExtraItem& item : extra) PutItem(&cbor, item);
  }
  return Sha256(cbor);
}

std::vector<VllmBlockHasher::ExtraItem> VllmBlockHasher::BlockExtraKeys(const Extras& extras,
                                                                        size_t block_index) {
  std::vector<ExtraItem> keys;
  if (!extras.lora_name.empty()) keys.push_back(ExtraItem::Text(extras.lora_name));
  if (block_index < extras.mm_keys.size()) {
    const auto& mm = extras.mm_keys[block_index];
    keys.insert(keys.end(), mm.begin(), mm.end());
  }
  if (block_index == 0 && !extras.cache_salt.empty()) {
    keys.push_back(ExtraItem::Text(extras.cache_salt));
  }
  if (block_index < extras.trailing_keys.size()) {
    const auto& tail = extras.trailing_keys[block_index];
    keys.insert(keys.end(), tail.begin(), tail.end());
  }
  return keys;
}

std::vector<VllmBlockHasher::Digest> VllmBlockHasher::BlockDigests(std::span<const uint32_t> tokens,
                                                                   uint32_t block_size,
                                                                   const Extras& extras) const {
  std::vector<Digest> digests;
  if (block_size == 0) return digests;
  const size_t blocks = tokens.size() / block_size;
  digests.reserve(blocks);
  const Digest* parent = &none_hash_;
  for (size_t i = 0; i < blocks; ++i) {
    const std::vector<ExtraItem> extra = BlockExtraKeys(extras, i);
    digests.push_back(HashBlock(*parent, tokens.subspan(i * block_size, block_size), extra));
    parent = &digests.back();  // no reallocation: reserved above
  }
  return digests;
}

std::vector<uint64_t> VllmBlockHasher::BlockHashes(std::span<const uint32_t> tokens,
                                                   uint32_t block_size,
                                                   const Extras& extras) const {
  const std::vector<Digest> digests = BlockDigests(tokens, block_size, extras);
  std::vector<uint64_t> hashes;
  hashes.reserve(digests.size());
  for (const Digest& d : digests) hashes.push_back(Project(d));
  return hashes;
}

uint64_t VllmBlockHasher::Project(const Digest& digest) {
  uint64_t v = 0;
  for (size_t i = digest.size() - 8; i < digest.size(); ++i) v = (v << 8) | digest[i];
  return v;
}

}  // namespace kvatlas
