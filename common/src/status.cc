#include "kvatlas/common/status.h"

namespace kvatlas {

int HttpStatusOf(StatusCode code) {
  switch (code) {
#define KVATLAS_STATUS_CODE(name, number, http, wire) \
  case StatusCode::name:                              \
    return http;
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
  }
  return 500;
}

std::string_view WireNameOf(StatusCode code) {
  switch (code) {
#define KVATLAS_STATUS_CODE(name, number, http, wire) \
  case StatusCode::name:                              \
    return wire;
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
  }
  return "internal";
}

StatusCode StatusCodeFromWireName(std::string_view name) {
#define KVATLAS_STATUS_CODE(id, number, http, wire) \
  if (name == wire) return StatusCode::id;
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
  return StatusCode::kInternal;
}

StatusCode StatusCodeFromNumber(uint32_t n) {
#define KVATLAS_STATUS_CODE(id, number, http, wire) \
  if (n == number) return StatusCode::id;
#include "kvatlas/common/status_codes.def"
#undef KVATLAS_STATUS_CODE
  return StatusCode::kInternal;
}

std::string Status::ToString() const {
  std::string out(WireNameOf(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

}  // namespace kvatlas
