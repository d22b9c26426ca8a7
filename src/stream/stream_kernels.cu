// Kernel of the stream-ordered engine (protocol: stream_p2p.h; launch layout: stream_launch.h): one
// batch kernel whose blocks run the device bodies of stream_pub_device.h (published form),
// stream_raw_device.h (NCCL form) and stream_ce_device.h (the copy-engine send's two steps).
// Several blocks per channel (stream_launch.h); in each, thread 0 does the flag work and the whole
// block copies.
// Memory ordering: a flag is published with a system-scope release store by thread 0 after a
// __syncthreads that follows the block's data stores (cumulative through the barrier, as the
// allreduce kernels do); a flag is observed by a relaxed volatile spin followed by
// fence.acq_rel.sys, and data a peer rewrites (staging slots) is read with L1-bypassing loads.
// Every spin is bounded by the global timer against Options::timeout; on expiry the error word
// (host-mapped) records it and the pair's abort word stops every later kernel on that pair at once.
#include <algorithm>

#include "gpu/device.h"
#include "peerlink/errors.h"
#include "stream/stream_ce_device.h"
#include "stream/stream_device.h"
#include "stream/stream_launch.h"
#include "stream/stream_pub_device.h"
#include "stream/stream_raw_device.h"

namespace peerlink::stream {
namespace {

// The parameter block is read in place (no per-thread copy when its address is taken).
#if !defined(PEERLINK_HIP) && defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
#define PL_GRID_CONSTANT __grid_constant__
#else
#define PL_GRID_CONSTANT
#endif

// One block per multiprocessor is guaranteed to fit (the host caps the grid at the SM count), so all
// blocks of a launch are resident together and the channels of a group cannot starve each other.
template <int Ops, int Channels>
__global__ void __launch_bounds__(kThreads, 1) stream_batch_kernel(const PL_GRID_CONSTANT StreamLaunchOf<Ops, Channels> L) {
  // PDL (when launched with it): this kernel may have been scheduled while the previous kernel of
  // the stream still runs. Everything below reads what that kernel may write (the user's source
  // buffer, our channel counters when it is one of ours), so wait first; then let the next kernel of
  // the stream be scheduled: it overlaps its launch with our run and waits in its own
  // griddepcontrol.wait for our completion (a kernel launched with PDL that skips that wait may read
  // a recv buffer before the bytes landed: the same contract as the allreduce's PDL).
  pdl_wait();
  pdl_launch_dependents();
  if (L.nbinds && blockIdx.x == 0 && threadIdx.x == 0) write_zc_binds(L);
  int ci = 0;  // the channel whose block range holds this block (ranges are not in channel order)
  for (int c = 0; c < L.nch; ++c)
    if (int(blockIdx.x) >= L.ch[c].first_block && int(blockIdx.x) < L.ch[c].first_block + L.ch[c].nblocks) ci = c;
  const DevChannel& ch = L.ch[ci];
  if (ch.kind == kChLocalCopy) {  // no peer, no flags: each block copies its share of every op
    for (int i = 0; i < ch.nops; ++i) {
      const DevOp& op = L.ops[ch.first_op + i];
      part_copy(op.dst, op.src, op.len, false, int(blockIdx.x) - ch.first_block, ch.nblocks);
    }
    return;
  }
  Ctx x{&L, L.ops, L.ch, &ch, &ch.mine->error.v, int(blockIdx.x) - ch.first_block, ch.nblocks};
  const uint64_t aborted = load_volatile(x.abort);
  if (ch.kind == 0) return send_pub(x, aborted);  // tests it after its first loads
  if (stop_if_aborted(x, aborted)) return;
  switch (ch.kind) {
    case 1: recv_pub(x); break;
    case 2: send_raw(x); break;
    case 3: recv_raw(x); break;
    case kChCeWait: ce_wait(x); break;
    case kChCeDone: ce_done(x); break;
  }
}

}  // namespace

void launch_stream_batch(const StreamLaunch& l, void* stream) {
  const auto st = static_cast<gpu::rt::Stream>(stream);
  int nops = 0;
  for (int c = 0; c < l.nch; ++c) nops = std::max(nops, l.ch[c].first_op + l.ch[c].nops);
  if (l.nch <= kSmallLaunchChannels && nops <= kSmallLaunchOps) {
    StreamLaunchOf<kSmallLaunchOps, kSmallLaunchChannels> s{};
    static_cast<StreamLaunchHeader&>(s) = l;
    std::copy(l.ops, l.ops + nops, s.ops);
    std::copy(l.ch, l.ch + l.nch, s.ch);
    gpu::dev::launch(stream_batch_kernel<kSmallLaunchOps, kSmallLaunchChannels>, unsigned(l.nblocks),
                     unsigned(l.threads), st, l.pdl != 0, s);
  } else {
    gpu::dev::launch(stream_batch_kernel<kMaxLaunchOps, kMaxLaunchChannels>, unsigned(l.nblocks), unsigned(l.threads),
                     st, l.pdl != 0, static_cast<const FullLaunch&>(l));
  }
  gpu::dev::check_launch("stream send/recv kernel launch");  // GpuError: error string, code and device
}

}  // namespace peerlink::stream
