// Minimal leveled logging to stderr. The level lives in each communicator's Options; this helper
// only formats, so nothing here is a process-wide static configuration.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

#include "peerlink/log_level.h"

namespace peerlink::common {

inline void log_line(LogLevel at, LogLevel enabled, const std::string& msg) {
  if (at == LogLevel::None || static_cast<int>(at) > static_cast<int>(enabled)) return;
  const char* tag = at == LogLevel::Warn ? "WARN" : at == LogLevel::Info ? "INFO" : "TRACE";
  std::fprintf(stderr, "peerlink[%d] %s %s\n", static_cast<int>(getpid()), tag, msg.c_str());
}

}  // namespace peerlink::common
