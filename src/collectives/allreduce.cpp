// allreduce(): argument checks, algorithm selection, and dispatch to the host implementation or
// the device kernels (stream-ordered, no host synchronization, graph-capturable).
#include <algorithm>
#include <chrono>

#include "collectives/coll_launch.h"
#include "collectives/coll_state.h"
#include "collectives/device_launch.h"
#include "collectives/graph_windows.h"
#include "collectives/one_rank.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/owners.h"
#include "peerlink/collectives.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink {
namespace {

// Auto selection. GPU crossovers measured on 2x H200 (NVLink), bf16, CUDA graph, time per call
// (scripts/gpu_collectives.sh, 2026-11-22):
//   one-shot LL  8 B: 2.4 us, 64 KB: 3.1 us, 256 KB: 4.3 us, 512 KB: 5.8 us, 1 MB: 9.6 us
//   one-shot (flags, full grid) 512 KB: 7.3 us, 1 MB: 9.0 us, 2 MB: 13.1 us, 4 MB: 20.3 us, 8 MB: 34.4 us
//   two-shot 1 MB: 12.2 us, 4 MB: 21.6 us, 8 MB: 35.6 us     bandwidth 16 MB: 61.0 us, 256 MB: 337 GB/s
// so with 2 ranks one-shot wins up to 8 MB (LL up to 512 KB, see PEERLINK_ALLREDUCE_LL_MAX) and the
// bandwidth kernel above; two-shot never wins there. One-shot pushes (n-1)x the bytes, so for more
// ranks its window shrinks and two-shot takes the middle. 4x H200 (NVSwitch), nccl-tests
// all_reduce_perf -g 4 -G 100 bf16, out of place, one-shot / two-shot / bandwidth, us:
// 256 KB 6.10 / 16.36 / 16.50, 1 MB 14.64 / 18.77 / 20.16, 4 MB 48.90 / 36.51 / 39.20,
// 16 MB 179.3 / 115.1 / 115.5, 64 MB 664.0 / 433.9 / 389.6 (NCCL's best 11.33, 17.98, 40.67, 98.49,
// 319.4): one-shot to 1 MB for 3-4 ranks when every pair is NVLink. By auto with that rule: 4 ranks
// 512 KB 8.86, 1 MB 14.65, 2 MB 23.96 (two-shot; NCCL 14.21, 17.97, 23.66); 3 ranks 1 MB 10.39.
// One-shot at 2 MB, 3-4 ranks over PCIe (256 KB, the old estimate: one-shot moves 1.5-2x the
// bytes two-shot does), and every bound for 5+ ranks are not measured (PEERLINK_ALLREDUCE_ALGO
// overrides).
// On the host backend the algorithms only differ in work split; the rule keeps both exercised in CI.
AllreduceAlgo choose(size_t bytes, int world, bool host, bool nvlink) {
  if (host) return bytes <= (size_t(64) << 10) ? AllreduceAlgo::OneShot : AllreduceAlgo::TwoShot;
  if (world <= 2) return bytes <= (size_t(8) << 20) ? AllreduceAlgo::OneShot : AllreduceAlgo::Bandwidth;
  size_t one_shot_max = world > 4 ? (size_t(64) << 10) : nvlink ? (size_t(1) << 20) : (size_t(256) << 10);
  if (bytes <= one_shot_max) return AllreduceAlgo::OneShot;
  if (bytes <= (size_t(4) << 20)) return AllreduceAlgo::TwoShot;
  return AllreduceAlgo::Bandwidth;
}

// `forced`: Options::allreduce_algo (Auto unless set).
AllreduceAlgo resolve(AllreduceAlgo forced, int world, size_t bytes, bool host, bool nvlink) {
  AllreduceAlgo a = forced;
  if (a == AllreduceAlgo::ZeroCopy && world < 2) a = AllreduceAlgo::Auto;  // nothing to share
  return a == AllreduceAlgo::Auto ? choose(bytes, world, host, nvlink) : a;
}

// Auto takes the zero-copy allreduce (zc_allreduce.cpp) when sendbuf and recvbuf lie in windows
// every rank mapped and this says so. nccl-tests all_reduce_perf -G 100 bf16, us, zero-copy (forced,
// or auto as chosen) against the bandwidth kernel and NCCL's best:
//   2x H200:  4 MB 51.3 / 23.3, 16 MB 110.9 / 60.5, 64 MB 228.2 / 206.4, 256 MB 828.8 / 780.8 (NCCL
//             46.5, 72.2, 232.1, 861.9): never (its reads and stores share both directions of the one
//             link; the bandwidth kernel only stores, and one-shot takes up to 8 MB anyway);
//   4x H200, 64 blocks: 4 MB 36.5 (by auto: two-shot) / 39.1, 16 MB 105.1 / 115.4, 32 MB 190.5 /
//             217.0, 64 MB 354.5 / 389.0, 128 MB 704.0 / 703.5, 256 MB 1313.6 / 1314.4 (NCCL 41.7,
//             98.2, 169.5, 318.6, 601.2, 1172.4): from 16 MB to below 128 MB with 4 ranks when every
//             pair is NVLink;
//   3 of those GPUs: 16 MB 177.2 / 91.1, 32 MB 196.4 / 172.2, 64 MB 357.1 / 318.2: never. 5+ ranks:
//             not measured, never.
// The host backend takes it from 64 KB so that CI runs the choice.
bool zero_copy_auto(size_t bytes, int world, bool host, bool nvlink) {
  if (host) return bytes >= (size_t(64) << 10);
  return world == 4 && nvlink && bytes >= (size_t(16) << 20) && bytes < (size_t(128) << 20);
}

// The windows of a zero-copy allreduce, when it runs: forced (`forced`, Options::allreduce_algo;
// throws InvalidArgument where a buffer lies in no window every rank mapped) or by auto from
// zero_copy_auto(). Buffers in no registered window get graph windows as the other collectives' do
// (Options::coll_graph_register, collectives.cpp); every input of the choice is the same on every
// rank (sizes, options, being captured, the window contract). Caller holds the call lock.
bool zero_copy_windows(coll::CollState& st, AllreduceAlgo forced, const void* src, void* dst, size_t bytes,
                       void* stream, const coll::Window** ws, const coll::Window** wr) {
  const Options& o = st.svc().options();
  if (st.world() < 2) return false;
  if (forced != AllreduceAlgo::ZeroCopy &&
      (forced != AllreduceAlgo::Auto || !zero_copy_auto(bytes, st.world(), st.host(), st.nvlink_all())))
    return false;
  if (!st.graph_windows().wins.empty()) coll::release_unheld_graph_windows(st);
  *ws = st.windows().find(src, bytes);
  *wr = st.windows().find(dst, bytes);
  const bool capturing = !st.host() && gpu::stream_is_capturing(stream);
  if (o.coll_graph_register != 0 && (capturing || o.coll_graph_register == 2)) {
    void* graph = capturing ? stream : nullptr;
    if (!*ws) *ws = coll::graph_window(st, src, bytes, graph);
    if (*ws && !*wr) *wr = coll::graph_window(st, dst, bytes, graph);
  }
  const bool ok = *ws && *wr && (*ws)->zero_copy && (*wr)->zero_copy;
  if (!ok && forced == AllreduceAlgo::ZeroCopy)
    throw InvalidArgument(
        common::format("allreduce: zero_copy forced (Options) but {}{} ({} bytes) is not inside a window every rank "
                       "registered and exported (peerlink::register_window)",
                       *ws && (*ws)->zero_copy ? "recvbuf " : "sendbuf ", *ws && (*ws)->zero_copy ? dst : src, bytes));
  return ok;
}

// One-shot messages above this many bytes take LL128 lines rather than LL lines when both can
// (2x H100, graph, bf16: LL / LL128 3.44 / 3.63 us at 128 KB, 4.29 / 3.98 at 256 KB,
// 6.14 / 4.76 at 512 KB; the flag kernel 9.68 and LL128 6.85 at 1 MB, 20.82 / 19.74 at 4 MB).
constexpr size_t kLl128Above = size_t(128) << 10;

int clamp_blocks(size_t want, int hi) { return static_cast<int>(std::max<size_t>(1, std::min<size_t>(want, hi))); }

// Threads per block: 1024 for the bandwidth algorithm (more stores in flight per SM: 323 -> 337
// GB/s busbw at 256 MB on 2x H200), 512 elsewhere; the LL kernel takes layout.h's ll_threads.
// Options::allreduce_threads overrides both.
int pick_threads(const coll::CollState& st, AllreduceAlgo a) {
  if (st.threads() > 0) return st.threads();
  return a == AllreduceAlgo::Bandwidth ? 1024 : 512;
}

// Grid for the flag-based kernels: one-shot gives every thread one 16-byte unit of the step (its
// latency is one pass), two-shot two units of the shard (measured: more blocks only add flags),
// bandwidth the whole GPU.
int pick_blocks(const coll::CollState& st, AllreduceAlgo a, const coll::Split& s, size_t elem, int threads) {
  if (st.blocks_override() > 0) return st.blocks_override();
  const int all = coll::whole_gpu_blocks(st);
  size_t bytes = s.shard * elem;
  switch (a) {
    case AllreduceAlgo::OneShot: return clamp_blocks((bytes + threads * 16 - 1) / (threads * 16), all);
    case AllreduceAlgo::TwoShot: return clamp_blocks((bytes + threads * 32 - 1) / (threads * 32), std::min(all, 64));
    default: return all;
  }
}

// Throws the error a kernel recorded (caller holds the call lock). The communicator's collectives stay
// unusable afterwards: flags and counters of the ranks no longer agree.
void check_device_error(coll::CollState& st) {
  st.rethrow_if_broken();
  if (st.host() || !st.error_word()) return;
  uint32_t code = *reinterpret_cast<volatile uint32_t*>(st.error_word());
  if (code == 0) return;
  int peer = static_cast<int>((code >> 8) & 0xff);
  if ((code & 0xff) == coll::kErrWindowMismatch) {
    st.set_broken(std::make_exception_ptr(InvalidArgument(
        common::format("zero-copy collective on device {} (rank {}): rank {} passed a recvbuf at another offset of the "
                       "window, another window or another shape (every rank must pass the same window offset); that "
                       "call's output is undefined and this communicator's collectives are unusable",
                       st.svc().device(), st.rank(), peer))));
    st.rethrow_if_broken();
  }
  // The error word is the communicator's, shared by every collective, and read by the next call of
  // any of them: the message names no one operation (it said "allreduce" after a broadcast's wait).
  std::string what = common::format(
      "collective on device {} (rank {}): a kernel waited longer than {} ms for rank {}; this communicator's "
      "collectives are unusable",
      st.svc().device(), st.rank(), st.svc().options().timeout.count(), peer);
  try {
    if (peer >= 0 && peer < st.world() && peer != st.rank()) st.svc().check_peer_alive(peer);
    st.set_broken(std::make_exception_ptr(TimeoutError(what)));
  } catch (const PeerLostError& e) {
    st.set_broken(std::make_exception_ptr(PeerLostError(common::format("{} ({})", what, e.what()))));
  }
  st.rethrow_if_broken();
}

void device_allreduce(coll::CollState& st, const void* src, void* dst, size_t count, DataType dtype,
                      ReduceOp op, AllreduceAlgo algo, const coll::Window* ws, const coll::Window* wr, void* stream) {
  // The launch and the event calls run on the communicator's device; the caller's current device
  // is put back on return (costs one runtime query when it already is the right one).
  gpu::DeviceGuard dg(st.device());
  const size_t elem = dtype_size(dtype);
  if (algo == AllreduceAlgo::ZeroCopy)
    return st.launch_in_order(stream, [&] {
      coll::zc_allreduce(st, *ws, *wr, src, dst, count, elem, static_cast<int>(dtype), static_cast<int>(op), stream);
    });
  coll::LaunchArgs a;
  a.src = src;
  a.dst = dst;
  a.dtype = static_cast<int>(dtype);
  a.op = static_cast<int>(op);
  a.one_shot = algo == AllreduceAlgo::OneShot;
  a.rank = st.rank();
  a.world = st.world();
  a.threads = pick_threads(st, algo);
  a.layout = st.layout();
  const size_t bytes = count * elem;
  // LL128 where the pairs allow it (coll_state.cpp) and the message is above kLl128Above; LL below.
  const bool ll128_ok = bytes <= st.ll128_max() && !st.generic_oneshot();
  a.ll = a.one_shot && bytes <= st.ll_max() && !(ll128_ok && bytes > kLl128Above);
  a.ll128 = a.one_shot && !a.ll && ll128_ok;
  if (a.ll && st.threads() <= 0) a.threads = coll::ll_threads(bytes);
  if (a.ll128) {
    // Whole warps (a lane group of 8 per line; 64 covers CUDA's and HIP's warp) and enough of them
    // for one pass (one warp store of 4 lines each) up to the flag area's kMaxBlocks, even past one
    // block per SM: a second pass costs more than a shared SM (2x H100, 1 MB: 132 blocks of 512
    // threads 7.01 us, 160 blocks 6.52); 1024 threads from 2 MB (4 MB: 160 x 1024 18.81 us, 160 x
    // 512 20.36, 132 x 512 19.47). 448 threads (14 warps) up to 2 MB: 1 MB fills 157 blocks, not
    // 137. 2x H200, bench_allreduce -G 1 bf16, three runs each, 512 / 448
    // threads: 512 KB 4.32-4.33 / 4.31-4.33 us, 1 MB 5.99-6.01 / 5.93-5.96, 2 MB 10.02-10.04 /
    // 9.93-9.96 (384: 4.22-4.24, 6.42-6.45, 10.45-10.51; 576: 4.44-4.45, 5.97-6.00, 9.69-9.70);
    // another 2x H200 machine: 1 MB 5.96-6.00 / 5.90-5.95, 2 MB 10.01-10.03 / 9.91-9.96. Not
    // measured on H100.
    if (st.threads() <= 0) a.threads = bytes > (size_t(2) << 20) ? 1024 : 448;
    a.threads = std::max(64, a.threads / 64 * 64);
    a.split = coll::make_split(count, elem, st.world(), st.layout().cap, true, 1);  // count only
    size_t stores = (coll::ll128_lines(bytes) + 3) / 4;
    size_t warps = size_t(a.threads) / 32;
    a.blocks = st.blocks_override() > 0 ? st.blocks_override() : clamp_blocks((stores + warps - 1) / warps, st.grid_cap());
  } else if (a.ll) {
    a.split = coll::make_split(count, elem, st.world(), st.layout().cap, true, 1);  // count only
    size_t words = (bytes + 7) / 8;
    a.blocks = st.blocks_override() > 0
                   ? st.blocks_override()
                   : clamp_blocks((words + a.threads - 1) / a.threads, coll::whole_gpu_blocks(st));
    a.ll_words_per_block = (words + a.blocks - 1) / a.blocks;
  } else {
    // The grid is chosen from the first step and then fixed for every step of the call (layout.h).
    coll::Split probe = coll::make_split(count, elem, st.world(), st.layout().cap, a.one_shot, 1);
    a.blocks = pick_blocks(st, algo, probe, elem, a.threads);
    a.split = coll::make_split(count, elem, st.world(), st.layout().cap, a.one_shot, a.blocks);
  }
  for (int r = 0; r < st.world(); ++r) {
    a.data[r] = st.data(r);
    a.flags[r] = st.flags(r);
  }
  a.error = st.error_word();
  a.pdl = st.pdl();
  a.generic_oneshot = st.generic_oneshot();
  a.timeout_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(st.svc().options().timeout).count());

