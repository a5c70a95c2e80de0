package kvatlas

// Approximate mode's binary payloads (docs/protocol.md §kWatch options, the Record table's
// op 5, §kPredict): the documented bytes, round trips through the server's layout, every
// truncation, and garbage.

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The kWatch start of docs/protocol.md §kWatch (after revision 40, model m, block size 4),
// and the same watch asking for predicted records: those bytes followed by 01.
func TestWatchStartOptionsDocumentedBytes(t *testing.T) {
	const plain = "00 01 2800000000000000 00 01016d 00 0104 00 00 00 00"
	from := uint64(40)
	model, bs := "m", uint32(4)
	f := FeedFilter{Model: &model, BlockSize: &bs}
	if got, want := hexSpaced(encodeWatchStart(&from, &f, false)), hexSpaced(unhex(t, plain)); got != want {
		t.Errorf("watch without options:\n got %s\nwant %s", got, want)
	}
	if got, want := hexSpaced(encodeWatchStart(&from, &f, true)), hexSpaced(unhex(t, plain+"01")); got != want {
		t.Errorf("watch with predicted:\n got %s\nwant %s", got, want)
	}
	// The C++ test's: no from, no filter.
	if got := hexSpaced(encodeWatchStart(nil, &FeedFilter{}, true)); got != "0000000000000000000001" {
		t.Errorf("empty watch with predicted: %s", got)
	}
}

// The predicted record of docs/protocol.md (the bytes of protocol_predicted_test.cc): a
// batch through 41, one predicted record of revision 41, keys [1] on holder h rank 0 in
// context t/m//4/, ending at 0x0102030405 ms.
const predictedBatchHex = "00 2900000000000000 01" +
	"2900000000000000 05 0174016d000400 016800 00" +
	"01 0100000000000000 00" +
	"0504030201000000"

var predictedRecord = FeedRecord{Revision: 41, Op: OpPredicted,
	Context: Context{Tenant: "t", Model: "m", BlockSize: 4}, Holder: Holder{BackendID: "h"},
	Keys: []uint64{1}, ExpiresAtMs: 0x0102030405}

func TestPredictedRecordDocumentedBytes(t *testing.T) {
	b, err := decodeWatchBatch(unhex(t, predictedBatchHex))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if b.final || b.through != 41 || len(b.records) != 1 || !reflect.DeepEqual(b.records[0], predictedRecord) {
		t.Errorf("decoded %+v, want through 41 and %+v", b, predictedRecord)
	}
	if s := OpPredicted.String(); s != "predicted" {
		t.Errorf("OpPredicted.String() = %q", s)
	}
}

// encodeRecord writes a record as the server's PutRecord does (tests only).
func encodeRecord(e *encoder, r *FeedRecord) {
	e.u64(r.Revision)
	e.u8(uint8(r.Op))
	putContext(e, r.Context)
	putHolder(e, r.Holder)
	e.u8(uint8(r.Tier))
	e.varint(uint64(len(r.Keys)))
	for _, k := range r.Keys {
		e.u64(k)
	}
	putStrings(e, r.Locations)
	if r.Op == OpPredicted {
		e.u64(r.ExpiresAtMs)
	}
}

func encodeBatch(through uint64, records []FeedRecord) []byte {
	e := &encoder{}
	e.u8(0)
	e.u64(through)
	e.varint(uint64(len(records)))
	for i := range records {
		encodeRecord(e, &records[i])
	}
	return e.b
}

// Predicted records among others round trip, each with its own expiry, and every other
// op carries no expiry; every truncation of the batch is refused.
func TestPredictedRecordsRoundTrip(t *testing.T) {
	records := []FeedRecord{
		{Revision: 7, Op: OpStored, Context: Context{Tenant: "default", Model: "llama", BlockSize: 16},
			Holder: Holder{BackendID: "a", DPRank: 1}, Tier: TierCPU, Keys: []uint64{1, 2},
			Locations: []string{"x", ""}},
		{Revision: 7, Op: OpPredicted, Context: Context{Tenant: "default", Model: "llama", BlockSize: 16},
			Holder: Holder{BackendID: "q", DPRank: 3}, Keys: []uint64{1, 2, 3}, ExpiresAtMs: 1796000123456},
		{Revision: 8, Op: OpRemoved, Context: Context{Tenant: "default", Model: "llama", BlockSize: 16},
			Holder: Holder{BackendID: "a", DPRank: 1}, Keys: []uint64{2}},
		{Revision: 8, Op: OpPredicted, Context: Context{Tenant: "t", Model: "m", LoRA: "l", BlockSize: 4, Salt: "s"},
			Holder: Holder{BackendID: "q"}, Keys: []uint64{^uint64(0)}, ExpiresAtMs: ^uint64(0)},
	}
	p := encodeBatch(8, records)
	b, err := decodeWatchBatch(p)
	if err != nil || b.through != 8 || !reflect.DeepEqual(b.records, records) {
		t.Fatalf("round trip: %+v, %v", b, err)
	}
	for n := 0; n < len(p); n++ {
		if _, err := decodeWatchBatch(p[:n]); !errors.Is(err, ErrCorruption) {
			t.Errorf("truncated to %d of %d bytes: %v, want corruption", n, len(p), err)
		}
	}
}

