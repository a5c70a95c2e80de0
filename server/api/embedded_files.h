// Files built into the binary (cmake/EmbedFiles.cmake writes their definitions at build
// time): the dashboard's HTML, JS, CSS and icon, edited as real files under
// server/api/dashboard/ and served by dashboard_routes.cc without reading anything at run
// time.
#pragma once

#include <span>
#include <string_view>

namespace kvatlas::server {

struct EmbeddedFile {
  std::string_view name;    // relative to its directory: "app.js"
  std::string_view sha256;  // the first 16 hex digits of the SHA-256 of `bytes`
  std::string_view bytes;
};

// server/api/dashboard/*, in a fixed order; the same bytes for the life of the process.
[[nodiscard]] std::span<const EmbeddedFile> DashboardFiles();

}  // namespace kvatlas::server
