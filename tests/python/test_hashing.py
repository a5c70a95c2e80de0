"""BlockHasher and VllmBlockHasher: the C++ hashers' test vectors (tests/unit/common/
block_hasher_test.cc, vllm_block_hasher_test.cc; docs/hashing.md), recomputed independently
in Python with python3-xxhash and hashlib + a minimal CBOR encoder."""

import array
import hashlib
import struct

import pytest
import xxhash

import kvatlas


def xxh_sequence(tokens, block_size, seed):
    """The standard rolling hash (docs/hashing.md) with Python's xxhash."""
    out, parent = [], None
    for i in range(len(tokens) // block_size):
        block = tokens[i * block_size:(i + 1) * block_size]
        local = xxhash.xxh3_64_intdigest(struct.pack(f"<{block_size}I", *block), seed=seed)
        parent = local if parent is None else xxhash.xxh3_64_intdigest(
            struct.pack("<QQ", parent, local), seed=seed)
        out.append(parent)
    return out


# (seed, tokens, block_size, the C++ test's expected keys)
VECTORS = [
    (1337, list(range(1, 49)), 16, [0xea06fc71a5ee6e88, 0xad01835a37dd294c, 0x0d55e56c2bccbd1a]),
    (0, [7] * 8 + [4000000000] * 8 + [123], 4,
     [0x5946c94da02d796f, 0x29d9dbcbaebdf82f, 0xc1a4a66de08526fc, 0x9b192d4366ed2b71]),
    (42, list(range(100, 1124)), 512, [0x41612d47c0b704b1, 0xcee0a9b183931362]),
]


@pytest.mark.parametrize("seed,tokens,block_size,expected", VECTORS)
def test_block_hasher_matches_cpp_vectors_and_xxhash(seed, tokens, block_size, expected):
    h = kvatlas.BlockHasher(seed)
    assert h.seed == seed
    assert h.sequence_hashes(tokens, block_size) == expected
    assert xxh_sequence(tokens, block_size, seed) == expected
    # Buffers are accepted as well as lists.
    assert h.sequence_hashes(array.array("I", tokens), block_size) == expected


def test_block_hasher_parts():
    h = kvatlas.BlockHasher()
    assert h.seed == kvatlas.DEFAULT_HASH_SEED == 1337
    assert h.local_hash([1, 2, 3, 4]) == 0xcb38e4d7fb2dca5c
    assert h.local_hash([]) == 0xd1f3e77444430ab9
    tokens = list(range(1, 49))
    whole = h.sequence_hashes(tokens, 16)
    assert h.sequence_hashes(tokens[16:], 16, parent=whole[0]) == whole[1:]
    locals_ = h.local_hashes(tokens, 16)
    assert h.chain_locals(locals_) == whole
    assert h.chain(whole[0], locals_[1]) == whole[1]


def test_block_hasher_rejects_bad_input():
    h = kvatlas.BlockHasher()
    with pytest.raises(ValueError):
        h.sequence_hashes([1, 2], 0)
    with pytest.raises(TypeError):
        h.sequence_hashes([1, -2], 1)
    with pytest.raises(TypeError):
        h.sequence_hashes([1, 2 ** 32], 1)
    with pytest.raises(TypeError):
        h.sequence_hashes("abc", 1)
    with pytest.raises(TypeError):
        h.sequence_hashes(array.array("d", [1.0]), 1)


def cbor_head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | extra]) + struct.pack(fmt, n)
    raise ValueError(n)


def vllm_hashes(seed, tokens, block_size):
    """vLLM's sha256_cbor block hashes without extras (docs/hashing.md), from scratch."""
    parent = hashlib.sha256(cbor_head(3, len(seed)) + seed.encode()).digest()
    out = []
    for i in range(len(tokens) // block_size):
        block = tokens[i * block_size:(i + 1) * block_size]
        body = cbor_head(4, 3) + cbor_head(2, 32) + parent + cbor_head(4, len(block))
        body += b"".join(cbor_head(0, t) for t in block) + b"\xf6"
        parent = hashlib.sha256(body).digest()
        out.append(int.from_bytes(parent[-8:], "big"))
    return out


def test_vllm_block_hasher_matches_cpp_vectors_and_python():
    h = kvatlas.VllmBlockHasher("42")
    tokens = list(range(1, 33))
    expected = [0xe235fcc84bc5706d, 0x7856ae50e4ba5af8]
    assert h.block_hashes(tokens, 16) == expected
    assert vllm_hashes("42", tokens, 16) == expected
    assert h.block_hashes(tokens + list(range(1001, 1016)), 16) == expected  # partial ignored
    digests = h.block_digests(tokens, 16)
    assert digests[0].hex() == "476e88fb0c175c0b4ef0343e158b5157c2ac537d37d97830e235fcc84bc5706d"
    assert [kvatlas.VllmBlockHasher.project(d) for d in digests] == expected
    assert h.hash_block(digests[0], tokens[16:]) == digests[1]
    assert h.hash_block(h.none_hash, tokens[:16]) == digests[0]


def test_vllm_block_hasher_extras():
    h = kvatlas.VllmBlockHasher("0")
    tokens = list(range(100, 132))
    assert h.block_hashes(tokens, 16, lora_name="sql-lora", cache_salt="tenant-a") == [
        0xe868f7e4cc50e9ae, 0xbe17f2b775cc9400]
    assert h.block_hashes(tokens, 16, cache_salt="tenant-a") == [
        0x1a93f8b08d5b18b9, 0xe220bb769b900210]
    assert h.block_hashes(list(range(7, 15)), 4, lora_name="sql-lora", cache_salt="s",
                          mm_keys=[[("img-abc", 2)], [("img-abc", -2)]]) == [
        0xc31f72fac56712ac, 0xce632fb6261f68f6]
    extra = [1000, -1, -25, -2 ** 63, b"\xab" * 32, "id"]
    assert h.hash_block(h.none_hash, [5], extra).hex() == (
        "05156541aefa59129d2dd337ea18263be5cf400bf9eb509643fb2d81c9c2ea7b")
    with pytest.raises(TypeError):
        h.hash_block(h.none_hash, [5], [1.5])
