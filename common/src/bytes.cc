#include "common/internal/bytes.h"

namespace kvatlas {
namespace {

template <typename T>
void PutLittleEndian(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
void PutBigEndian(std::string* out, T v) {
  for (size_t i = sizeof(T); i-- > 0;) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// `bytes` is empty after a failed Take(); the result is then 0.
template <typename T>
T GetLittleEndian(std::string_view bytes) {
  T v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    v = static_cast<T>(v | (T{static_cast<uint8_t>(bytes[i])} << (8 * i)));
  }
  return v;
}

template <typename T>
T GetBigEndian(std::string_view bytes) {
  T v = 0;
  for (char c : bytes) v = static_cast<T>((v << 8) | static_cast<uint8_t>(c));
  return v;
}

}  // namespace

void PutFixed16(std::string* out, uint16_t v) { PutLittleEndian(out, v); }
void PutFixed32(std::string* out, uint32_t v) { PutLittleEndian(out, v); }
void PutFixed64(std::string* out, uint64_t v) { PutLittleEndian(out, v); }
void PutBigEndian32(std::string* out, uint32_t v) { PutBigEndian(out, v); }
void PutBigEndian64(std::string* out, uint64_t v) { PutBigEndian(out, v); }

void PutVarint64(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutLengthPrefixed(std::string* out, std::string_view bytes) {
  PutVarint64(out, bytes.size());
  out->append(bytes);
}

void PutFlag(std::string* out, bool v) { out->push_back(v ? 1 : 0); }

std::string_view ByteReader::Take(size_t n) {
  if (!ok_ || data_.size() < n) {
    ok_ = false;
    return {};
  }
  std::string_view head = data_.substr(0, n);
  data_.remove_prefix(n);
  return head;
}

uint8_t ByteReader::U8() {
  std::string_view b = Take(1);
  return b.empty() ? 0 : static_cast<uint8_t>(b[0]);
}

uint16_t ByteReader::Fixed16() { return GetLittleEndian<uint16_t>(Take(2)); }
uint32_t ByteReader::Fixed32() { return GetLittleEndian<uint32_t>(Take(4)); }
uint64_t ByteReader::Fixed64() { return GetLittleEndian<uint64_t>(Take(8)); }
uint32_t ByteReader::BigEndian32() { return GetBigEndian<uint32_t>(Take(4)); }
uint64_t ByteReader::BigEndian64() { return GetBigEndian<uint64_t>(Take(8)); }

uint64_t ByteReader::Varint64() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (!ok_ || data_.empty()) break;
    auto b = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    // The 10th byte may only carry the top bit of a u64; a zero final byte after others
    // would be a second encoding of a shorter value.
    if ((shift == 63 && b > 1) || (b == 0 && shift > 0)) break;
    v |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) return v;
  }
  ok_ = false;
  return 0;
}

uint32_t ByteReader::Varint32() {
  uint64_t v = Varint64();
  if (v > UINT32_MAX) {
    ok_ = false;
    return 0;
  }
  return static_cast<uint32_t>(v);
}

std::string_view ByteReader::LengthPrefixed() {
  uint64_t n = Varint64();
  if (n > data_.size()) {
    ok_ = false;
    return {};
  }
  return Take(static_cast<size_t>(n));
}

bool ByteReader::Flag() {
  uint8_t b = U8();
  if (b > 1) ok_ = false;
  return b == 1;
}

uint64_t ByteReader::Count(size_t min_element_bytes) {
  uint64_t n = Varint64();
  if (n > data_.size() / min_element_bytes) {
    ok_ = false;
    return 0;
  }
  return n;
}

}  // namespace kvatlas
