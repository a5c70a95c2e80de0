// Byte primitives for kvatlas's binary encodings (storage records, command batches, the
// binary protocol): appenders for fixed-width integers, LEB128 varints and length-prefixed
// strings, and a bounds-checked reader for untrusted input.
// Pure functions and a value-type reader: safe to use from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvatlas {

void PutFixed16(std::string* out, uint16_t v);  // little-endian
void PutFixed32(std::string* out, uint32_t v);  // little-endian
void PutFixed64(std::string* out, uint64_t v);  // little-endian
void PutBigEndian32(std::string* out, uint32_t v);
void PutBigEndian64(std::string* out, uint64_t v);
void PutVarint64(std::string* out, uint64_t v);  // LEB128, 1-10 bytes
// A varint byte length followed by the bytes.
void PutLengthPrefixed(std::string* out, std::string_view bytes);
void PutFlag(std::string* out, bool v);  // one byte, 0 or 1

// A cursor over untrusted bytes. Failure is sticky: after the first short or malformed
// read every further read returns 0 / empty and ok() stays false, so a decoder reads all
// its fields and checks once (Done()). Never reads past the input, never allocates.
class ByteReader {
 public:
  explicit ByteReader(std::string_view data) : data_(data) {}
  // The reader keeps a view: a temporary string would dangle.
  explicit ByteReader(std::string&&) = delete;

  uint8_t U8();
  uint16_t Fixed16();
  uint32_t Fixed32();
  uint64_t Fixed64();
  uint32_t BigEndian32();
  uint64_t BigEndian64();
  // Rejects encodings longer than needed (so every value has exactly one encoding) and
  // values that do not fit the type.
  uint64_t Varint64();
  uint32_t Varint32();
  // A PutLengthPrefixed string; a view into the input.
  std::string_view LengthPrefixed();
  // A 0/1 presence or boolean byte; any other value fails.
  bool Flag();
  // An element count followed by elements of at least `min_element_bytes` each. Fails when
  // the remaining input cannot hold that many, which bounds what a caller reserves.
  // REQUIRES: min_element_bytes > 0.
  uint64_t Count(size_t min_element_bytes);

  void Fail() { ok_ = false; }
  bool ok() const { return ok_; }
  size_t remaining() const { return data_.size(); }
  // True when no read failed and every byte was consumed.
  bool Done() const { return ok_ && data_.empty(); }

 private:
  // The next n bytes, consumed; empty (and failed) when fewer remain.
  std::string_view Take(size_t n);

  std::string_view data_;
  bool ok_ = true;
};

}  // namespace kvatlas
