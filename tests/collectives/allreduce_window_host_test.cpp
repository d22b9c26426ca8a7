// The zero-copy allreduce (AllreduceAlgo::ZeroCopy, zc_allreduce.cpp) on the host backend, one
// process per rank: sendbuf and recvbuf carved from one registered window at offsets that are 8- but
// not 16-aligned; every dtype and op against the float64 reference, in place and not, bitwise equal
// across ranks; guard bytes around the buffers and outside the window; the automatic choice; a
// buffer in no window; ranks that pass different offsets (nothing written, every rank told); and
// 200 calls back to back mixed with the other paths.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "allreduce_harness.h"
#include "peerlink/peerlink.h"
#include "peerlink/windows.h"
#include "support/mp.h"
#include "window_host_harness.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;

// One comm.alloc allocation filled with 0xA5; the window covers [kLead, kLead + win). sendbuf at
// window offset 8, recvbuf after it (8-aligned), the same on every rank.
struct Arena {
  static constexpr size_t kLead = 4096 + 64, kTail = 4096;
  Communicator& comm;
  size_t win;
  char* alloc;
  uint64_t id;
  Arena(Communicator& c, size_t bytes) : comm(c), win(bytes) {
    alloc = static_cast<char*>(comm.alloc(kLead + win + kTail));
    std::memset(alloc, 0xA5, kLead + win + kTail);
    id = peerlink::register_window(comm, base(), win);
  }
  ~Arena() {
    try {
      peerlink::deregister_window(comm, id);
      comm.free(alloc);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "arena teardown: %s\n", e.what());
    }
  }
  char* base() const { return alloc + kLead; }
  char* send() const { return base() + 8; }
  char* recv(size_t send_bytes) const { return base() + 8 + (send_bytes + 7) / 8 * 8 + 8; }
  // Bytes outside [from, to) of the allocation still hold 0xA5.
  void check_guards(const char* from, const char* to, const std::string& what) const {
    for (char* p = alloc; p < alloc + kLead + win + kTail; ++p)
      if (p < from || p >= to)
        MP_CHECK_MSG(static_cast<unsigned char>(*p) == 0xA5, what << ": byte " << (p - alloc) << " of the allocation written");
  }
};

const DataType kTypes[] = {DataType::F32, DataType::F16, DataType::BF16, DataType::F64, DataType::I32, DataType::I64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod, ReduceOp::Avg};

void sweep(int world, const char* algo, const std::vector<size_t>& counts) {
  const int cases = int(std::size(kTypes) * std::size(kOps) * counts.size());
  HashTable hashes(world, cases);
  std::string uid = unique_test_id(std::string("arzc-") + algo + std::to_string(world));
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, allreduce_opts(algo, 20000));
    Arena arena(comm, size_t(1) << 20);
    int c = 0;
    for (DataType t : kTypes)
      for (ReduceOp op : kOps)
        for (size_t n : counts) {
          const size_t es = peerlink::dtype_size(t), bytes = n * es;
          const bool in_place = c % 2 == 1;
          const std::string what = std::string("zero-copy allreduce ") + peerlink::to_string(t) + " " +
                                   peerlink::to_string(op) + " count " + std::to_string(n) + " world " +
                                   std::to_string(world) + (in_place ? " in place" : "");
          char* s = arena.send();
          char* d = in_place ? s : arena.recv(bytes);
          fill_input(s, n, 7100 + c, rank, t, op);
          if (!in_place) std::memset(d, 0xEE, bytes);
          peerlink::allreduce(comm, s, d, n, t, op);
          check_result(d, n, 7100 + c, world, t, op, what);
          hashes.put(rank, c, fnv1a(d, bytes) | 1);
          comm.barrier();  // every peer's stores into this rank's recvbuf are done: check the guards
          arena.check_guards(s, (in_place ? s : d) + bytes, what);
          std::memset(arena.base(), 0xA5, arena.win);
          comm.barrier();  // nobody writes into a peer's window before it was reset
          ++c;
        }
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(cases), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// 1 element (one rank owns it all), 7, an odd count, and 40009 (shards of unequal length).
const std::vector<size_t> kCounts = {1, 7, 1001, 40009};

TEST(AllreduceWindowHost, ForcedZeroCopy2Ranks) { sweep(2, "zero_copy", kCounts); }
TEST(AllreduceWindowHost, ForcedZeroCopy3Ranks) { sweep(3, "zc", kCounts); }
TEST(AllreduceWindowHost, ForcedZeroCopy4Ranks) { sweep(4, "zero-copy", {1, 9, 20011}); }
// Auto: the host takes it from 64 KB (allreduce.cpp), so 40009 x 4 or 8 bytes go zero-copy and
// the smaller counts take the staged path through the same window.
TEST(AllreduceWindowHost, AutoAcrossTheThreshold3Ranks) { sweep(3, "", kCounts); }

