package kvatlas

import (
	"crypto/sha256"
	"encoding/binary"
)

// VllmBlockHasher reproduces vLLM's `--prefix-caching-hash-algo sha256_cbor` block hashes
// (docs/hashing.md), as the C++ kvatlas::VllmBlockHasher does, so that a router can
// compute the keys a vLLM engine publishes:
//
//	NONE_HASH = SHA-256(CBOR text of the engine's PYTHONHASHSEED)
//	H_i       = SHA-256(CBOR [bytes(H_{i-1} or NONE_HASH), [tokens of block i], null|[extras]])
//	key       = the last 8 bytes of H_i, big-endian
//
// Immutable and safe for concurrent use.
type VllmBlockHasher struct{ none [32]byte }

// NewVllmBlockHasher takes the engine's PYTHONHASHSEED exactly as set ("0", "42").
func NewVllmBlockHasher(pythonHashSeed string) *VllmBlockHasher {
	var cbor []byte
	cbor = putText(cbor, pythonHashSeed)
	return &VllmBlockHasher{none: sha256.Sum256(cbor)}
}

// NoneHash is the parent of block 0.
func (h *VllmBlockHasher) NoneHash() [32]byte { return h.none }

// ExtraItem is one element of a block's extra-key list; make it with ExtraText,
// ExtraUint, ExtraInt, ExtraBytes or ExtraMM.
type ExtraItem struct {
	kind   uint8 // 0 text, 1 uint, 2 int, 3 bytes, 4 mm pair
	text   string
	u      uint64
	i      int64
	bytes  []byte
	offset int64
}

// ExtraText is a text string (a LoRA name, a cache salt, a bare multimodal identifier).
func ExtraText(s string) ExtraItem { return ExtraItem{kind: 0, text: s} }

// ExtraUint is an unsigned integer.
func ExtraUint(v uint64) ExtraItem { return ExtraItem{kind: 1, u: v} }

// ExtraInt is a signed integer.
func ExtraInt(v int64) ExtraItem { return ExtraItem{kind: 2, i: v} }

// ExtraBytes is a byte string (a prompt-embeds SHA-256).
func ExtraBytes(b []byte) ExtraItem { return ExtraItem{kind: 3, bytes: append([]byte(nil), b...)} }

// ExtraMM is a multimodal item overlapping the block: (identifier, offset of its first
// token relative to the block's first token; negative when it began earlier).
func ExtraMM(identifier string, offset int64) ExtraItem {
	return ExtraItem{kind: 4, text: identifier, offset: offset}
}

// VllmExtras are the request-level inputs of vLLM's generate_block_hash_extra_keys. Block
// i's list is, in this order: LoRAName (if set, every block), MMKeys[i]..., CacheSalt (if
// set, block 0 only), TrailingKeys[i]... An empty list hashes as CBOR null.
type VllmExtras struct {
	LoRAName     string
	CacheSalt    string
	MMKeys       [][]ExtraItem
	TrailingKeys [][]ExtraItem
}

// BlockExtraKeys is block i's extra-key list.
func (x *VllmExtras) BlockExtraKeys(i int) []ExtraItem {
	if x == nil {
		return nil
	}
	var out []ExtraItem
	if x.LoRAName != "" {
		out = append(out, ExtraText(x.LoRAName))
	}
	if i < len(x.MMKeys) {
		out = append(out, x.MMKeys[i]...)
	}
	if x.CacheSalt != "" && i == 0 {
		out = append(out, ExtraText(x.CacheSalt))
	}
	if i < len(x.TrailingKeys) {
		out = append(out, x.TrailingKeys[i]...)
	}
	return out
}

// HashBlock is one block's digest from any parent.
func (h *VllmBlockHasher) HashBlock(parent [32]byte, tokens []uint32, extra []ExtraItem) [32]byte {
	cbor := make([]byte, 0, 40+5*len(tokens))
	cbor = putHead(cbor, 4, 3)
	cbor = putHead(cbor, 2, 32)
	cbor = append(cbor, parent[:]...)
	cbor = putHead(cbor, 4, uint64(len(tokens)))
	for _, t := range tokens {
		cbor = putHead(cbor, 0, uint64(t))
	}
	if len(extra) == 0 {
		cbor = append(cbor, 0xf6)
	} else {
		cbor = putHead(cbor, 4, uint64(len(extra)))
		for _, x := range extra {
			cbor = putExtra(cbor, x)
		}
	}
	return sha256.Sum256(cbor)
}

// BlockDigests are the digests of the complete blocks of tokens, chained from NoneHash.
// extras may be nil.
func (h *VllmBlockHasher) BlockDigests(tokens []uint32, blockSize uint32, extras *VllmExtras) [][32]byte {
	if blockSize == 0 {
		return nil
	}
	n := len(tokens) / int(blockSize)
	out := make([][32]byte, n)
	parent := h.none
	for i := 0; i < n; i++ {
		parent = h.HashBlock(parent, tokens[i*int(blockSize):(i+1)*int(blockSize)], extras.BlockExtraKeys(i))
		out[i] = parent
	}
	return out
}

// BlockHashes are the 64-bit event keys of BlockDigests.
func (h *VllmBlockHasher) BlockHashes(tokens []uint32, blockSize uint32, extras *VllmExtras) []uint64 {
	digests := h.BlockDigests(tokens, blockSize, extras)
	out := make([]uint64, len(digests))
	for i := range digests {
		out[i] = ProjectVllmDigest(digests[i])
	}
	return out
}

// ProjectVllmDigest is vLLM's event projection: int.from_bytes(digest, "big") & (2^64-1).
func ProjectVllmDigest(d [32]byte) uint64 { return binary.BigEndian.Uint64(d[24:]) }

// putHead writes a CBOR head in canonical (shortest) form.
func putHead(b []byte, major uint8, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(b, m|uint8(arg))
	case arg <= 0xff:
		return append(b, m|24, uint8(arg))
	case arg <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(arg))
	case arg <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(arg))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), arg)
}

func putText(b []byte, s string) []byte { return append(putHead(b, 3, uint64(len(s))), s...) }

func putInt(b []byte, v int64) []byte {
	if v >= 0 {
		return putHead(b, 0, uint64(v))
	}
	return putHead(b, 1, uint64(-(v + 1)))
}

func putExtra(b []byte, x ExtraItem) []byte {
	switch x.kind {
	case 0:
		return putText(b, x.text)
	case 1:
		return putHead(b, 0, x.u)
	case 2:
		return putInt(b, x.i)
	case 3:
		return append(putHead(b, 2, uint64(len(x.bytes))), x.bytes...)
	}
	b = putHead(b, 4, 2)
	return putInt(putText(b, x.text), x.offset)
}
