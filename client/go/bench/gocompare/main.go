// Command gocompare is the Go half of scripts/bench/go: it ingests chains of 128 blocks held
// by 8 instances into a running server, runs the C++ half (bench/go_compare_bench.cc) on
// them, then times the same calls through the Go client the same way, and prints both with
// their ratio Go / C++: lookups over the binary protocol one at a time (p50, p99, process
// CPU per lookup), LocalIndex lookups (mean, p50, p99) and its memory per copy, and ingest
// (block events/s, CPU per block event). Prints figures only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"

	"kvatlas.dev/kvatlas"
)

func chainTokens(chain, blocks, blockSize int) []uint32 {
	out := make([]uint32, blocks*blockSize)
	for i := range out {
		out[i] = uint32(chain*1_000_000 + i)
	}
	return out
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)*1e-6
}

func percentile(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(p * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "gocompare: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	rpc := flag.String("rpc", "", "the server's binary protocol HOST:PORT")
	cppBench := flag.String("cpp-bench", "", "the go_compare_bench binary")
	chains := flag.Int("chains", 4096, "chains of --blocks blocks")
	blocks := flag.Int("blocks", 128, "blocks per chain (and per lookup)")
	blockSize := flag.Int("block-size", 16, "tokens per block")
	localIters := flag.Int("local-iters", 200_000, "LocalIndex lookups")
	clientIters := flag.Int("client-iters", 5_000, "lookups over the binary protocol")
	ingestBatches := flag.Int("ingest-batches", 500, "ingest batches of 64 events of 16 blocks")
	repeat := flag.Int("repeat", 3, "rounds, each running the C++ half then the Go half")
	flag.Parse()
	if *rpc == "" || *cppBench == "" {
		fail("--rpc and --cpp-bench are required")
	}
	ctx := context.Background()
	kctx := kvatlas.Context{Model: "bench", BlockSize: uint32(*blockSize)}
	hasher := kvatlas.NewBlockHasher(kvatlas.DefaultHashSeed)
	keys := make([][]uint64, *chains)
	for c := range keys {
		keys[c] = hasher.SequenceHashes(chainTokens(c, *blocks, *blockSize), kctx.BlockSize)
	}
	client, err := kvatlas.Dial(ctx, kvatlas.Options{Endpoints: []string{*rpc}})
	if err != nil {
		fail("dial: %v", err)
	}
	defer client.Close()
	var revision uint64
	for c, chain := range keys {
		// Every chain on 3 of 8 instances, one of them only half of it, one in CPU.
		a, err := client.Ingest(ctx, []kvatlas.Event{
			{Type: kvatlas.EventStored, Context: kctx, Holder: kvatlas.Holder{BackendID: fmt.Sprintf("engine-%d", c%8)}, SeqHashes: chain},
			{Type: kvatlas.EventStored, Context: kctx, Holder: kvatlas.Holder{BackendID: fmt.Sprintf("engine-%d", (c+1)%8)}, SeqHashes: chain[:len(chain)/2]},
			{Type: kvatlas.EventStored, Context: kctx, Holder: kvatlas.Holder{BackendID: fmt.Sprintf("engine-%d", (c+2)%8)}, Tier: kvatlas.TierCPU, SeqHashes: chain},
		})
		if err != nil {
			fail("ingest: %v", err)
		}
		revision = a.Revision
	}

	type figures map[string]float64
	var goRuns, cppRuns []figures
	var copies uint64
	for round := 0; round < *repeat; round++ {
		// Alternated, so that both halves see the machine's load alike over the rounds.
		out, err := exec.Command(*cppBench, "--rpc", *rpc, "--revision", strconv.FormatUint(revision, 10),
			"--chains", strconv.Itoa(*chains), "--blocks", strconv.Itoa(*blocks), "--block-size", strconv.Itoa(*blockSize),
			"--local-iters", strconv.Itoa(*localIters), "--client-iters", strconv.Itoa(*clientIters),
			"--ingest-batches", strconv.Itoa(*ingestBatches), "--round", strconv.Itoa(round)).Output()
		if err != nil {
			fail("%s: %v", *cppBench, err)
		}
		cpp := figures{}
		if err := json.Unmarshal(out, &cpp); err != nil {
			fail("the C++ half's output %q: %v", out, err)
		}
		g := figures(goHalf(client, kctx, keys, revision, *localIters, *clientIters, *ingestBatches, round, &copies))
		if uint64(cpp["found"]) != uint64(g["found"]) {
			fail("the halves found different blocks: C++ %v, Go %v", cpp["found"], g["found"])
		}
		for _, f := range []figures{g, cpp} {
			f["local_bytes_per_copy"] = f["local_memory_bytes"] / f["local_copies"]
		}
		goRuns, cppRuns = append(goRuns, g), append(cppRuns, cpp)
	}

	fmt.Printf("%d chains x %d blocks (%d copies in the replica), %d lookups over the protocol, %d local lookups; %d rounds\n",
		*chains, *blocks, copies, *clientIters, *localIters, *repeat)
	fmt.Printf("%-44s %10s %10s %16s\n", "", "Go", "C++", "Go/C++ min-max")
	row := func(name, key string, scale float64, unit string) {
		var gs, cs, ratios []float64
		for i := range goRuns {
			gs, cs = append(gs, goRuns[i][key]*scale), append(cs, cppRuns[i][key]*scale)
			ratios = append(ratios, goRuns[i][key]/cppRuns[i][key])
		}
		sort.Float64s(ratios)
		fmt.Printf("%-44s %10.2f %10.2f %7.2f-%-7.2f\n", name+" ("+unit+")", percentile(gs, 0.5), percentile(cs, 0.5),
			ratios[0], ratios[len(ratios)-1])
	}
	row("lookup 128 blocks p50", "client_lookup_p50_ns", 1e-3, "µs")
	row("lookup 128 blocks p99", "client_lookup_p99_ns", 1e-3, "µs")
	row("lookup client CPU per call", "client_lookup_cpu_ns", 1e-3, "µs")
	row("LocalIndex lookup 128 blocks mean", "local_lookup_ns", 1e-3, "µs")
	row("LocalIndex lookup 128 blocks p50", "local_lookup_p50_ns", 1e-3, "µs")
	row("LocalIndex lookup 128 blocks p99", "local_lookup_p99_ns", 1e-3, "µs")
	row("LocalIndex memory per copy", "local_bytes_per_copy", 1, "bytes")
	row("ingest block events/s", "ingest_block_events_per_s", 1e-3, "k/s")
	row("ingest client CPU per block event", "ingest_cpu_ns_per_block_event", 1, "ns")
}

// goHalf times the Go client's calls as the C++ half times them (its figures by the same
// names). The LocalIndex is made and closed within.
func goHalf(client *kvatlas.Client, kctx kvatlas.Context, keys [][]uint64, revision uint64, localIters, clientIters,
	ingestBatches, round int, copies *uint64) map[string]float64 {
	ctx := context.Background()
	goFig := map[string]float64{}
	found := uint64(0)
	lat := make([]float64, 0, clientIters)
	cpu := cpuSeconds()
	for i := 0; i < clientIters; i++ {
		start := time.Now()
		a, err := client.Lookup(ctx, kvatlas.LookupRequest{Context: kctx, Hashes: keys[i%len(keys)]})
		lat = append(lat, float64(time.Since(start).Nanoseconds()))
		if err != nil {
			fail("lookup: %v", err)
		}
		found += uint64(a.BlocksFound)
	}
	goFig["client_lookup_cpu_ns"] = (cpuSeconds() - cpu) * 1e9 / float64(clientIters)
	goFig["client_lookup_p50_ns"], goFig["client_lookup_p99_ns"] = percentile(lat, 0.5), percentile(lat, 0.99)

	before := heapBytes()
	index, err := kvatlas.NewLocalIndex(ctx, client, kvatlas.LocalIndexOptions{Contexts: []kvatlas.Context{kctx}})
	if err != nil {
		fail("NewLocalIndex: %v", err)
	}
	defer index.Close()
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := index.WaitForRevision(wait, revision); err != nil {
		fail("LocalIndex: %v", err)
	}
	memory := heapBytes() - before
	*copies = index.Status()[0].Copies
	local := make([]float64, 0, localIters)
	localStart := time.Now()
	for i := 0; i < localIters; i++ {
		start := time.Now()
		a, err := index.LookupHashes(kctx, keys[i%len(keys)])
		local = append(local, float64(time.Since(start).Nanoseconds()))
		if err != nil {
			fail("local lookup: %v", err)
		}
		found += uint64(a.BlocksFound)
	}
	goFig["local_lookup_ns"] = float64(time.Since(localStart).Nanoseconds()) / float64(localIters)
	goFig["local_lookup_p50_ns"], goFig["local_lookup_p99_ns"] = percentile(local, 0.5), percentile(local, 0.99)
	goFig["local_copies"], goFig["local_memory_bytes"] = float64(*copies), float64(memory)

	ictx := kctx
	ictx.Model = fmt.Sprintf("bench-ingest-go-%d", round)
	cpu = cpuSeconds()
	ingestStart := time.Now()
	blockEvents := 0
	for b := 0; b < ingestBatches; b++ {
		events := make([]kvatlas.Event, 64)
		for e := range events {
			hashes := make([]uint64, 16)
			for k := range hashes {
				hashes[k] = uint64((b*64+e)*16 + k + 1)
			}
			events[e] = kvatlas.Event{Type: kvatlas.EventStored, Context: ictx,
				Holder: kvatlas.Holder{BackendID: fmt.Sprintf("engine-%d", e%8)}, SeqHashes: hashes}
			blockEvents += 16
		}
		if _, err := client.Ingest(ctx, events); err != nil {
			fail("ingest: %v", err)
		}
	}
	goFig["ingest_block_events_per_s"] = float64(blockEvents) / time.Since(ingestStart).Seconds()
	goFig["ingest_cpu_ns_per_block_event"] = (cpuSeconds() - cpu) * 1e9 / float64(blockEvents)
	goFig["found"] = float64(found)
	return goFig

}
