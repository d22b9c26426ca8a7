// Host-backend building blocks shared by host_allreduce.cpp and host_collectives.cpp: the element
// loop (move or reduce in rank order) and the bounded SHM flag waits that notice a dead peer.
#pragma once
#include <sched.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/coll_state.h"
#include "collectives/reduce_ops.h"
#include "common/format.h"
#include "common/log.h"
#include "peerlink/errors.h"
#include "transport/services.h"

namespace peerlink::coll {

// outs[o][i] = op over ins[0..nin)[i]; nin == 1 moves the bytes unchanged (memmove: in place ok).
template <typename T, int Op>
void reduce_elems(const T* const* ins, int nin, T* const* outs, int nout, size_t n) {
  if (nin == 1) {
    for (int o = 0; o < nout; ++o)
      if (outs[o] != ins[0]) std::memmove(outs[o], ins[0], n * sizeof(T));
    return;
  }
  using A = Acc<T>;
  for (size_t i = 0; i < n; ++i) {
    typename A::type acc = A::in(ins[0][i]);
    for (int r = 1; r < nin; ++r) acc = Apply<Op>::run(acc, A::in(ins[r][i]));
    T v = A::out(finish<Op>(acc, nin));
    for (int o = 0; o < nout; ++o) outs[o][i] = v;
  }
}

// Bounded wait until ready() for something peer `p` must write; yields the CPU (CI runs 8 ranks on
// 2 cores) and checks that the peer lives, so a dead peer is PeerLostError, not a timeout. `what`
// and `detail` name the wait in the TimeoutError.
template <typename Ready, typename Detail>
void host_wait(CollState& st, int p, const char* what, Ready&& ready, Detail&& detail) {
  if (ready()) return;
  using Clock = std::chrono::steady_clock;
  const auto& opts = st.svc().options();
  auto start = Clock::now();
  auto next_alive = start + std::chrono::milliseconds(20);
  for (uint32_t spins = 0; !ready(); ++spins) {
    if (spins < 64) continue;
    auto now = Clock::now();
    if (now - start > std::chrono::milliseconds(10)) std::this_thread::sleep_for(std::chrono::microseconds(100));
    else sched_yield();
    if (now >= next_alive) {
      st.svc().check_peer_alive(p);  // throws PeerLostError
      st.svc().check_interrupt();    // Options::interrupt_check (Ctrl-C from Python)
      next_alive = now + std::chrono::milliseconds(20);
    }
    if (now - start > opts.timeout)
      throw TimeoutError(common::format("{}: rank {} waited {} ms for rank {} ({})", what, st.rank(),
                                        opts.timeout.count(), p, detail()));
  }
}

// Announce `seq` for `phase` (block 0) to every peer's inbox.
inline void host_signal(CollState& st, int phase, uint64_t seq) {
  for (int p = 0; p < st.world(); ++p)
    if (p != st.rank()) __atomic_store_n(&st.flags(p)->inbox[phase][0][st.rank()], seq, __ATOMIC_RELEASE);
}

// Wait until every peer announced >= seq for `phase`.
inline void host_wait_all(CollState& st, int phase, uint64_t seq, const char* what) {
  for (int p = 0; p < st.world(); ++p) {
    if (p == st.rank()) continue;
    const uint64_t* f = &st.flags(st.rank())->inbox[phase][0][p];
    host_wait(
        st, p, what, [&] { return __atomic_load_n(f, __ATOMIC_ACQUIRE) >= seq; },
        [&] {
          return common::format("phase {}, step seq {}, peer at {}", phase, seq, __atomic_load_n(f, __ATOMIC_ACQUIRE));
        });
  }
}

}  // namespace peerlink::coll
