// nccl-tests' modes on the C API of libnccl.so.2, host backend (PEERLINK_NCCL_HOST_BACKEND=1, host
// pointers): -t 2 -g 1 (the main thread creates both communicators in one group, then one thread
// drives each), every dtype x op peerlink implements (others must be refused, never wrong),
// registered buffers (-R 1, -R 2), in-place send/recv in a group, PreMulSum destroyed before
// ncclGroupEnd (-o premulsum), ncclCommShrink, and error codes.
#include <gtest/gtest.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nccl_harness.h"

namespace {

// Small integers as each dtype's bits (exact in every type, fp16/bf16 included).
uint16_t f16_bits(int v) {  // |v| < 2048
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned a = static_cast<unsigned>(v < 0 ? -v : v);
  int e = 31 - __builtin_clz(a);
  unsigned mant = (a << (10 - e)) & 0x3ff;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}
uint16_t bf16_bits(int v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

struct Type {
  ncclDataType_t t;
  size_t size;
  const char* name;
};
const Type kPeerlinkTypes[] = {{ncclFloat32, 4, "f32"}, {ncclFloat64, 8, "f64"}, {ncclInt32, 4, "i32"},
                               {ncclInt64, 8, "i64"},   {ncclUint32, 4, "u32"},  {ncclUint64, 8, "u64"},
                               {ncclFloat16, 2, "f16"}, {ncclBfloat16, 2, "bf16"}};

// Writes v as type t at p.
void put(const Type& ty, void* p, int v) {
  switch (ty.t) {
    case ncclFloat32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case ncclFloat64: { double x = v; std::memcpy(p, &x, 8); break; }
    case ncclInt32: case ncclUint32: { int32_t x = v; std::memcpy(p, &x, 4); break; }
    case ncclInt64: case ncclUint64: { int64_t x = v; std::memcpy(p, &x, 8); break; }
    case ncclFloat16: { uint16_t x = f16_bits(v); std::memcpy(p, &x, 2); break; }
    case ncclBfloat16: { uint16_t x = bf16_bits(v); std::memcpy(p, &x, 2); break; }
    default: throw std::runtime_error("type");
  }
}
std::vector<char> fill(const Type& ty, size_t n, const std::function<int(size_t)>& v) {
  std::vector<char> b(n * ty.size);
  for (size_t i = 0; i < n; ++i) put(ty, b.data() + i * ty.size, v(i));
  return b;
}
bool same(const Type& ty, const char* got, int want) {
  std::vector<char> w(ty.size);
  put(ty, w.data(), want);
  return std::memcmp(got, w.data(), ty.size) == 0;
}

// Per-rank value of element i (never 0; max/min/prod differ by rank).
int val(int rank, size_t i) { return static_cast<int>((i % 5) + 1) * (rank % 2 ? -1 : 1) + rank; }
int reduce_of(ncclRedOp_t op, int nranks, size_t i) {
  int acc = val(0, i);
  for (int r = 1; r < nranks; ++r) {
    int x = val(r, i);
    acc = op == ncclSum ? acc + x : op == ncclProd ? acc * x : op == ncclMax ? std::max(acc, x) : std::min(acc, x);
  }
  return acc;
}

// ncclAvg inputs (2 ranks): the sums run over -7..-2, odd and even, so the halves are exact in every
// float type and the integers' rounding toward zero shows (-5 / 2 = -2).
int avg_val(int rank, size_t i) { return rank == 0 ? -static_cast<int>(i % 4) - 5 : static_cast<int>(i % 3) + 1; }
// got == sum / 2: integers toward zero; floats exactly (halving a small nonzero integer's bits).
bool same_avg(const Type& ty, const char* got, int sum) {
  std::vector<char> w(ty.size);
  switch (ty.t) {
    case ncclFloat32: { float x = sum / 2.0f; std::memcpy(w.data(), &x, 4); break; }
    case ncclFloat64: { double x = sum / 2.0; std::memcpy(w.data(), &x, 8); break; }
    case ncclFloat16: { uint16_t x = static_cast<uint16_t>(f16_bits(sum) - 0x400); std::memcpy(w.data(), &x, 2); break; }
    case ncclBfloat16: { uint16_t x = static_cast<uint16_t>(bf16_bits(sum) - 0x80); std::memcpy(w.data(), &x, 2); break; }
    default: return same(ty, got, sum / 2);
  }
  return std::memcmp(got, w.data(), ty.size) == 0;
}

}  // namespace

// -d all -o all, as far as peerlink implements: allreduce, reduce-scatter and reduce of every
// dtype x {sum, prod, max, min, avg} on 2 processes, verified element by element; unsigned
// max/min/avg, int8/uint8/fp8 and PreMulSum must be refused on the host backend (they need the real
// NCCL).
TEST(NcclModes, EveryDtypeAndOpVerified) {
  ncclUniqueId id = new_id();
  std::string err = run_ranks(2, [&](int rank) {
    ncclComm_t c = nullptr;
    CHECK_NCCL(ncclCommInitRank(&c, 2, id, rank));
    const size_t n = 1030;
    const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin};
    for (const Type& ty : kPeerlinkTypes) {
      for (ncclRedOp_t op : ops) {
        bool is_unsigned = ty.t == ncclUint32 || ty.t == ncclUint64;
        std::vector<char> in = fill(ty, n, [&](size_t i) { return val(rank, i); });
        std::vector<char> out(n * ty.size, 0);
        if (is_unsigned && (op == ncclMax || op == ncclMin)) {
          // Signed arithmetic would order them wrongly: forwarded, which the host backend cannot do.
          CHECK(ncclAllReduce(in.data(), out.data(), n, ty.t, op, c, nullptr) == ncclInvalidUsage);
          continue;
        }
        CHECK_NCCL(ncclAllReduce(in.data(), out.data(), n, ty.t, op, c, nullptr));
        for (size_t i = 0; i < n; ++i)
          if (!same(ty, out.data() + i * ty.size, reduce_of(op, 2, i)))
            throw std::runtime_error(std::string("allreduce ") + ty.name + " op " + std::to_string(op) + " element " +
                                     std::to_string(i));
        // Reduce-scatter: this rank's half of the reduction.
        std::vector<char> rs(n / 2 * ty.size, 0);
        CHECK_NCCL(ncclReduceScatter(in.data(), rs.data(), n / 2, ty.t, op, c, nullptr));
        for (size_t i = 0; i < n / 2; ++i)
          CHECK(same(ty, rs.data() + i * ty.size, reduce_of(op, 2, rank * (n / 2) + i)));
        // Reduce to root 1, in place on the root.
        std::vector<char> red = in;
        CHECK_NCCL(ncclReduce(red.data(), red.data(), n, ty.t, op, 1, c, nullptr));
        if (rank == 1)
          for (size_t i = 0; i < n; ++i) CHECK(same(ty, red.data() + i * ty.size, reduce_of(op, 2, i)));
      }
      // ncclAvg: signed and float types on peerlink; unsigned ones divide differently: forwarded.
      std::vector<char> ain = fill(ty, n, [&](size_t i) { return avg_val(rank, i); });
      std::vector<char> aout(n * ty.size, 0), ars(n / 2 * ty.size, 0);
      if (ty.t == ncclUint32 || ty.t == ncclUint64) {
        CHECK(ncclAllReduce(ain.data(), aout.data(), n, ty.t, ncclAvg, c, nullptr) == ncclInvalidUsage);
        continue;
      }
      CHECK_NCCL(ncclAllReduce(ain.data(), aout.data(), n, ty.t, ncclAvg, c, nullptr));
      CHECK_NCCL(ncclReduceScatter(ain.data(), ars.data(), n / 2, ty.t, ncclAvg, c, nullptr));
      CHECK_NCCL(ncclReduce(ain.data(), ain.data(), n, ty.t, ncclAvg, 0, c, nullptr));
      for (size_t i = 0; i < n; ++i) {
        const int sum = avg_val(0, i) + avg_val(1, i);
        if (!same_avg(ty, aout.data() + i * ty.size, sum) || (rank == 0 && !same_avg(ty, ain.data() + i * ty.size, sum)))
          throw std::runtime_error(std::string("avg ") + ty.name + " element " + std::to_string(i));
      }
      for (size_t i = 0; i < n / 2; ++i) {
        const size_t e = rank * (n / 2) + i;
        CHECK(same_avg(ty, ars.data() + i * ty.size, avg_val(0, e) + avg_val(1, e)));
      }
    }
    std::vector<uint8_t> b8(64, 3), o8(64, 0);
    for (ncclDataType_t t : {ncclInt8, ncclUint8, ncclFloat8e4m3, ncclFloat8e5m2})
      CHECK(ncclAllReduce(b8.data(), o8.data(), 64, t, ncclSum, c, nullptr) == ncclInvalidUsage);
    // Data movement of 1-byte types takes peerlink's send/recv plan: verified.
    std::vector<uint8_t> all(128, 0), mine(64);
    for (size_t i = 0; i < 64; ++i) mine[i] = static_cast<uint8_t>(rank * 100 + i);
    CHECK_NCCL(ncclAllGather(mine.data(), all.data(), 64, ncclUint8, c, nullptr));
    for (size_t i = 0; i < 128; ++i) CHECK(all[i] == static_cast<uint8_t>((i / 64) * 100 + i % 64));
    CHECK_NCCL(ncclCommDestroy(c));
  });
  EXPECT_EQ(err, "");
}