  st.launch_in_order(stream, [&] { coll::launch_allreduce(a, stream); });
}

}  // namespace

// The other collectives (collectives.cpp) share the error word and the broken state.
void coll::check_collective_error(coll::CollState& st) { check_device_error(st); }

AllreduceAlgo allreduce_algo_for(Communicator& comm, size_t bytes) {
  const detail::CommServices& svc = detail::services(comm);
  const bool host = comm.device() == kHostDevice;
  return resolve(svc.options().allreduce_algo, comm.world_size(), bytes, host, !host && coll::nvlink_to_all(svc, comm.world_size()));
}

void allreduce_check(Communicator& comm) {
  auto call = detail::services(comm).begin("allreduce_check");  // close() waits for us (in-flight rule)
  coll::CollState& st = coll::coll_state(comm);
  auto g = st.lock_calls();
  check_device_error(st);
}

void allreduce(Communicator& comm, const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
               ReduceOp op, void* stream) {
  const size_t elem = dtype_size(dtype);  // validates dtype
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::Avg))
    throw InvalidArgument(common::format("allreduce: unknown ReduceOp {}", static_cast<int>(op)));
  if (count > (SIZE_MAX / elem)) throw InvalidArgument(common::format("allreduce: count {} overflows", count));
  if (count > 0 && (!sendbuf || !recvbuf))
    throw InvalidArgument(
        common::format("allreduce: null buffer (sendbuf {}, recvbuf {}) for {} elements", sendbuf, recvbuf, count));
  const char* s = static_cast<const char*>(sendbuf);
  const char* d = static_cast<const char*>(recvbuf);
  size_t bytes = count * elem;
  if (s != d && s < d + bytes && d < s + bytes)
    throw InvalidArgument(common::format(
        "allreduce: sendbuf {} and recvbuf {} overlap partially ({} bytes); pass the same pointer for in place",
        sendbuf, recvbuf, bytes));
  // In flight from here to the return: close() on another thread wakes our waits (they throw
  // InvalidArgument "closed") and frees nothing before we left (the in-flight rule, comm_impl.h).
  auto call = detail::services(comm).begin("allreduce");
  if (comm.world_size() == 1) return coll::one_rank_copy(detail::services(comm), recvbuf, sendbuf, bytes, stream);
  coll::CollState& st = coll::coll_state(comm);
  auto g = st.lock_calls();
  check_device_error(st);
  const AllreduceAlgo forced = st.svc().options().allreduce_algo;
  AllreduceAlgo algo = resolve(forced, st.world(), bytes, st.host(), st.nvlink_all());
  if (count == 0) return;
  const coll::Window *ws = nullptr, *wr = nullptr;
  if (zero_copy_windows(st, forced, sendbuf, recvbuf, bytes, stream, &ws, &wr)) algo = AllreduceAlgo::ZeroCopy;
  if (st.host()) {
    try {
      if (algo == AllreduceAlgo::ZeroCopy)
        coll::zc_allreduce(st, *ws, *wr, sendbuf, recvbuf, count, elem, static_cast<int>(dtype), static_cast<int>(op),
                           nullptr);
      else
        coll::host_allreduce(st, sendbuf, recvbuf, count, static_cast<int>(dtype), static_cast<int>(op),
                             algo == AllreduceAlgo::OneShot);
    } catch (...) {
      st.set_broken_by_current_exception("allreduce");
      throw;
    }
    return;
  }
  device_allreduce(st, sendbuf, recvbuf, count, dtype, op, algo, ws, wr, stream);
}

}  // namespace peerlink
