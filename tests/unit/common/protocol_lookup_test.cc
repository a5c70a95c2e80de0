// kLookup's read-consistency trailer (docs/protocol.md §kLookup): optional, present only
// when a read asks for more than the server's applied state, and strict when present.
#include <doctest/doctest.h>

#include <string>

#include "kvatlas/common/protocol.h"

namespace kvatlas::protocol {
namespace {

TEST_SUITE("protocol") {
  TEST_CASE("Protocol: the lookup's read consistency is an optional trailer") {
    LookupRequest r;
    r.context = ContextKey{"default", "m", "", 2, ""};
    r.by_hash = true;
    r.seq_hashes = {7};
    const std::string plain = EncodeLookupRequestBinary(r);
    const LookupRequest decoded = DecodeLookupRequestBinary(plain).value();
    CHECK_FALSE(decoded.linearizable);
    CHECK_FALSE(decoded.min_revision.has_value());
    r.linearizable = true;
    CHECK(EncodeLookupRequestBinary(r) == plain + "\x01");
    CHECK(DecodeLookupRequestBinary(plain + "\x01").value().linearizable);
    r.linearizable = false;
    r.min_revision = 5;
    CHECK(EncodeLookupRequestBinary(r) == plain + "\x02\x05");
    CHECK(DecodeLookupRequestBinary(plain + "\x02\x05").value().min_revision == 5u);
    // A present trailer asks for something; unknown bits are refused, never ignored.
    for (const std::string& bad :
         {std::string(1, '\0'), std::string("\x04"), std::string("\x81")}) {
      const Result<LookupRequest> refused = DecodeLookupRequestBinary(plain + bad);
      REQUIRE_FALSE(refused.has_value());
      CHECK(refused.error().message().find("consistency") != std::string::npos);
    }
    CHECK_FALSE(DecodeLookupRequestBinary(plain + "\x02").has_value());  // min_revision missing
    CHECK_FALSE(DecodeLookupRequestBinary(plain + std::string("\x01\x00", 2))
                    .has_value());  // trailing byte
  }
}

}  // namespace
}  // namespace kvatlas::protocol
