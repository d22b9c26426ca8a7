// The zero-copy data path of all_gather, all_to_all, broadcast, reduce and reduce_scatter over registered windows
// (peerlink/windows.h) on the host backend, one process per rank: forced and automatic zero-copy
// on windows over Communicator::alloc memory (a window at an offset inside a larger allocation,
// recvbufs at offsets inside it, one window per buffer), byte-exact results and guard bytes
// (coll_harness.h), the automatic choice at coll_zero_copy_min, 240 back-to-back calls.
// Registration, misuse, contract violations and a dead peer: window_contract_host_test.cpp.
// Sizes stay at a few hundred KB: CI runs this on 2 cores and under ASan.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "coll_harness.h"
#include "support/mp.h"
#include "window_host_harness.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;

// A window over [lead, lead + win) of a larger Communicator::alloc allocation; bytes outside the
// window hold 0xA5 and must keep it. Buffers (Mem hooks) are carved from the window with the same
// offsets on every rank (same call sequence), the first at a non-zero, 8- but not 16-aligned offset.
struct WindowArena {
  static constexpr size_t kLead = 4096 + 64, kTail = 4032;
  Communicator& comm;
  size_t win;
  char* alloc;
  uint64_t id = 0;
  size_t top = 0;
  int live = 0;
  WindowArena(Communicator& c, size_t bytes) : comm(c), win(bytes) {
    alloc = static_cast<char*>(comm.alloc(kLead + win + kTail));
    std::memset(alloc, 0xA5, kLead + win + kTail);
    id = peerlink::register_window(comm, base(), win);
  }
  ~WindowArena() {  // may run while a failed check unwinds: never throw
    try {
      if (id) peerlink::deregister_window(comm, id);
      comm.free(alloc);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "window arena teardown: %s\n", e.what());
    }
  }
  char* base() const { return alloc + kLead; }
  Mem mem() {
    Mem m;
    m.alloc = [this](size_t n) -> void* {
      size_t off = (top + 7) / 8 * 8 + 72;
      MP_CHECK_MSG(off + n <= win, "arena of " << win << " bytes too small for " << n);
      top = off + n;
      ++live;
      return base() + off;
    };
    m.release = [this](void*) {
      if (--live == 0) top = 0;
    };
    return m;
  }
  void check_outside(const std::string& what) const {
    for (size_t i = 0; i < kLead + win + kTail; ++i)
      if (i < kLead || i >= kLead + win)
        MP_CHECK_MSG(static_cast<unsigned char>(alloc[i]) == 0xA5,
                     what << ": byte " << i << " of the allocation, outside window " << id << ", was written");
  }
};

// One window per buffer: comm.alloc + register_window, deregister_window + comm.free (collective:
// every rank allocates and frees the harness's buffers in the same order).
Mem per_buffer_mem(Communicator& comm, std::map<void*, uint64_t>& ids, std::string& err) {
  Mem m;
  m.alloc = [&comm, &ids](size_t n) -> void* {
    void* p = comm.alloc(n);
    ids[p] = peerlink::register_window(comm, p, n);
    MP_CHECK_MSG(peerlink::window_zero_copy(comm, p, n), "a window over comm.alloc memory is not zero-copy");
    return p;
  };
  m.release = [&comm, &ids, &err](void* p) {  // runs in a destructor: report, never throw
    try {
      peerlink::deregister_window(comm, ids.at(p));
      MP_CHECK(!peerlink::window_zero_copy(comm, p, 1));
    } catch (const std::exception& e) {
      if (err.empty()) err = e.what();
    }
    ids.erase(p);
    comm.free(p);
  };
  return m;
}

enum class How { Arena, PerBuffer };

