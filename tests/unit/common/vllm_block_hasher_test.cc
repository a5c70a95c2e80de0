// Test vectors were computed independently of this implementation with /usr/bin/python3,
// hashlib.sha256 and CBOR bytes built by hand (no CBOR library):
//
//   import hashlib, struct
//   def head(major, n):
//       if n < 24: return bytes([major << 5 | n])
//       for ai, fmt in ((24, '>B'), (25, '>H'), (26, '>I'), (27, '>Q')):
//           if n < 1 << (8 * struct.calcsize(fmt)):
//               return bytes([major << 5 | ai]) + struct.pack(fmt, n)
//   def uint(n): return head(0, n)
//   def sint(n): return uint(n) if n >= 0 else head(1, -1 - n)
//   def text(s): b = s.encode(); return head(3, len(b)) + b
//   def byts(b): return head(2, len(b)) + b
//   def arr(items): return head(4, len(items)) + b''.join(items)
//   NULL = b'\xf6'
//   def sha(b): return hashlib.sha256(b).digest()
//   def block(parent, toks, extra):  # extra: pre-encoded items, or None
//       return sha(arr([byts(parent), arr([uint(t) for t in toks]),
//                       NULL if not extra else arr(extra)]))
//   def proj(d): return int.from_bytes(d, 'big') & (2**64 - 1)
//   N0, N42 = sha(text('0')), sha(text('42'))
//   for t in (0, 23, 24, 255, 256, 65535, 65536, 2**32 - 1): block(N0, [t], None)
//   block(N0, [0], [uint(2**32)]); block(N0, [0], [uint(2**64 - 1)])
//   h0 = block(N42, range(1, 17), None); h1 = block(h0, range(17, 33), None)
//   l0 = block(N0, range(100, 116), [text('sql-lora'), text('tenant-a')])
//   l1 = block(l0, range(116, 132), [text('sql-lora')])
//   s0 = block(N0, range(100, 116), [text('tenant-a')]); s1 = block(s0, range(116, 132), None)
//   m0 = block(N0, range(7, 11), [text('sql-lora'), arr([text('img-abc'), sint(2)]), text('s')])
//   m1 = block(m0, range(11, 15), [text('sql-lora'), arr([text('img-abc'), sint(-2)])])
//   block(N0, [5], [uint(1000), sint(-1), sint(-25), sint(-2**63), byts(b'\xab' * 32),
//                   text('id')])
//   proj(bytes(range(32)))
//
// The hand encoders were checked against RFC 8949 Appendix A examples, and all vectors were
// cross-checked once against cbor2.dumps(obj, canonical=True) (Debian python3-cbor2 5.4.6,
// the library vLLM's sha256_cbor uses) with vLLM's Python tuples, e.g.
// (N0, (7, 8, 9, 10), ('sql-lora', ('img-abc', 2), 's')).
#include "kvatlas/common/vllm_block_hasher.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

