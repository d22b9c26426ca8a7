// libFuzzer target: the segment header parser (common::parse_segment_header) and the segment name
// rules (common::valid_segment_name) that every name read from shared memory must pass.
// Input: 8 bytes of claimed file size, then the header bytes as read from the file.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/shm_segment.h"
#include "peerlink/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlink::common;
  if (size >= 8) {
    uint64_t file_size;
    std::memcpy(&file_size, data, 8);
    try {
      SegmentHeader h = parse_segment_header(data + 8, size - 8, file_size, "fuzz");
      // Accepted: the header must describe exactly the file, within the limits.
      if (h.magic != kSegmentMagic || h.payload_bytes + kSegmentHeaderBytes != file_size ||
          h.payload_bytes > kMaxSegmentPayload)
        std::abort();
    } catch (const peerlink::Error&) {
    }
  }
  std::string name(reinterpret_cast<const char*>(data), size);
  if (valid_segment_name(name)) {
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos ||
        name.find('\0') != std::string::npos || name.size() > 200 || name.compare(0, 3, "pl_") != 0)
      std::abort();
  }
  return 0;
}