func TestPredictedRecordGarbage(t *testing.T) {
	doc := unhex(t, predictedBatchHex)
	for _, c := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"expiry cut", doc[:len(doc)-1], "records.expires_at_ms: truncated"},
		{"no expiry", doc[:len(doc)-8], "records.expires_at_ms: truncated"},
		{"a byte after the expiry", append(append([]byte(nil), doc...), 0), "payload: 1 trailing bytes"},
		{"op 6", func() []byte {
			p := append([]byte(nil), doc...)
			p[18] = 6
			return p
		}(), "records.op: 6 is not an op (0-5)"},
		{"locations on a predicted record", func() []byte {
			r := predictedRecord
			r.Locations = []string{"x"}
			return encodeBatch(41, []FeedRecord{r})
		}(), "records.locations: must be empty on a predicted record"},
		{"an expiry on a stored record", func() []byte {
			r := predictedRecord
			r.Op = OpStored
			return append(encodeBatch(41, []FeedRecord{r}), 5, 4, 3, 2, 1, 0, 0, 0)
		}(), "payload: 8 trailing bytes"},
	} {
		_, err := decodeWatchBatch(c.payload)
		if !errors.Is(err, ErrCorruption) || !contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want corruption naming %q", c.name, err, c.want)
		}
	}
}

// kPredict of docs/protocol.md: context t/m//4/, holder h rank 2, keys [1, 2]; the answer
// 300 is ac 02.
func TestPredictDocumentedBytes(t *testing.T) {
	const want = "0174016d000400 016802 02 0100000000000000 0200000000000000"
	got := encodePredict(Context{Tenant: "t", Model: "m", BlockSize: 4}, Holder{BackendID: "h", DPRank: 2}, []uint64{1, 2})
	if hexSpaced(got) != hexSpaced(unhex(t, want)) {
		t.Errorf("kPredict request:\n got %s\nwant %s", hexSpaced(got), strings.ReplaceAll(want, " ", ""))
	}
	if q, err := decodePredictAnswer([]byte{0xac, 0x02}); err != nil || q != 300 {
		t.Errorf("answer ac 02: %d, %v", q, err)
	}
	for _, c := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "queued: truncated"},
		{"cut varint", []byte{0xac}, "queued: truncated"},
		{"over 32 bits", []byte{0x80, 0x80, 0x80, 0x80, 0x10}, "queued: overflows 32 bits"},
		{"non-canonical", []byte{0x81, 0x00}, "queued: non-canonical varint"},
		{"trailing", []byte{0xac, 0x02, 0x00}, "payload: 1 trailing bytes"},
	} {
		if _, err := decodePredictAnswer(c.payload); !errors.Is(err, ErrCorruption) || !contains(err.Error(), c.want) {
			t.Errorf("answer %s: %v, want corruption naming %q", c.name, err, c.want)
		}
	}
}

// RecordPrediction refuses, unsent, what the server's decoder refuses, with its messages
// (the client is never dialled to a server here: a closed one would answer unavailable).
func TestRecordPredictionValidates(t *testing.T) {
	c := &Client{}
	ctx := Context{Model: "m", BlockSize: 4}
	h := Holder{BackendID: "h"}
	for _, tc := range []struct {
		name string
		ctx  Context
		h    Holder
		keys []uint64
		code Code
		want string
	}{
		{"no model", Context{BlockSize: 4}, h, []uint64{1}, CodeInvalidArgument, "model_name: must be a non-empty string"},
		{"block size 0", Context{Model: "m"}, h, []uint64{1}, CodeInvalidArgument, "block_size: must be a positive integer"},
		{"no holder", ctx, Holder{DPRank: 1}, []uint64{1}, CodeInvalidArgument, "backend_id: must be a non-empty string"},
		{"no keys", ctx, h, nil, CodeInvalidArgument, "keys: at least one block key is needed"},
		{"too many keys", ctx, h, make([]uint64, MaxPredictKeys+1), CodePayloadTooLarge,
			"keys: 65537 block keys; one prediction holds at most 65536"},
	} {
		_, err := c.RecordPrediction(context.Background(), tc.ctx, tc.h, tc.keys)
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Message != tc.want {
			t.Errorf("%s: %v, want %s %q", tc.name, err, tc.code, tc.want)
		}
	}
	// An empty tenant travels as "default", as the C++ client sends it.
	if got := hexSpaced(encodePredict(normalContext(ctx), h, []uint64{1})); !strings.HasPrefix(got, "0764656661756c74") {
		t.Errorf("tenant: %s", got)
	}
}
