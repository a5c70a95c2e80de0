package kvatlas

import (
	"encoding/binary"

	"kvatlas.dev/kvatlas/xxh3"
)

// DefaultHashSeed is the seed of kvatlas's standard block hash (the server's --hash-seed
// default, Dynamo's router seed).
const DefaultHashSeed uint64 = 1337

// BlockHasher computes kvatlas's standard block keys (docs/architecture.md §Hashing), as
// the C++ kvatlas::BlockHasher and the server do:
//
//	local[i] = XXH3_64(tokens of block i as little-endian u32, seed)
//	seq[0]   = local[0]
//	seq[i]   = XXH3_64(le64(seq[i-1]) || le64(local[i]), seed)
//
// Only complete blocks are hashed. The zero value is not useful: use NewBlockHasher. A
// BlockHasher is immutable and safe for concurrent use.
type BlockHasher struct{ seed uint64 }

// NewBlockHasher returns a hasher with the server's seed (its stats' hash_seed).
func NewBlockHasher(seed uint64) BlockHasher { return BlockHasher{seed: seed} }

// Seed is the hasher's seed.
func (h BlockHasher) Seed() uint64 { return h.seed }

// LocalHash is XXH3_64 of one block's tokens.
func (h BlockHasher) LocalHash(block []uint32) uint64 {
	buf := make([]byte, 4*len(block))
	for i, t := range block {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return xxh3.HashSeed(buf, h.seed)
}

// Chain combines a parent sequence hash with a block's local hash.
func (h BlockHasher) Chain(parent, local uint64) uint64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:], parent)
	binary.LittleEndian.PutUint64(buf[8:], local)
	return xxh3.HashSeed(buf[:], h.seed)
}

// SequenceHashes returns the keys of the complete blocks of tokens, chained from the
// root. blockSize 0 gives nil.
func (h BlockHasher) SequenceHashes(tokens []uint32, blockSize uint32) []uint64 {
	return h.sequence(tokens, blockSize, 0, false)
}

// SequenceHashesFrom continues a chain: parent is the key of the block before tokens[0].
func (h BlockHasher) SequenceHashesFrom(parent uint64, tokens []uint32, blockSize uint32) []uint64 {
	return h.sequence(tokens, blockSize, parent, true)
}

func (h BlockHasher) sequence(tokens []uint32, blockSize uint32, parent uint64, hasParent bool) []uint64 {
	if blockSize == 0 {
		return nil
	}
	n := len(tokens) / int(blockSize)
	out := make([]uint64, n)
	buf := make([]byte, 4*int(blockSize))
	for i := 0; i < n; i++ {
		for j, t := range tokens[i*int(blockSize) : (i+1)*int(blockSize)] {
			binary.LittleEndian.PutUint32(buf[4*j:], t)
		}
		seq := xxh3.HashSeed(buf, h.seed)
		if hasParent {
			seq = h.Chain(parent, seq)
		}
		out[i] = seq
		parent, hasParent = seq, true
	}
	return out
}
