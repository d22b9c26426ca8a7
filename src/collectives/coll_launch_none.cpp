// Host-only builds have no kernels: the GPU entry point of the collectives reports UnsupportedError.
#if defined(PEERLINK_HOST_ONLY)
#include "collectives/coll_launch.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
void launch_collective(const CollLaunchArgs&, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void launch_ce_reduce(const CeReduceArgs&, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void launch_ce_step(const LaunchArgs&, bool, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void launch_zc_step(const LaunchArgs&, uint64_t, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void launch_zc_pull(const CeReduceArgs&, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void launch_zc_copy(const ZcCopyArgs&, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
void preload_multi_kernel_paths() {}
void launch_zc_relay(const LaunchArgs&, const ZcRelayArgs&, void*) {
  throw UnsupportedError("collectives on a GPU: peerlink was built without CUDA or HIP");
}
}  // namespace peerlink::coll
#endif
