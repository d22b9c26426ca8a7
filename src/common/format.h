// Formatting of every message and log line: common::format("rank {} of {}", r, n), fmt's syntax.
// Only <fmt/core.h> is included here, which compiles in a fraction of the time of <fmt/format.h>;
// fmt's implementation is compiled once, in format.cpp (header-only mode), into each library that
// formats, and stays local to it (mk/libpeerlink.map exports peerlink's names only), so neither
// libpeerlink.so nor libnccl.so.2 needs libfmt at run time. Measured with g++ 12 -O2: a file
// including <fmt/format.h> in header-only mode 2.3 s, one including <fmt/core.h> 0.2 s.
#pragma once
#include <fmt/core.h>

#include <string>

namespace peerlink::common {

std::string vformat(fmt::string_view format_str, fmt::format_args args);

template <typename... T>
std::string format(fmt::format_string<T...> format_str, T&&... args) {
  return common::vformat(format_str, fmt::make_format_args(args...));
}

}  // namespace peerlink::common
