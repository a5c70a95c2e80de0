// The configured name limits (ServiceOptions::names: max_name_bytes, max_salt_bytes,
// max_location_bytes) applied by the service layer to what it accepts over either protocol:
// ingested events, registrations, lookups. The decoders' fixed maxima (limits.h) still
// apply first; a server configured lower refuses longer names with kInvalidArgument naming
// the field and the configured limit.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "server/service/ingest_service.h"
#include "server/service/lookup_service.h"
#include "server/service/registration_service.h"
#include "tests/support/in_memory_services.h"
#include "tests/support/state_machine_helpers.h"

namespace kvatlas::server {
namespace {

using testing::InMemoryServices;

BlockEvent Stored(std::string model) {
  BlockEvent event;
  event.context = ContextKey{"default", std::move(model), "", 2, ""};
  event.holder = HolderKey{"a", 0};
  event.token_ids = std::vector<uint32_t>{1, 2};
  return event;
}

void CheckRefused(const Status& status, const std::string& expected) {
  CAPTURE(status.ToString());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message().find(expected) != std::string::npos);
}

// As a server configured with max_name_bytes 8, max_salt_bytes 16, max_location_bytes 32.
void LowerLimits(Services* services) {
  services->options.names.name_bytes = 8;
  services->options.names.salt_bytes = 16;
  services->options.names.location_bytes = 32;
}

TEST_SUITE("NameLimits") {
  TEST_CASE("the defaults are the decoders' maxima") {
    const NameLimits limits = ServiceOptions{}.names;
    CHECK(limits.config_keys);
    CHECK(limits.name_bytes == kMaxNameBytes);
    CHECK(limits.salt_bytes == kMaxSaltBytes);
    CHECK(limits.location_bytes == kMaxLocationBytes);
  }

  TEST_CASE("ingest: names past the configured limits are refused, naming field and limit") {
    InMemoryServices s;
    LowerLimits(&s.services);
    std::vector<BlockEvent> events = {Stored("12345678")};
    CHECK(PrepareIngest(s.services, events, std::nullopt).has_value());  // at the limit

    events.push_back(Stored("123456789"));
    Result<PreparedIngest> prepared = PrepareIngest(s.services, events, std::nullopt);
    REQUIRE_FALSE(prepared.has_value());
    CheckRefused(
        prepared.error(),
        "events[1].model_name: 9 bytes, longer than the limit of 8 bytes (max_name_bytes)");

    events = {Stored("m")};
    events[0].context.salt = std::string(17, 's');
    prepared = PrepareIngest(s.services, events, std::nullopt);
    REQUIRE_FALSE(prepared.has_value());
    CheckRefused(prepared.error(),
                 "events[0].additional_salt: 17 bytes, longer than the limit of 16 bytes");
    CheckRefused(prepared.error(), "max_salt_bytes");

    events = {Stored("m")};
    events[0].holder.id = std::string(9, 'h');
    prepared = PrepareIngest(s.services, events, std::nullopt);
    REQUIRE_FALSE(prepared.has_value());
    CheckRefused(prepared.error(), "events[0].backend_id: 9 bytes");

    events = {Stored("m")};
    events[0].locations = {"ok", std::string(33, 'l')};
    prepared = PrepareIngest(s.services, events, std::nullopt);
    REQUIRE_FALSE(prepared.has_value());
    CheckRefused(prepared.error(),
                 "events[0].location: 33 bytes, longer than the limit of 32 bytes "
                 "(max_location_bytes)");
    // Nothing was applied.
    CHECK(s.machine.applied_revision() == 0);
  }

  TEST_CASE("registration and lookup: names past the configured limits are refused") {
    InMemoryServices s;
    LowerLimits(&s.services);
    Registration r = testing::PublisherRegistration("e1");
    r.model = "123456789";
    Result<Revision> registered = RegisterPublisher(s.services, r);
    REQUIRE_FALSE(registered.has_value());
    CheckRefused(registered.error(), "modelname: 9 bytes, longer than the limit of 8 bytes");
    r = testing::PublisherRegistration("instance-long");
    registered = RegisterPublisher(s.services, r);
    REQUIRE_FALSE(registered.has_value());
    CheckRefused(registered.error(), "instance_id: 13 bytes");
    r = testing::PublisherRegistration("e1");
    r.additional_salt = std::string(17, 's');
    registered = RegisterPublisher(s.services, r);
    REQUIRE_FALSE(registered.has_value());
    CheckRefused(registered.error(), "additionalsalt: 17 bytes");
    for (const bool tenant : {false, true}) {
      r = testing::PublisherRegistration(tenant ? "e1"
                                                : "e\x1f"
                                                  "1");
      if (tenant) r.tenant_id = "t\x1f";
      registered = RegisterPublisher(s.services, r);
      REQUIRE_FALSE(registered.has_value());
      CheckRefused(registered.error(), tenant ? "tenant_id: must not contain the byte 0x1f"
                                              : "instance_id: must not contain the byte 0x1f");
    }
    CHECK(RegisterPublisher(s.services, testing::PublisherRegistration("e1")).has_value());

    LookupRequest lookup;
    lookup.context = ContextKey{"default", "123456789", "", 2, ""};
    lookup.token_ids = {1, 2};
    Result<LookupAnswer> answer = LookupPrefix(s.services, lookup);
    REQUIRE_FALSE(answer.has_value());
    CheckRefused(answer.error(), "model: 9 bytes, longer than the limit of 8 bytes");
    lookup.context.model = "m";
    lookup.context.tenant = std::string(9, 't');
    answer = LookupPrefix(s.services, lookup);
    REQUIRE_FALSE(answer.has_value());
    CheckRefused(answer.error(), "tenant_id: 9 bytes");
    lookup.context.tenant = "default";
    CHECK(LookupPrefix(s.services, lookup).has_value());
  }
}

}  // namespace
}  // namespace kvatlas::server
