package kvatlas

import (
	"context"
	"fmt"
)

// Approximate mode's local decisions (docs/routing.md §Approximate mode, docs/protocol.md
// §kPredict): a router that decided in its own process (LocalIndex, ScoreCandidates) tells
// the cluster where it sent a request, and the cluster records the request's blocks as
// predicted there, as it does for its own routes' picks.

// MaxPredictKeys is the most block keys one RecordPrediction carries (the server keeps
// the first max_lookup_blocks of them).
const MaxPredictKeys = 65_536

func encodePredict(c Context, h Holder, keys []uint64) []byte {
	e := &encoder{b: make([]byte, 0, 32+len(c.Tenant)+len(c.Model)+len(c.LoRA)+len(c.Salt)+
		len(h.BackendID)+8*len(keys))}
	putContext(e, c)
	putHolder(e, h)
	e.varint(uint64(len(keys)))
	for _, k := range keys {
		e.u64(k)
	}
	return e.b
}

func decodePredictAnswer(p []byte) (uint32, error) {
	d := &decoder{b: p}
	queued := d.varint32("queued")
	return queued, d.finish()
}

// checkPredict refuses, unsent, what the server's kPredict decoder refuses, with its
// messages.
func checkPredict(c Context, h Holder, keys []uint64) error {
	switch {
	case c.Model == "":
		return newError(CodeInvalidArgument, "model_name: must be a non-empty string")
	case c.BlockSize == 0:
		return newError(CodeInvalidArgument, "block_size: must be a positive integer")
	case h.BackendID == "":
		return newError(CodeInvalidArgument, "backend_id: must be a non-empty string")
	case len(keys) == 0:
		return newError(CodeInvalidArgument, "keys: at least one block key is needed")
	case len(keys) > MaxPredictKeys:
		return newError(CodePayloadTooLarge, fmt.Sprintf(
			"keys: %d block keys; one prediction holds at most %d", len(keys), MaxPredictKeys))
	}
	return nil
}

// RecordPrediction tells the cluster that this router sent the request of block keys
// `keys` (the standard rolling hashes, from block 0) to holder, a decision it made in its
// own process: the blocks are recorded as predicted there for the server's
// predicted_ttl_ms, as a Route's pick of a Predict candidate is (binary kPredict, POST
// /v1/predictions). Every replica's routes then credit them, and a LocalIndex with
// Predictions on sees them. Any member takes it (a follower forwards it with its next
// prediction round, within ~50 ms); the answer comes once the keys are queued, not
// applied. It returns the keys queued (the server's max_lookup_blocks at most).
//
// An empty Tenant is "default". Fails unsent with ErrInvalidArgument for an empty model,
// block size 0, an empty backend id or no keys, and ErrPayloadTooLarge past
// MaxPredictKeys; the server answers ErrFailedPrecondition when it records no predictions
// (predicted_max_entries 0), ErrResourceExhausted when its prediction queue is full
// (retry later), and ErrInvalidArgument when it predates kPredict. Writer role.
func (c *Client) RecordPrediction(ctx context.Context, in Context, holder Holder, keys []uint64) (uint32, error) {
	if err := checkPredict(in, holder, keys); err != nil {
		return 0, err
	}
	p, err := c.read(ctx, typePredict, encodePredict(normalContext(in), holder, keys))
	queued, err := decoded(p, err, decodePredictAnswer)
	if err != nil {
		return 0, err
	}
	return *queued, nil
}
