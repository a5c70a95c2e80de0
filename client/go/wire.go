package kvatlas

import (
	"encoding/binary"
	"fmt"
	"math"
)

// encoder appends the protocol's primitives (docs/protocol.md §Encoding conventions).
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8) { e.b = append(e.b, v) }
func (e *encoder) u64(v uint64) {
	e.b = binary.LittleEndian.AppendUint64(e.b, v)
}
func (e *encoder) f64(v float64)   { e.u64(math.Float64bits(v)) }
func (e *encoder) varint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) str(s string)    { e.varint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(s []byte)  { e.varint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) flag(present bool) {
	if present {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// decoder reads a payload; the first failure sticks and names its field, and every later
// read returns zero values (so decoding code reads straight through and checks err once).
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(field, why string) {
	if d.err == nil {
		d.err = newError(CodeCorruption, fmt.Sprintf("answer %s: %s", field, why))
	}
}

func (d *decoder) take(n int, field string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.fail(field, "truncated")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) u8(field string) uint8 {
	p := d.take(1, field)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *decoder) u64(field string) uint64 {
	p := d.take(8, field)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

func (d *decoder) f64(field string) float64 { return math.Float64frombits(d.u64(field)) }

func (d *decoder) varint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field, "truncated or malformed varint")
		return 0
	}
	// Canonical form only: no trailing zero group.
	if n > 1 && d.b[d.off+n-1] == 0 {
		d.fail(field, "non-canonical varint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint32(field string) uint32 {
	v := d.varint(field)
	if v > math.MaxUint32 {
		d.fail(field, "overflows 32 bits")
		return 0
	}
	return uint32(v)
}

func (d *decoder) str(field string) string {
	n := d.varint(field)
	if d.err == nil && n > uint64(len(d.b)-d.off) {
		d.fail(field, "truncated")
		return ""
	}
	return string(d.take(int(n), field))
}

func (d *decoder) flag(field string) bool {
	switch d.u8(field) {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail(field, "presence byte is not 0 or 1")
		return false
	}
}

// count reads a list count and rejects one the remaining bytes cannot hold (each element
// at least minBytes), before anything is allocated.
func (d *decoder) count(field string, minBytes int) int {
	n := d.varint(field)
	if d.err == nil && n > uint64(len(d.b)-d.off)/uint64(minBytes) {
		d.fail(field, fmt.Sprintf("count %d exceeds the payload", n))
		return 0
	}
	return int(n)
}

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("payload", fmt.Sprintf("%d trailing bytes", len(d.b)-d.off))
	}
	return d.err
}
