// The JSON form of registrations: the Mooncake Conductor body of POST /register (and the
// entries of the config file's "publishers" list), and what GET /v1/registrations shows.
// Pure functions; safe from any thread.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "kvatlas/common/result.h"
#include "server/model/registration.h"

namespace kvatlas::server {

// {endpoint, replay_endpoint?, type: "vLLM"|"SGLang"|"Mooncake", modelname, lora_name?,
//  tenant_id?, instance_id, block_size, dp_rank?, additionalsalt?, topic?}. Nulls count as
// absent. kInvalidArgument naming the field ("<path>.block_size: must be a positive
// integer") for a missing or mistyped field, an unknown type, an invalid endpoint, or a
// string past its limits.h limit (names 256 bytes, salt and topic 1 KiB, endpoints 1 KiB).
[[nodiscard]] Result<Registration> RegistrationFromJson(const nlohmann::json& json,
                                                        std::string_view path = "body");
[[nodiscard]] nlohmann::json RegistrationToJson(const Registration& registration);

// The identity POST /unregister names: {instance_id, tenant_id?, dp_rank?} (the other
// Conductor fields, type/modelname/block_size/lora_name, are accepted and ignored).
struct UnregisterRequest {
  std::string instance_id;
  std::string tenant_id = "default";
  uint32_t dp_rank = 0;
};
[[nodiscard]] Result<UnregisterRequest> UnregisterRequestFromJson(const nlohmann::json& json);

}  // namespace kvatlas::server
