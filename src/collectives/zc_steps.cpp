#include "collectives/zc_steps.h"

#include "collectives/coll_state.h"
#include "collectives/host_sync.h"
#include "common/format.h"
#include "common/log.h"
#include "gpu/runtime.h"
#include "peerlink/errors.h"

namespace peerlink::coll {

uint64_t zc_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

void zc_host_enter(CollState& st, uint64_t tag, const std::string& bad) {
  const char* what = "zero-copy collective";
  const uint64_t seq = st.next_host_step();
  const uint64_t t = zc_step_tag(tag, seq);
  for (int p = 0; p < st.world(); ++p)
    if (p != st.rank()) __atomic_store_n(&st.flags(p)->zc_tag[st.rank()], bad.empty() ? t : ~t, __ATOMIC_RELAXED);
  host_signal(st, 0, seq);  // release: the tag travels with the flag
  host_wait_all(st, 0, seq, what);
  if (!bad.empty()) throw InvalidArgument(bad);
  for (int p = 0; p < st.world(); ++p) {
    if (p == st.rank()) continue;
    if (__atomic_load_n(&st.flags(st.rank())->zc_tag[p], __ATOMIC_RELAXED) != t)
      throw InvalidArgument(
          common::format("{} (rank {}): rank {} passed a buffer at another offset of the window, another window or "
                         "another shape (every rank must pass the same window offset)",
                         what, st.rank(), p));
  }
}

void zc_host_step(CollState& st) {
  const uint64_t seq = st.next_host_step();
  host_signal(st, 0, seq);
  host_wait_all(st, 0, seq, "zero-copy collective");
}

LaunchArgs zc_step_args(const CollState& st) {
  LaunchArgs a;
  fill_state_args(st, a);
  a.blocks = 1;
  return a;
}

void zc_refuse(CollState& st, uint64_t tag, const std::string& bad, void* stream) {
  gpu::DeviceGuard dg(st.device());
  const LaunchArgs a = zc_step_args(st);
  launch_zc_step(a, ~tag, stream);
  st.set_broken(std::make_exception_ptr(
      InvalidArgument(common::format("{}; this communicator's collectives are unusable", bad))));
  throw InvalidArgument(bad);
}

}  // namespace peerlink::coll