namespace kvatlas {
namespace {

using Digest = VllmBlockHasher::Digest;
using Item = VllmBlockHasher::ExtraItem;

std::string Hex(const Digest& d) {
  std::string s;
  char buf[3];
  for (uint8_t b : d) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    s += buf;
  }
  return s;
}

std::vector<uint32_t> Iota(uint32_t first, size_t n) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST_SUITE("VllmBlockHasher") {
  TEST_CASE("NONE_HASH is SHA-256 of the CBOR text string of PYTHONHASHSEED") {
    CHECK(Hex(VllmBlockHasher("0").none_hash()) ==
          "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e");
    CHECK(Hex(VllmBlockHasher("42").none_hash()) ==
          "9fa6eb003f14425eb9c8e6baacfbcaab26257357b829c7bfa74ffcc4f31c1780");
  }

  TEST_CASE("token ints use the shortest CBOR form at every width boundary") {
    const VllmBlockHasher h("0");
    struct Vector {
      uint32_t token;
      const char* digest;
    };
    const Vector vectors[] = {
        {0, "089cbc4133d486069e9c2a18d642db7e46dd33742ba375954e5abb8bf05c6e79"},
        {23, "3ecd6c0c0f588cf9dfc2392d47d6ec2b102df21a628025c19cb340cde3dbca0e"},
        {24, "041ff1bc30735ea772f765c50c5a519dcddb63d43644a6e7f8307ea900d0f8e6"},
        {255, "17042c72fe151465f63b2d00b792777c9c69fcc487c7d819695d7fd71e517999"},
        {256, "cac7e21c9a0a911f31e426c27aa891006f23e1d16848e9b7cc29d803a5761cd3"},
        {65535, "33dde3d86137eaf716bb4afefe42ee9d6e6cc4b7478f92f661ba19512101a322"},
        {65536, "084c601b69a447132a89ce32ee1445884046f62ab1e1e6dc396bd64c7e316466"},
        {4294967295u, "4fbca2a8463ad2f717083db3ed0704ba32df332893b8812ae0d5fe00cc3aa413"},
    };
    for (const Vector& v : vectors) {
      CAPTURE(v.token);
      const uint32_t tokens[] = {v.token};
      CHECK(Hex(h.HashBlock(h.none_hash(), tokens, {})) == v.digest);
      // BlockHashes() with block size 1 hashes the same single block.
      const auto hashes = h.BlockHashes(tokens, 1);
      REQUIRE(hashes.size() == 1);
      CHECK(hashes[0] == VllmBlockHasher::Project(h.HashBlock(h.none_hash(), tokens, {})));
    }
  }

  TEST_CASE("8-byte CBOR ints (beyond uint32 tokens) via extra items") {
    const VllmBlockHasher h("0");
    const uint32_t tokens[] = {0};
    const Item two_pow_32[] = {Item::Uint(4294967296ULL)};
    CHECK(Hex(h.HashBlock(h.none_hash(), tokens, two_pow_32)) ==
          "75cfa35051968d0906780cd0ba8f3c953bf84f1b5e57531a2a9c43a92d3da22c");
    const Item max_u64[] = {Item::Uint(UINT64_MAX)};
    CHECK(Hex(h.HashBlock(h.none_hash(), tokens, max_u64)) ==
          "f88e28d33c48eaabbf4324dfc092ab68768a72d3906e6ed0db3b413be639f1c9");
  }

  TEST_CASE("two-block chain, block size 16; the trailing partial block is ignored") {
    const VllmBlockHasher h("42");
    std::vector<uint32_t> tokens = Iota(1, 32);
    const auto digests = h.BlockDigests(tokens, 16);
    REQUIRE(digests.size() == 2);
    CHECK(Hex(digests[0]) == "476e88fb0c175c0b4ef0343e158b5157c2ac537d37d97830e235fcc84bc5706d");
    CHECK(Hex(digests[1]) == "9c89b9f2af12de95c90eb76195371e73760b4df4aa7617587856ae50e4ba5af8");
    // The second block chains the full 32-byte parent digest, not its projection.
    CHECK(h.HashBlock(digests[0], std::span(tokens).subspan(16), {}) == digests[1]);

    const std::vector<uint64_t> expected{0xe235fcc84bc5706dULL, 0x7856ae50e4ba5af8ULL};
    CHECK(h.BlockHashes(tokens, 16) == expected);
    for (uint32_t t = 1001; t < 1016; ++t) tokens.push_back(t);  // a partial block of 15
    CHECK(h.BlockHashes(tokens, 16) == expected);
    CHECK(h.BlockHashes(std::span(tokens).first(31), 16) == std::vector<uint64_t>{expected[0]});
    CHECK(h.BlockHashes(std::span(tokens).first(15), 16).empty());
    CHECK(h.BlockHashes(tokens, 0).empty());
  }

  TEST_CASE("LoRA name on every block, cache_salt only on the block at token 0") {
    const VllmBlockHasher h("0");
    const std::vector<uint32_t> tokens = Iota(100, 32);

    VllmBlockHasher::Extras lora_and_salt;
    lora_and_salt.lora_name = "sql-lora";
    lora_and_salt.cache_salt = "tenant-a";
    CHECK(h.BlockHashes(tokens, 16, lora_and_salt) ==
          std::vector<uint64_t>{0xe868f7e4cc50e9aeULL, 0xbe17f2b775cc9400ULL});

    VllmBlockHasher::Extras salt_only;
    salt_only.cache_salt = "tenant-a";
    CHECK(h.BlockHashes(tokens, 16, salt_only) ==
          std::vector<uint64_t>{0x1a93f8b08d5b18b9ULL, 0xe220bb769b900210ULL});

    // No extras at all differs from both.
    const auto plain = h.BlockHashes(tokens, 16);
    CHECK(plain[0] != 0x1a93f8b08d5b18b9ULL);
    CHECK(plain[1] != 0xe220bb769b900210ULL);
  }

  TEST_CASE("multimodal [identifier, relative offset] items sit between LoRA and salt") {
    // An image occupying tokens 2..5 of 7..14 with block size 4: block 0 sees it at offset 2,
    // block 1 at offset -2 (it began in the previous block).
    const VllmBlockHasher h("0");
    VllmBlockHasher::Extras extras;
    extras.lora_name = "sql-lora";
    extras.cache_salt = "s";
    extras.mm_keys = {{Item::Mm("img-abc", 2)}, {Item::Mm("img-abc", -2)}};

    const auto keys0 = VllmBlockHasher::BlockExtraKeys(extras, 0);
    REQUIRE(keys0.size() == 3);
    CHECK(keys0[0] == Item::Text("sql-lora"));
    CHECK(keys0[1] == Item::Mm("img-abc", 2));
    CHECK(keys0[2] == Item::Text("s"));
    CHECK(VllmBlockHasher::BlockExtraKeys(extras, 1).size() == 2);
    CHECK(VllmBlockHasher::BlockExtraKeys(extras, 2).size() == 1);

    CHECK(h.BlockHashes(Iota(7, 8), 4, extras) ==
          std::vector<uint64_t>{0xc31f72fac56712acULL, 0xce632fb6261f68f6ULL});
  }

  TEST_CASE("every extra item type: uint, negative ints, bytes, text") {
    const VllmBlockHasher h("0");
    const uint32_t tokens[] = {5};
    const Item extra[] = {Item::Uint(1000),
                          Item::Int(-1),
                          Item::Int(-25),
                          Item::Int(INT64_MIN),
                          Item::Bytes(std::vector<uint8_t>(32, 0xab)),
                          Item::Text("id")};
    CHECK(Hex(h.HashBlock(h.none_hash(), tokens, extra)) ==
          "05156541aefa59129d2dd337ea18263be5cf400bf9eb509643fb2d81c9c2ea7b");
  }

  TEST_CASE("Project reads the last 8 digest bytes big-endian") {
    Digest d;
    std::iota(d.begin(), d.end(), uint8_t{0});
    CHECK(VllmBlockHasher::Project(d) == 0x18191a1b1c1d1e1fULL);
    const VllmBlockHasher h("42");
    const auto digests = h.BlockDigests(Iota(1, 16), 16);
    REQUIRE(digests.size() == 1);
    CHECK(VllmBlockHasher::Project(digests[0]) == 0xe235fcc84bc5706dULL);
  }
}

}  // namespace
}  // namespace kvatlas