// nccl-tests -t 2 -g 1: one process; the main thread creates both communicators inside one group
// (ncclCommInitRank per rank), then two threads drive one communicator each, concurrently, with
// registered buffers (-R 1 and -R 2) and in-place send/recv (send source = receive destination).
TEST(NcclModes, ThreadsModeRegisteredInPlace) {
  std::string err = run_ranks(1, [&](int) {
    ncclUniqueId id = new_id();
    ncclComm_t c[2] = {nullptr, nullptr};
    CHECK_NCCL(ncclGroupStart());
    for (int i = 0; i < 2; ++i) CHECK_NCCL(ncclCommInitRank(&c[i], 2, id, i));
    CHECK_NCCL(ncclGroupEnd());
    std::vector<std::string> errors(2);
    std::vector<std::thread> ts;
    for (int k = 0; k < 2; ++k)
      ts.emplace_back([&, k] {
        try {
          const size_t n = 4096;
          std::vector<int32_t> buf(2 * n), out(2 * n);
          void* h[2] = {nullptr, nullptr};
          ncclWindow_t w = nullptr;
          CHECK_NCCL(ncclCommRegister(c[k], buf.data(), buf.size() * 4, &h[0]));
          CHECK_NCCL(ncclCommRegister(c[k], out.data(), out.size() * 4, &h[1]));
          CHECK_NCCL(ncclCommWindowRegister(c[k], out.data(), out.size() * 4, &w, NCCL_WIN_COLL_SYMMETRIC));
          for (int iter = 0; iter < 10; ++iter) {
            for (size_t i = 0; i < n; ++i) buf[i] = static_cast<int32_t>(k * 1000 + iter * 10 + i % 7);
            // In place: each sends its buffer to the other and receives into the same bytes.
            CHECK_NCCL(ncclGroupStart());
            CHECK_NCCL(ncclSend(buf.data(), n, ncclInt32, 1 - k, c[k], nullptr));
            CHECK_NCCL(ncclRecv(buf.data(), n, ncclInt32, 1 - k, c[k], nullptr));
            CHECK_NCCL(ncclGroupEnd());
            for (size_t i = 0; i < n; ++i) CHECK(buf[i] == static_cast<int32_t>((1 - k) * 1000 + iter * 10 + i % 7));
            CHECK_NCCL(ncclAllReduce(buf.data(), out.data(), n, ncclInt32, ncclSum, c[k], nullptr));
            for (size_t i = 0; i < n; ++i) CHECK(out[i] == static_cast<int32_t>(1000 + 2 * (iter * 10 + i % 7)));
            CHECK_NCCL(ncclAllGather(buf.data(), out.data(), n, ncclInt32, c[k], nullptr));
            CHECK(out[0] == 1000 + iter * 10 && out[n] == iter * 10);
            CHECK_NCCL(ncclBroadcast(buf.data(), out.data(), n, ncclInt32, 1, c[k], nullptr));
            CHECK(out[n - 1] == static_cast<int32_t>(iter * 10 + (n - 1) % 7));
            CHECK_NCCL(ncclAlltoAll(buf.data(), out.data(), n / 2, ncclInt32, c[k], nullptr));
            CHECK(out[0] == static_cast<int32_t>(1000 + iter * 10 + (k * n / 2) % 7));  // rank 0's block k
            CHECK_NCCL(ncclGather(buf.data(), out.data(), n, ncclInt32, 0, c[k], nullptr));
            if (k == 0) CHECK(out[n] == iter * 10);
            CHECK_NCCL(ncclScatter(out.data(), buf.data(), n, ncclInt32, 0, c[k], nullptr));
            if (k == 1) CHECK(buf[0] == iter * 10);
          }
          CHECK_NCCL(ncclCommWindowDeregister(c[k], w));
          for (void* x : h) CHECK_NCCL(ncclCommDeregister(c[k], x));
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errors) CHECK(e.empty() || (throw std::runtime_error(e), false));
    for (auto* cc : c) CHECK_NCCL(ncclCommDestroy(cc));
  });
  EXPECT_EQ(err, "");
}

// -o premulsum: nccl-tests creates the op, calls the collective and destroys the op, all inside
// one group. The op must still be known at ncclGroupEnd (it is forwarded to the real NCCL, which
// the host backend cannot use: the error must say so, not "invalid op").
TEST(NcclModes, PreMulSumDestroyedInsideGroup) {
  ncclUniqueId id = new_id();
  ncclComm_t c = nullptr;
  ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<float> a(64, 2.0f), b(64, 0.0f);
  float s = 3.0f;
  ncclRedOp_t op;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, op, c, nullptr), ncclSuccess);  // queued
  EXPECT_EQ(ncclRedOpDestroy(op, c), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("real NCCL"), std::string::npos) << ncclGetLastError(c);
  EXPECT_EQ(b[0], 0.0f);
  // Ids are reused once destroyed; a destroyed op is refused when called.
  ncclRedOp_t op2;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op2, &s, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
  EXPECT_EQ(op2, op);
  EXPECT_EQ(ncclRedOpDestroy(op2, c), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, op2, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// ncclCommShrink on a peerlink communicator: 3 ranks, rank 1 excluded (it does not call); the
// survivors renumber 0, 1 and their allreduce is verified. Bad lists are InvalidArgument.
TEST(NcclModes, ShrinkDropsExcludedRanks) {
  ncclUniqueId id = new_id();
  std::string err = run_ranks(3, [&](int rank) {
    ncclComm_t c = nullptr;
    CHECK_NCCL(ncclCommInitRank(&c, 3, id, rank));
    int excl = 1;
    if (rank != 1) {
      ncclComm_t s = nullptr;
      int self = rank;
      CHECK(ncclCommShrink(c, &self, 1, &s, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
      CHECK(ncclCommShrink(c, &excl, 1, &s, nullptr, 7) == ncclInvalidArgument);  // flags
      int out_of_range = 3;
      CHECK(ncclCommShrink(c, &out_of_range, 1, &s, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
      CHECK_NCCL(ncclCommShrink(c, &excl, 1, &s, nullptr, NCCL_SHRINK_DEFAULT));
      int n = 0, r = -1;
      CHECK_NCCL(ncclCommCount(s, &n));
      CHECK_NCCL(ncclCommUserRank(s, &r));
      CHECK(n == 2 && r == (rank == 0 ? 0 : 1));
      std::vector<double> v(257, rank + 0.5), o(257, 0.0);
      CHECK_NCCL(ncclAllReduce(v.data(), o.data(), v.size(), ncclFloat64, ncclSum, s, nullptr));
      CHECK(o[256] == 3.0);  // 0.5 + 2.5: rank 1 took no part
      CHECK_NCCL(ncclCommDestroy(s));
    }
    // Every rank meets again on the parent before tearing it down.
    std::vector<int> x(4, rank), y(4, 0);
    CHECK_NCCL(ncclAllReduce(x.data(), y.data(), 4, ncclInt32, ncclSum, c, nullptr));
    CHECK(y[3] == 3);
    CHECK_NCCL(ncclCommDestroy(c));
  });
  EXPECT_EQ(err, "");
}

TEST(NcclModes, ErrorCodes) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
  ncclUniqueId id = new_id();
  ncclComm_t c = nullptr;
  ASSERT_EQ(ncclCommInitRank(&c, 1, id, 0), ncclSuccess) << ncclGetLastError(nullptr);
  std::vector<float> a(8, 1.0f);
  EXPECT_EQ(ncclSend(nullptr, 8, ncclFloat, 0, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRecv(a.data(), 8, static_cast<ncclDataType_t>(ncclNumTypes), 0, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(a.data(), nullptr, 8, ncclFloat, ncclSum, 0, c, nullptr), ncclInvalidArgument);  // root's recvbuff
  EXPECT_EQ(ncclGather(a.data(), a.data(), 8, ncclFloat, 1, c, nullptr), ncclInvalidArgument);           // root range
  EXPECT_EQ(ncclCommShrink(c, nullptr, 1, &c, nullptr, NCCL_SHRINK_DEFAULT), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(static_cast<ncclRedOp_t>(ncclNumOps + 5), c), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclInvalidArgument);
}
