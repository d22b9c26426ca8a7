// Host memory made of memfd chunks mapped back to back in one reserved range: the host backend's
// counterpart of a VMM allocation (cuMemCreate chunks cuMemMap'ed into one cuMemAddressReserve
// range), exported by descriptor. CI runs the descriptor machinery and the in-order chunk mapping
// through it on every run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/fd_pass.h"

namespace peerlink::gpu {

// A reserved virtual range with chunk files mapped in order; unmapped (chunks and reservation) on
// destruction. Move-only.
class FdRegion {
 public:
  FdRegion() = default;
  ~FdRegion() { reset(); }
  FdRegion(FdRegion&& o) noexcept;
  FdRegion& operator=(FdRegion&& o) noexcept;
  FdRegion(const FdRegion&) = delete;
  FdRegion& operator=(const FdRegion&) = delete;

  // `bytes` of new memory in memfd chunks of `chunk_bytes` (0: one chunk), each a page multiple.
  static FdRegion create(size_t bytes, size_t chunk_bytes);
  // Maps `fds` (sizes in `sizes`) in order into one fresh reserved range. Takes the descriptors.
  static FdRegion map(std::vector<common::UniqueFd> fds, const std::vector<uint64_t>& sizes);

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }  // whole mapped span (sum of the chunk sizes)
  const std::vector<common::UniqueFd>& fds() const { return fds_; }
  const std::vector<uint64_t>& sizes() const { return sizes_; }
  void reset() noexcept;

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  std::vector<common::UniqueFd> fds_;
  std::vector<uint64_t> sizes_;
};

}  // namespace peerlink::gpu