// all_gather, all_to_all, broadcast (recvbuf in the window: pushes), reduce and reduce_scatter
// (sendbuf in the window: pulls; every op) x dtypes x counts; every third case in place, every root.
void sweep(int world, const Options& o, How how, const std::vector<size_t>& counts, const char* tag) {
  const DataType types[] = {DataType::BF16, DataType::I32, DataType::F64};
  const Kind kinds[] = {Kind::AllGather, Kind::AllToAll, Kind::Broadcast, Kind::Reduce, Kind::ReduceScatter};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg};
  const int cases = int(std::size(kinds) * std::size(types) * counts.size());
  HashTable hashes(world, cases);
  std::string uid = unique_test_id(std::string("cowin-") + tag);
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, o);
    WindowArena arena(comm, size_t(4) << 20);
    MP_CHECK_MSG(arena.id == 1, "the first window has id " << arena.id);
    MP_CHECK(peerlink::window_zero_copy(comm, arena.base(), arena.win));
    MP_CHECK(peerlink::window_zero_copy(comm, arena.base() + 100, 1000));
    MP_CHECK(!peerlink::window_zero_copy(comm, arena.base() - 1, 2));
    MP_CHECK(!peerlink::window_zero_copy(comm, arena.base() + arena.win - 1, 2));
    std::map<void*, uint64_t> ids;
    std::string err;
    Mem mem = how == How::Arena ? arena.mem() : per_buffer_mem(comm, ids, err);
    int c = 0;
    for (Kind k : kinds)
      for (DataType t : types)
        for (size_t n : counts) {
          const int root = c % world;
          const bool in_place = c % 3 == 1;
          std::string what = std::string(kind_name(k)) + " " + tag + " " + peerlink::to_string(t) + " count " +
                             std::to_string(n) + " world " + std::to_string(world) + " root " + std::to_string(root) +
                             (in_place ? " in place" : "");
          const ReduceOp op = is_reducing(k) ? ops[c % std::size(ops)] : ReduceOp::Sum;
          hashes.put(rank, c, run_case(comm, mem, k, t, op, n, root, in_place, 9100 + c,
                                       what + " " + peerlink::to_string(op)));
          MP_CHECK_MSG(err.empty(), what << ": " << err);
          ++c;
        }
    comm.barrier();  // every peer's writes into this rank's window are done
    arena.check_outside(tag);
  }, ms(120000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

const std::vector<size_t> kCounts = {1, 7, 1000, 40009};  // the largest: 80-320 KB per piece

TEST(CollWindowHost, ForcedZeroCopy2Ranks) { sweep(2, wopts("zero_copy", 0), How::Arena, kCounts, "zc"); }
TEST(CollWindowHost, ForcedZeroCopy3Ranks) { sweep(3, wopts("zc", 1 << 30), How::Arena, kCounts, "zc3"); }
TEST(CollWindowHost, AutoZeroCopy4Ranks) { sweep(4, wopts("", 1), How::Arena, {1, 7, 1000, 20011}, "auto4"); }
// Auto with a threshold inside the sweep: small pieces on LL/push, large ones zero-copy, one window.
TEST(CollWindowHost, AutoThresholdMix3Ranks) { sweep(3, wopts("", 4096), How::Arena, kCounts, "mix3"); }
// A window per buffer: register/deregister around every call (sendbufs in windows too).
TEST(CollWindowHost, WindowPerBuffer2Ranks) { sweep(2, wopts("", 1), How::PerBuffer, kCounts, "perbuf"); }

// The automatic choice, seen through the contract: recvbufs at different offsets of one window
// (rank 1's 256 bytes in) are fine on every path but zero-copy. Below coll_zero_copy_min, or with 0,
// the calls succeed with the right data; from it on auto takes zero-copy and that is InvalidArgument.
TEST(CollWindowHost, AutoPicksZeroCopyFromTheThreshold) {
  for (size_t zc_min : {size_t(0), size_t(4096)}) {
    Shared out(2);
    std::string uid = unique_test_id("cowin-auto" + std::to_string(zc_min));
    std::string fail = run_ranks(2, [&](int rank) {
      Communicator comm(uid, rank, 2, peerlink::kHostDevice, wopts("", zc_min, 3000));
      char* a = static_cast<char*>(comm.alloc(1 << 16));
      uint64_t id = peerlink::register_window(comm, a, 1 << 16);
      int32_t* dst = reinterpret_cast<int32_t*>(a + (rank == 0 ? 0 : 256));
      std::vector<int32_t> src(4096);
      for (int i = 0; i < 4096; ++i) src[i] = rank * 100000 + i;
      for (int n : {1, 1023, 2048}) {  // pieces of 4, 4092 and 8192 bytes
        if (zc_min && size_t(n) * 4 >= zc_min) break;
        peerlink::all_gather(comm, src.data(), dst, n, DataType::I32);
        for (int i = 0; i < 2 * n; ++i) MP_CHECK_MSG(dst[i] == (i / n) * 100000 + i % n, "all_gather " << n);
        peerlink::all_to_all(comm, src.data(), dst, n, DataType::I32);
        for (int i = 0; i < 2 * n; ++i) MP_CHECK_MSG(dst[i] == (i / n) * 100000 + rank * n + i % n, "all_to_all " << n);
        peerlink::broadcast(comm, src.data(), dst, n, DataType::I32, 1);
        for (int i = 0; i < n; ++i) MP_CHECK_MSG(dst[i] == 100000 + i, "broadcast " << n);
      }
      int64_t took = 0;
      out.v[rank] = zc_min ? outcome_of([&] { peerlink::all_gather(comm, src.data(), dst, 1024, DataType::I32); }, &took)
                           : int(kOk);
      try {
        peerlink::deregister_window(comm, id);
      } catch (const peerlink::Error&) {
      }
      comm.free(a);
    }, ms(30000));
    EXPECT_EQ(fail, "") << "coll_zero_copy_min " << zc_min;
    EXPECT_TRUE(out.v[0] <= kInvalid && out.v[1] <= kInvalid && (zc_min == 0 || out.v[0] == kInvalid ||
                                                                  out.v[1] == kInvalid))
        << "coll_zero_copy_min " << zc_min << ": outcomes " << out.v[0] << ", " << out.v[1];
    EXPECT_TRUE(leftover_segments(uid).empty());
  }
}

// 240 calls rotating all_gather / all_to_all / broadcast (in place every other time), data changing
// every call, sizes across the threshold (auto) or all zero-copy (forced), recvbuf at offset 32 of
// the window, guard elements after it. One rank is late now and then: a peer already in the next
// call must not write this rank's recvbuf while it still reads the last result.
TEST(CollWindowHost, BackToBack240Calls3Ranks) {
  const int world = 3;
  for (const char* algo : {"", "zero_copy"}) {
    std::string uid = unique_test_id(std::string("cowin-b2b") + algo);
    std::string fail = run_ranks(world, [&](int rank) {
      Communicator comm(uid, rank, world, peerlink::kHostDevice, wopts(algo, 2048));
      const size_t maxc = 3000, wbytes = (world * maxc + 64) * 4;
      char* a = static_cast<char*>(comm.alloc(wbytes + 4096));
      uint64_t id = peerlink::register_window(comm, a + 64, wbytes);
      int32_t* recv = reinterpret_cast<int32_t*>(a + 64 + 32);
      std::vector<int32_t> send(world * maxc);
      const size_t sizes[] = {1, 7, 300, 513, 1000, 2999};  // 2048 bytes = 512 i32
      auto val = [](int it, int from, int to, size_t i) { return int32_t(it * 1000003 + from * 7919 + to * 104729 + i); };
      for (int it = 0; it < 240; ++it) {
        const size_t n = sizes[(it / 3) % 6];
        const int kind = it % 3, root = (it / 3) % world;
        const bool in_place = (it / 3) % 2 == 1;
        const size_t out = kind == 2 ? n : world * n;
        for (size_t i = 0; i < out + 4; ++i) recv[i] = -7;
        std::string what = std::string("call ") + std::to_string(it) + " count " + std::to_string(n);
        if (kind == 0) {
          int32_t* s = in_place ? recv + rank * n : send.data();
          for (size_t i = 0; i < n; ++i) s[i] = val(it, rank, 0, i);
          peerlink::all_gather(comm, s, recv, n, DataType::I32);
        } else if (kind == 1) {
          for (int q = 0; q < world; ++q)
            for (size_t i = 0; i < n; ++i) send[q * n + i] = val(it, rank, q, i);
          peerlink::all_to_all(comm, send.data(), recv, n, DataType::I32);
        } else {
          int32_t* s = in_place ? recv : send.data();
          if (rank == root)
            for (size_t i = 0; i < n; ++i) s[i] = val(it, root, 0, i);
          peerlink::broadcast(comm, rank == root ? s : nullptr, recv, n, DataType::I32, root);
        }
        if (it % 17 == rank) std::this_thread::sleep_for(ms(3));
        for (size_t i = 0; i < out; ++i) {
          const int32_t want = kind == 0 ? val(it, int(i / n), 0, i % n)
                               : kind == 1 ? val(it, int(i / n), rank, i % n) : val(it, root, 0, i);
          MP_CHECK_MSG(recv[i] == want, what << " kind " << kind << ": element " << i << " is " << recv[i]
                                             << ", expected " << want);
        }
        for (size_t i = out; i < out + 4; ++i) MP_CHECK_MSG(recv[i] == -7, what << ": guard element written");
      }
      peerlink::deregister_window(comm, id);
      comm.free(a);
    }, ms(120000));
    EXPECT_EQ(fail, "") << "algo '" << algo << "'";
    EXPECT_TRUE(leftover_segments(uid).empty());
  }
}

}  // namespace
