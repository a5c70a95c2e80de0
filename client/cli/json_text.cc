#include "client/cli/json_text.h"

namespace kvatlas::cli {

std::string FieldText(const nlohmann::json& object, std::string_view name,
                      std::string_view absent) {
  if (!object.is_object()) return std::string(absent);
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return std::string(absent);
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string DescribeContext(const nlohmann::json& c) {
  std::string text =
      "model " + FieldText(c, "model_name") + ", block size " + FieldText(c, "block_size");
  if (const std::string tenant = FieldText(c, "tenant_id", "");
      !tenant.empty() && tenant != "default") {
    text += ", tenant " + tenant;
  }
  if (const std::string lora = FieldText(c, "lora_name", ""); !lora.empty()) {
    text += ", LoRA " + lora;
  }
  if (const std::string salt = FieldText(c, "additional_salt", ""); !salt.empty()) {
    text += ", salt " + salt;
  }
  return text;
}

}  // namespace kvatlas::cli
