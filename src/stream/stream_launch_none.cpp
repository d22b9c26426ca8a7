// Host-only builds have no kernels; a host-backend communicator never reaches this.
#if defined(PEERLINK_HOST_ONLY)
#include "peerlink/errors.h"
#include "stream/stream_launch.h"

namespace peerlink::stream {
void launch_stream_batch(const StreamLaunch&, void*) {
  throw UnsupportedError("stream-ordered send/recv on a GPU: peerlink was built without CUDA or HIP");
}
}  // namespace peerlink::stream
#endif
