// Host-only builds have no kernels: the GPU entry point of the fused epilogue reports
// UnsupportedError. (A host communicator never reaches it; this keeps the library linkable without
// nvcc/hipcc.)
#if defined(PEERLINK_HOST_ONLY)
#include "collectives/fused_plan.h"
#include "peerlink/errors.h"

namespace peerlink::coll {
void launch_fused(const FusedArgs&, void*) {
  throw UnsupportedError("allreduce_add_rmsnorm / add_rmsnorm on a GPU: peerlink was built without CUDA or HIP");
}
}  // namespace peerlink::coll
#endif
