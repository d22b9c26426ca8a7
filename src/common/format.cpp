// fmt's implementation, compiled once for the library (see format.h).
#define FMT_HEADER_ONLY
#include <fmt/format.h>

#include "common/format.h"

namespace peerlink::common {

std::string vformat(fmt::string_view format_str, fmt::format_args args) {
  return fmt::vformat(format_str, args);
}

}  // namespace peerlink::common