// Forced zero-copy on a buffer in no window: InvalidArgument naming the buffer on every rank,
// nothing written, and the communicator still works.
TEST(AllreduceWindowHost, ForcedWithoutWindowIsRefused) {
  Shared out(2);
  std::string uid = unique_test_id("arzc-nowin");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, allreduce_opts("zero_copy", 3000));
    std::vector<float> s(1000, 1.5f + rank), d(1000, -3.0f);
    int64_t took = 0;
    out.v[rank] = outcome_of([&] { peerlink::allreduce(comm, s.data(), d.data(), 1000, DataType::F32, ReduceOp::Sum); }, &took);
    for (float x : d) MP_CHECK_MSG(x == -3.0f, "a refused allreduce wrote recvbuf");
    Arena arena(comm, 1 << 16);
    float* ws = reinterpret_cast<float*>(arena.send());
    for (int i = 0; i < 100; ++i) ws[i] = float(rank + i);
    peerlink::allreduce(comm, ws, ws, 100, DataType::F32, ReduceOp::Sum);
    for (int i = 0; i < 100; ++i) MP_CHECK_MSG(ws[i] == float(1 + 2 * i), "element " << i << " is " << ws[i]);
  }, std::chrono::milliseconds(30000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(out.v[0], kInvalid);
  EXPECT_EQ(out.v[1], kInvalid);
  EXPECT_TRUE(leftover_segments(uid).empty());
}

// Ranks that pass their buffers at different window offsets. Variant 0: rank 1 registered a smaller
// window (32 KB, its buffers at offset 0) and rank 0 passes its buffers at 32 KB of its 64 KB one, so
// rank 0's stores into rank 1's recvbuf would leave rank 1's window: rank 0's plan refuses them.
// Variant 1: both inside, at offsets 1024 and 0: the tags differ. Either way both ranks get
// InvalidArgument in this call and no byte of either window changes.
TEST(AllreduceWindowHost, OffsetsThatDifferAreRefused) {
  for (int variant = 0; variant < 2; ++variant) {
    Shared out(2);
    std::string uid = unique_test_id("arzc-offsets" + std::to_string(variant));
    std::string fail = run_ranks(2, [&](int rank) {
      Communicator comm(uid, rank, 2, peerlink::kHostDevice, allreduce_opts("zero_copy", 3000));
      const size_t n = 4096, bytes = n * 4;  // sendbuf and recvbuf: 16 KB each
      Arena arena(comm, variant == 0 && rank == 1 ? 2 * bytes : 4 * bytes);
      const size_t at = rank == 1 ? 0 : variant == 0 ? 2 * bytes : 1024;
      char* s = arena.base() + at;
      char* d = s + bytes;
      int64_t took = 0;
      out.v[rank] = outcome_of([&] { peerlink::allreduce(comm, s, d, n, DataType::F32, ReduceOp::Sum); }, &took);
      comm.barrier();
      arena.check_guards(arena.base(), arena.base(), "refused allreduce, variant " + std::to_string(variant));
    }, std::chrono::milliseconds(30000));
    EXPECT_EQ(fail, "") << "variant " << variant;
    EXPECT_EQ(out.v[0], kInvalid) << "variant " << variant;
    EXPECT_EQ(out.v[1], kInvalid) << "variant " << variant;
    EXPECT_TRUE(leftover_segments(uid).empty());
  }
}

// 200 calls, data changing every call: zero-copy allreduce (in place every other time), then a
// staged allreduce of another size and a zero-copy all_gather on the same window, so the three
// paths share the sequence counters. A rank is late now and then: a peer already in the next call
// must not store into this rank's recvbuf while it still checks the last result.
TEST(AllreduceWindowHost, BackToBackMixedWithOtherPaths3Ranks) {
  const int world = 3;
  std::string uid = unique_test_id("arzc-b2b");
  std::string fail = run_ranks(world, [&](int rank) {
    Options o = allreduce_opts("", 20000);
    o.all_gather_algo = peerlink::CollAlgo::ZeroCopy;
    Communicator comm(uid, rank, world, peerlink::kHostDevice, o);
    Arena arena(comm, 1 << 20);
    const size_t big = 20000, small = 300;  // 80 KB: zero-copy by auto; 1.2 KB: staged
    int32_t* s = reinterpret_cast<int32_t*>(arena.send());
    int32_t* d = reinterpret_cast<int32_t*>(arena.recv(big * 4));
    auto val = [](int it, int r, size_t i) { return int32_t(it * 7919 + r * 104729 + int(i % 1000003)); };
    for (int it = 0; it < 200; ++it) {
      const bool in_place = it % 2 == 1;
      int32_t* out = in_place ? s : d;
      for (size_t i = 0; i < big; ++i) s[i] = val(it, rank, i);
      peerlink::allreduce(comm, s, out, big, DataType::I32, ReduceOp::Sum);
      if (it % 13 == rank) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (size_t i = 0; i < big; ++i) {
        const int32_t want = val(it, 0, i) + val(it, 1, i) + val(it, 2, i);
        MP_CHECK_MSG(out[i] == want, "call " << it << ": element " << i << " is " << out[i] << ", want " << want);
      }
      std::vector<int32_t> a(small, rank + it), b(small);
      peerlink::allreduce(comm, a.data(), b.data(), small, DataType::I32, ReduceOp::Sum);
      for (size_t i = 0; i < small; ++i) MP_CHECK_MSG(b[i] == 3 + 3 * it, "staged call " << it);
      int32_t* g = d + big;  // all_gather's recvbuf: in the window, after the allreduce's
      peerlink::all_gather(comm, a.data(), g, small, DataType::I32);
      for (size_t i = 0; i < world * small; ++i) MP_CHECK_MSG(g[i] == int32_t(i / small) + it, "all_gather call " << it);
    }
  }, std::chrono::milliseconds(120000));
  EXPECT_EQ(fail, "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

}  // namespace
