package kvatlas

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"kvatlas.dev/kvatlas/xxh3"
)

// vectorCase is one command for the C++ side (tests/go/hash_vectors.cc) and the answer the
// Go code gives for it.
type vectorCase struct {
	command string
	want    string // Go's answer, compared with C++'s
}

// runVectors sends every case to the C++ tool in one run and compares the answers.
func runVectors(t *testing.T, cases []vectorCase) {
	t.Helper()
	bin := os.Getenv("KVATLAS_HASH_VECTORS_BIN")
	if bin == "" {
		t.Skip("KVATLAS_HASH_VECTORS_BIN is not set (the go_hash_vectors tool; ctest sets it)")
	}
	var in strings.Builder
	for _, c := range cases {
		in.WriteString(c.command)
		in.WriteByte('\n')
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(cases) {
			t.Fatalf("the tool answered more lines than the %d commands", len(cases))
		}
		if got := sc.Text(); got != cases[i].want {
			t.Errorf("%s\n  C++: %s\n  Go:  %s", cases[i].command, got, cases[i].want)
		}
	}
	if i != len(cases) {
		t.Fatalf("the tool answered %d of %d commands", i, len(cases))
	}
}

func tokenList(tokens []uint32) string {
	if len(tokens) == 0 {
		return "-"
	}
	parts := make([]string, len(tokens))
	for i, tok := range tokens {
		parts[i] = strconv.FormatUint(uint64(tok), 10)
	}
	return strings.Join(parts, ",")
}

func numbers(v []uint64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// XXH3-64 of every length through the short, mid-size and long (several stripes and
// blocks) paths, with seed 0, the default seed and random seeds.
func TestXXH3MatchesLibxxhash(t *testing.T) {
	rng := rand.New(rand.NewSource(38))
	var lengths []int
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 511, 512, 1023, 1024, 1025, 2047, 2048, 2049, 4096, 5000, 16385)
	var cases []vectorCase
	for _, n := range lengths {
		data := make([]byte, n)
		rng.Read(data)
		for _, seed := range []uint64{0, DefaultHashSeed, rng.Uint64()} {
			h := "-"
			if n > 0 {
				h = hex.EncodeToString(data)
			}
			cases = append(cases, vectorCase{fmt.Sprintf("xxh3 %d %s", seed, h),
				strconv.FormatUint(xxh3.HashSeed(data, seed), 10)})
		}
	}
	runVectors(t, cases)
}

// The rolling block keys, as kvatlas::BlockHasher computes them, over block sizes whose
// byte lengths take every XXH3 path, with a trailing partial block.
func TestBlockHasherMatchesCpp(t *testing.T) {
	rng := rand.New(rand.NewSource(1527))
	var cases []vectorCase
	for _, bs := range []uint32{1, 2, 3, 4, 5, 16, 17, 32, 33, 60, 64, 100, 256, 300} {
		for _, seed := range []uint64{DefaultHashSeed, 0, rng.Uint64()} {
			tokens := make([]uint32, int(bs)*3+int(bs)/2)
			for i := range tokens {
				tokens[i] = rng.Uint32()
			}
			got := NewBlockHasher(seed).SequenceHashes(tokens, bs)
			cases = append(cases, vectorCase{fmt.Sprintf("seq %d %d %s", seed, bs, tokenList(tokens)), numbers(got)})
		}
	}
	runVectors(t, cases)
}

// vLLM's sha256_cbor hashes, as kvatlas::VllmBlockHasher computes them: both roots, every
// CBOR integer width, LoRA and salt; and single blocks with every kind of extra item.
func TestVllmBlockHasherMatchesCpp(t *testing.T) {
	rng := rand.New(rand.NewSource(1403))
	boundaries := []uint32{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1}
	var cases []vectorCase
	for _, seed := range []string{"0", "42"} {
		for _, bs := range []uint32{1, 2, 16, 17} {
			for _, extra := range [][2]string{{"", ""}, {"sql-lora", ""}, {"", "salt-1"}, {"sql-lora", "salt-1"}} {
				tokens := append([]uint32(nil), boundaries...)
				for len(tokens) < int(bs)*3+1 {
					tokens = append(tokens, rng.Uint32()>>uint(rng.Intn(32)))
				}
				x := &VllmExtras{LoRAName: extra[0], CacheSalt: extra[1]}
				got := NewVllmBlockHasher(seed).BlockHashes(tokens, bs, x)
				cases = append(cases, vectorCase{fmt.Sprintf("vllm %s %d %s %s %s", seed, bs, tokenList(tokens),
					orDash(extra[0]), orDash(extra[1])), numbers(got)})
			}
		}
	}
	itemSets := []struct {
		spec  string
		items []ExtraItem
	}{
		{"-", nil},
		{"t:lora", []ExtraItem{ExtraText("lora")}},
		{"u:0,u:23,u:24,u:65536,u:18446744073709551615", []ExtraItem{ExtraUint(0), ExtraUint(23), ExtraUint(24), ExtraUint(65536), ExtraUint(1<<64 - 1)}},
		{"i:-1,i:-24,i:-25,i:-256,i:-257,i:7,i:-9223372036854775808", []ExtraItem{ExtraInt(-1), ExtraInt(-24), ExtraInt(-25), ExtraInt(-256), ExtraInt(-257), ExtraInt(7), ExtraInt(-1 << 63)}},
		{"m:img-1:-3,m:img-2:0,m:audio:300", []ExtraItem{ExtraMM("img-1", -3), ExtraMM("img-2", 0), ExtraMM("audio", 300)}},
		{"t:l,m:img:5,t:salt,b:00ff10", []ExtraItem{ExtraText("l"), ExtraMM("img", 5), ExtraText("salt"), ExtraBytes([]byte{0, 0xff, 0x10})}},
	}
	for _, set := range itemSets {
		var parent [32]byte
		rng.Read(parent[:])
		tokens := []uint32{1, 2, 3, 300, 70000}
		d := NewVllmBlockHasher("0").HashBlock(parent, tokens, set.items)
		cases = append(cases, vectorCase{fmt.Sprintf("block %s %s %s", hex.EncodeToString(parent[:]), tokenList(tokens), set.spec),
			hex.EncodeToString(d[:])})
	}
	runVectors(t, cases)
}

// The server hashes token ids with its own seed: lookups by the keys computed here find
// the blocks it stored from tokens.
func TestServerHashesTokensLikeGo(t *testing.T) {
	const seed = 99
	s := startServer(t, "--hash-seed", strconv.Itoa(seed))
	c := dialT(t, Options{Endpoints: []string{s.rpc}})
	ctx := testCtx(t)
	rng := rand.New(rand.NewSource(seed))
	for _, bs := range []uint32{1, 16, 33, 100} {
		context := Context{Model: "m", BlockSize: bs}
		tokens := make([]uint32, int(bs)*5)
		for i := range tokens {
			tokens[i] = rng.Uint32()
		}
		ev := Event{Type: EventStored, Context: context, Holder: Holder{BackendID: "e"}, TokenIDs: tokens}
		if _, err := c.Ingest(ctx, []Event{ev}); err != nil {
			t.Fatalf("ingest tokens, block size %d: %v", bs, err)
		}
		keys := NewBlockHasher(seed).SequenceHashes(tokens, bs)
		a, err := c.Lookup(ctx, LookupRequest{Context: context, Hashes: keys})
		if err != nil || a.BlocksFound != 5 {
			t.Errorf("block size %d: lookup by Go's keys found %+v, %v; want all 5 blocks", bs, a, err)
		}
	}
}
