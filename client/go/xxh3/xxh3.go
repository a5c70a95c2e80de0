// Package xxh3 is XXH3-64 (xxHash 0.8, XXH3_64bits_withSeed) in pure Go: the hash under
// kvatlas's standard block keys. It is the general algorithm (every input length), checked
// against libxxhash through the C++ side's test tool (hash_test.go in the parent package).
package xxh3

import (
	"encoding/binary"
	"math/bits"
)

const (
	prime32_1 = 0x9E3779B1
	prime32_2 = 0x85EBCA77
	prime32_3 = 0xC2B2AE3D
	prime64_1 = 0x9E3779B185EBCA87
	prime64_2 = 0xC2B2AE3D27D4EB4F
	prime64_3 = 0x165667B19E3779F9
	prime64_4 = 0x85EBCA77C2B2AE63
	prime64_5 = 0x27D4EB2F165667C5
	primeMx1  = 0x165667919E3779F9
	primeMx2  = 0x9FB21C651E98DF25

	secretSize     = 192
	secretSizeMin  = 136
	stripeLen      = 64
	consumeRate    = 8
	midSizeMax     = 240
	midStartOffset = 3
	midLastOffset  = 17
	lastAccStart   = 7
	mergeAccsStart = 11
)

var kSecret = [secretSize]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

func le32(b []byte) uint64 { return uint64(binary.LittleEndian.Uint32(b)) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func mulFold64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func xxh64Avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime64_2
	h ^= h >> 29
	h *= prime64_3
	h ^= h >> 32
	return h
}

func avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= primeMx1
	h ^= h >> 32
	return h
}

func rrmxmx(h uint64, n uint64) uint64 {
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= primeMx2
	h ^= (h >> 35) + n
	h *= primeMx2
	return h ^ (h >> 28)
}

func mix16(in, secret []byte, seed uint64) uint64 {
	return mulFold64(le64(in)^(le64(secret)+seed), le64(in[8:])^(le64(secret[8:])-seed))
}

// Hash is XXH3_64bits(data): Seed with seed 0.
func Hash(data []byte) uint64 { return HashSeed(data, 0) }

// HashSeed is XXH3_64bits_withSeed(data, seed).
func HashSeed(data []byte, seed uint64) uint64 {
	n := len(data)
	s := kSecret[:]
	switch {
	case n == 0:
		return xxh64Avalanche(seed ^ (le64(s[56:]) ^ le64(s[64:])))
	case n <= 3:
		c1, c2, c3 := uint32(data[0]), uint32(data[n>>1]), uint32(data[n-1])
		combined := c1<<16 | c2<<24 | c3 | uint32(n)<<8
		bitflip := (le32(s) ^ le32(s[4:])) + seed
		return xxh64Avalanche(uint64(combined) ^ bitflip)
	case n <= 8:
		seed ^= uint64(bits.ReverseBytes32(uint32(seed))) << 32
		in1, in2 := le32(data), le32(data[n-4:])
		bitflip := (le64(s[8:]) ^ le64(s[16:])) - seed
		return rrmxmx((in2+in1<<32)^bitflip, uint64(n))
	case n <= 16:
		bitflip1 := (le64(s[24:]) ^ le64(s[32:])) + seed
		bitflip2 := (le64(s[40:]) ^ le64(s[48:])) - seed
		lo := le64(data) ^ bitflip1
		hi := le64(data[n-8:]) ^ bitflip2
		acc := uint64(n) + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi)
		return avalanche(acc)
	case n <= 128:
		acc := uint64(n) * prime64_1
		if n > 32 {
			if n > 64 {
				if n > 96 {
					acc += mix16(data[48:], s[96:], seed)
					acc += mix16(data[n-64:], s[112:], seed)
				}
				acc += mix16(data[32:], s[64:], seed)
				acc += mix16(data[n-48:], s[80:], seed)
			}
			acc += mix16(data[16:], s[32:], seed)
			acc += mix16(data[n-32:], s[48:], seed)
		}
		acc += mix16(data, s, seed)
		acc += mix16(data[n-16:], s[16:], seed)
		return avalanche(acc)
	case n <= midSizeMax:
		acc := uint64(n) * prime64_1
		rounds := n / 16
		for i := 0; i < 8; i++ {
			acc += mix16(data[16*i:], s[16*i:], seed)
		}
		acc = avalanche(acc)
		for i := 8; i < rounds; i++ {
			acc += mix16(data[16*i:], s[16*(i-8)+midStartOffset:], seed)
		}
		acc += mix16(data[n-16:], s[secretSizeMin-midLastOffset:], seed)
		return avalanche(acc)
	}
	if seed == 0 {
		return hashLong(data, s)
	}
	var custom [secretSize]byte
	for i := 0; i < secretSize; i += 16 {
		binary.LittleEndian.PutUint64(custom[i:], le64(s[i:])+seed)
		binary.LittleEndian.PutUint64(custom[i+8:], le64(s[i+8:])-seed)
	}
	return hashLong(data, custom[:])
}

func accumulate512(acc *[8]uint64, in, secret []byte) {
	for i := 0; i < 8; i++ {
		v := le64(in[8*i:])
		k := v ^ le64(secret[8*i:])
		acc[i^1] += v
		acc[i] += (k & 0xffffffff) * (k >> 32)
	}
}

func scramble(acc *[8]uint64, secret []byte) {
	for i := 0; i < 8; i++ {
		a := acc[i]
		a ^= a >> 47
		a ^= le64(secret[8*i:])
		a *= prime32_1
		acc[i] = a
	}
}

func hashLong(data, secret []byte) uint64 {
	acc := [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	n := len(data)
	stripesPerBlock := (len(secret) - stripeLen) / consumeRate
	blockLen := stripeLen * stripesPerBlock
	blocks := (n - 1) / blockLen
	for b := 0; b < blocks; b++ {
		base := data[b*blockLen:]
		for st := 0; st < stripesPerBlock; st++ {
			accumulate512(&acc, base[st*stripeLen:], secret[st*consumeRate:])
		}
		scramble(&acc, secret[len(secret)-stripeLen:])
	}
	stripes := ((n - 1) - blockLen*blocks) / stripeLen
	base := data[blocks*blockLen:]
	for st := 0; st < stripes; st++ {
		accumulate512(&acc, base[st*stripeLen:], secret[st*consumeRate:])
	}
	accumulate512(&acc, data[n-stripeLen:], secret[len(secret)-stripeLen-lastAccStart:])

	result := uint64(n) * prime64_1
	ms := secret[mergeAccsStart:]
	for i := 0; i < 4; i++ {
		result += mulFold64(acc[2*i]^le64(ms[16*i:]), acc[2*i+1]^le64(ms[16*i+8:]))
	}
	return avalanche(result)
}
