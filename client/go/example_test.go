package kvatlas_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"kvatlas.dev/kvatlas"
)

// The example of docs/go.md, compiled by go test (not run: it needs a server).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := kvatlas.Dial(ctx, kvatlas.Options{
		Endpoints: []string{"10.0.0.1:7071", "10.0.0.2:7071", "10.0.0.3:7071"},
		Token:     os.Getenv("KVATLAS_TOKEN"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	prompt := make([]uint32, 64)
	llama := kvatlas.Context{Model: "llama", BlockSize: 16}
	answer, err := client.Lookup(ctx, kvatlas.LookupRequest{Context: llama, Tokens: prompt})
	if err == nil && len(answer.Instances) > 0 {
		log.Printf("%s holds %d blocks on GPU", answer.Instances[0].InstanceID, answer.Instances[0].Blocks.GPU)
	}
	route, err := client.Route(ctx, kvatlas.RouteRequest{
		Lookup:     kvatlas.LookupRequest{Context: llama, Tokens: prompt},
		Candidates: []kvatlas.Candidate{{InstanceID: "vllm-0"}, {InstanceID: "vllm-1", QueuedPrefillTokens: 512}},
	})
	if err == nil {
		log.Printf("route to %s", route.Ranked[0].Candidate.InstanceID)
	}
	_, err = client.IngestOnce(ctx, kvatlas.WriterPosition{ID: "sched-1", Sequence: 42}, []kvatlas.Event{{
		Type: kvatlas.EventStored, Context: llama, Holder: kvatlas.Holder{BackendID: "vllm-0"},
		Tier: kvatlas.TierGPU, TokenIDs: prompt[:32],
	}})
	var e *kvatlas.Error
	switch {
	case errors.Is(err, kvatlas.ErrPermissionDenied): // a read token
	case errors.Is(err, kvatlas.ErrInvalidArgument) && errors.As(err, &e):
		log.Printf("bad batch: %s", e.Message)
	case kvatlas.CodeOf(err).Retryable(): // unavailable, resource_exhausted: retry later
	}
}
