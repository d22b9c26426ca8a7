// Host-only builds have no kernels: the GPU entry point reports UnsupportedError. (A communicator
// on the host backend never reaches it; this keeps the library linkable without nvcc/hipcc.)
#if defined(PEERLINK_HOST_ONLY)
#include "collectives/device_launch.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
void launch_allreduce(const LaunchArgs&, void*) {
  throw UnsupportedError("allreduce on a GPU: peerlink was built without CUDA or HIP");
}
}  // namespace peerlink::coll
#endif
