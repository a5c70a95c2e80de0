// Reading the server's JSON documents for the CLI's human output: fields as text, "-" for
// what an older server does not send, and contexts named as an operator names them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvatlas::cli {

// The field `name` of `object`: a string as it is, another value as JSON text; `absent`
// when `object` is no object or the field is missing or null.
[[nodiscard]] std::string FieldText(const nlohmann::json& object, std::string_view name,
                                    std::string_view absent = "-");

// "model llama, block size 16" and, when set, ", tenant T" (other than "default"),
// ", LoRA L", ", salt S": a context given by its JSON fields (tenant_id, model_name,
// lora_name, block_size, additional_salt).
[[nodiscard]] std::string DescribeContext(const nlohmann::json& context);

}  // namespace kvatlas::cli
