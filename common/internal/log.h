// A minimal leveled logger: one line per message on stderr, with a UTC timestamp and the
// level. Thread-safe: a line is written with one call under a mutex, so lines never mix.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvatlas {

enum class LogLevel : uint8_t { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// "debug", "info", "warning" (or "warn"), "error"; nullopt otherwise.
[[nodiscard]] std::optional<LogLevel> ParseLogLevel(std::string_view name);
[[nodiscard]] std::string_view LogLevelName(LogLevel level);

// Messages below `level` are dropped. The default is kInfo.
void SetLogLevel(LogLevel level);
[[nodiscard]] bool LogEnabled(LogLevel level);

// Writes "2025-01-31T12:00:00.123Z INFO message\n" to stderr when `level` is enabled.
void Log(LogLevel level, std::string_view message);

inline void LogDebug(std::string_view message) { Log(LogLevel::kDebug, message); }
inline void LogInfo(std::string_view message) { Log(LogLevel::kInfo, message); }
inline void LogWarning(std::string_view message) { Log(LogLevel::kWarning, message); }
inline void LogError(std::string_view message) { Log(LogLevel::kError, message); }

}  // namespace kvatlas
