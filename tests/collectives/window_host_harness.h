// Helpers shared by the host-backend window tests (collectives_window_host_test.cpp: data path;
// window_contract_host_test.cpp: registration, misuse, contract violations, a dead peer): Options
// that force or tune the zero-copy path, int64s shared by forked ranks, and the outcome of a call as
// a code plus how long it took.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "peerlink/errors.h"
#include "peerlink/peerlink.h"

namespace pltest::coll {

using ms = std::chrono::milliseconds;

inline peerlink::Options wopts(const char* algo, size_t zc_min, int timeout_ms = 20000) {
  peerlink::Options o = peerlink::Options::from_env();
  o.all_gather_algo = o.broadcast_algo = o.all_to_all_algo = o.reduce_algo = o.reduce_scatter_algo = peerlink::parse_coll_algo(algo);
  o.coll_zero_copy_min = zc_min;
  o.timeout = ms(timeout_ms);
  return o;
}

// int64s in memory shared by the ranks (made before fork): per-rank outcomes and ids.
struct Shared {
  explicit Shared(size_t n)
      : n_(n), v(static_cast<int64_t*>(mmap(nullptr, n * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0))) {
    if (v == MAP_FAILED) throw std::runtime_error("mmap");
  }
  ~Shared() { munmap(v, n_ * 8); }
  size_t n_;
  int64_t* v;
};

// Runs f and says how it ended, and how long it took (ms).
enum Outcome { kOk = 1, kInvalid, kPeerLost, kTimeout, kOther };
inline int outcome_of(const std::function<void()>& f, int64_t* took_ms) {
  auto t0 = std::chrono::steady_clock::now();
  int code = kOk;
  try {
    f();
  } catch (const std::exception& e) {
    code = dynamic_cast<const peerlink::InvalidArgument*>(&e) ? kInvalid
           : dynamic_cast<const peerlink::PeerLostError*>(&e) ? kPeerLost
           : dynamic_cast<const peerlink::TimeoutError*>(&e)  ? kTimeout
                                                                : kOther;
    if (code == kOther) std::fprintf(stderr, "[pid %d] %s\n", int(getpid()), e.what());
  }
  *took_ms = std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - t0).count();
  return code;
}

}  // namespace pltest::coll
