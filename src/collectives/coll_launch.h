// The boundary between host code and the kernels of the non-allreduce collectives
// (coll_kernels.cu). Host-only builds link coll_launch_none.cpp instead (UnsupportedError).
#pragma once
#include <cstddef>

#include "collectives/coll_plan.h"
#include "collectives/device_launch.h"

namespace peerlink::coll {

struct CollLaunchArgs {
  // The allreduce fields the shared device protocol reads (device_sync.h): rank, world, blocks,
  // threads, layout, data, flags, error, timeout_ns, pdl; plus src/dst/dtype/op.
  LaunchArgs a;
  CollDesc d;
  size_t chunk = 0;      // elements per piece per step (push path)
  size_t steps = 0;      // push path: steps (all_to_all_v: 0, agreed on the device by a header step)
  size_t per_block = 0;  // push path: elements of a chunk per block (multiple of 16 bytes)
  bool ll = false;       // one step through LL lines
  size_t ll_words_per_block = 0;  // LL: 8-byte words of each piece per block
};

// Enqueues the collective on `stream`. Throws InvalidArgument / GpuError when the launch fails.
void launch_collective(const CollLaunchArgs& c, void* stream);

// Host backend: runs the collective synchronously (same plan, one "block").
struct CollState;
void host_collective(CollState& st, const CollDesc& d, int dtype, int op, const void* src, void* dst, bool ll);

}  // namespace peerlink::coll
