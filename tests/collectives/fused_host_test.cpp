// The fused allreduce + residual add + RMSNorm (peerlink/fused.h) on the host backend, one process
// per rank: 1-4 ranks, bf16 / f16 / f32, tokens 1-1000, hidden 1024, 4096, 5128 and 8192, weight_bias
// 0 and 1, in place and out of place, the FP8 form (with and without norm_out), both data flows
// (auto switches at 64 KB; forced by Options::fused_algo) and steps of a few rows (small scratch);
// checks in fused_harness.h, every case's outputs compared bitwise across ranks. Bad arguments:
// InvalidArgument naming the values, nothing written, the communicator still usable.
#include <gtest/gtest.h>

#include <vector>

#include "fused_harness.h"
#include "support/mp.h"

namespace {

using namespace pltest;
using namespace pltest::coll;
using peerlink::Communicator;
using peerlink::Options;

Options opts(const char* algo, size_t scratch = 0) {
  Options o = Options::from_env();
  o.fused_algo = peerlink::parse_allreduce_algo(algo);
  o.allreduce_scratch_bytes = scratch;
  o.timeout = std::chrono::milliseconds(30000);
  return o;
}

// Every (tokens, hidden, dtype) of the lists; weight_bias, in place and the FP8 form vary by case.
std::vector<FusedCase> matrix(const std::vector<size_t>& tokens, const std::vector<size_t>& hiddens,
                              const std::vector<DataType>& types, uint64_t seed) {
  std::vector<FusedCase> out;
  for (DataType t : types)
    for (size_t h : hiddens)
      for (size_t n : tokens) {
        FusedCase c;
        c.t = t;
        c.tokens = n;
        c.hidden = h;
        const size_t i = out.size();
        c.weight_bias = i % 2 ? 1.f : 0.f;
        c.in_place = i % 3 == 1;
        c.fp8 = i % 4 >= 2;
        c.seed = seed + i;
        out.push_back(c);
      }
  return out;
}

void sweep(int world, const char* algo, const std::vector<FusedCase>& cases, size_t scratch = 0) {
  const std::string uid = unique_test_id(std::string("fu-") + algo);
  HashTable hashes(world, int(cases.size()));
  std::string fail = run_ranks(world, [&](int rank) {
    Communicator comm(uid, rank, world, peerlink::kHostDevice, opts(algo, scratch));
    Mem mem;
    for (size_t i = 0; i < cases.size(); ++i) hashes.put(rank, int(i), run_fused_case(comm, mem, cases[i]));
  }, std::chrono::milliseconds(300000));
  EXPECT_EQ(fail, "");
  EXPECT_EQ(hashes.mismatch(int(cases.size())), "");
  EXPECT_TRUE(leftover_segments(uid).empty());
}

const std::vector<DataType> kAllTypes = {DataType::BF16, DataType::F16, DataType::F32};

TEST(FusedHost, TwoRanksAuto) {
  sweep(2, "", matrix({1, 7, 128}, {1024, 4096, 5128, 8192}, {DataType::BF16}, 100));
  sweep(2, "", matrix({1, 7}, {1024, 5128}, {DataType::F16, DataType::F32}, 200));
}
// 1000 tokens of 8192: 16 MB per buffer, the two-shot flow in steps of 128 rows (1 MB positions).
TEST(FusedHost, TwoRanksManyTokens) { sweep(2, "", matrix({1000}, {8192}, {DataType::BF16}, 300)); }
TEST(FusedHost, ThreeRanksOneShot) { sweep(3, "oneshot", matrix({1, 7, 128}, {1024, 5128}, kAllTypes, 400)); }
TEST(FusedHost, ThreeRanksTwoShot) { sweep(3, "twoshot", matrix({1, 7, 128}, {1024, 5128}, kAllTypes, 500)); }
TEST(FusedHost, FourRanksAuto) { sweep(4, "", matrix({1, 7, 128}, {1024, 8192}, {DataType::BF16, DataType::F32}, 600)); }
// Steps of 2 rows (4 KB positions, rows of 2 KB): one-shot and two-shot over many steps, shards
// shorter than the grid and empty ones (7 rows on 4 ranks: 2, 2, 2, 1; 1 row: one shard).
TEST(FusedHost, ManySteps) {
  for (const char* algo : {"oneshot", "twoshot"}) {
    sweep(2, algo, matrix({1, 7, 33}, {1024}, {DataType::BF16}, 700), 4096);
    sweep(4, algo, matrix({1, 7, 33}, {1024}, {DataType::F16}, 800), 4096);
  }
}
// One rank: the epilogue alone (add_rmsnorm), through the communicator and directly.
TEST(FusedHost, OneRank) {
  sweep(1, "", matrix({1, 7, 128}, {1024, 5128}, kAllTypes, 900));
  FusedCase c;
  c.tokens = 7;
  c.hidden = 4096;
  c.weight_bias = 1.f;
  const size_t count = c.tokens * c.hidden, bytes = count * 2;
  auto in = fused_values(c.t, count, c.seed, 0), res = fused_values(c.t, count, c.seed, -1),
       w = fused_values(c.t, c.hidden, c.seed, -2);
  std::vector<unsigned char> norm(bytes), rout(bytes), q;
  peerlink::add_rmsnorm(peerlink::kHostDevice, in.data(), res.data(), w.data(), norm.data(), rout.data(), c.tokens,
                        c.hidden, c.t, kFusedEps, c.weight_bias);
  EXPECT_NO_THROW(check_fused(c, 1, norm, rout, q, "add_rmsnorm"));
  peerlink::add_rmsnorm(peerlink::kHostDevice, in.data(), res.data(), w.data(), in.data(), res.data(), c.tokens,
                        c.hidden, c.t, kFusedEps, c.weight_bias);  // in place
  EXPECT_EQ(in, norm);
  EXPECT_EQ(res, rout);
}

// Bad arguments on 2 ranks: InvalidArgument naming the values, nothing written; then a good call.
TEST(FusedHost, BadArgumentsAreInvalidArgumentAndWriteNothing) {
  const std::string uid = unique_test_id("fu-bad");
  std::string fail = run_ranks(2, [&](int rank) {
    Communicator comm(uid, rank, 2, peerlink::kHostDevice, opts("", 4096));
    const size_t h = 1024, n = 4, count = n * h;
    alignas(16) static uint16_t in[count + 8], res[count + 8], w[h + 8], norm[count + 8], rout[count + 8];
    alignas(16) static uint8_t q[count + 16];
    for (size_t i = 0; i < count + 8; ++i) in[i] = res[i] = uint16_t(0x3f80 + (i % 7));  // bf16 1.0..
    for (size_t i = 0; i < h + 8; ++i) w[i] = 0x3f80;
    std::fill(std::begin(norm), std::end(norm), 0xEEEE);
    std::fill(std::begin(rout), std::end(rout), 0xEEEE);
    std::fill(std::begin(q), std::end(q), 0xEE);
    const float scale = 1.f;
    using peerlink::InvalidArgument;
    const auto B = DataType::BF16;
    auto ar = [&](const void* i, const void* r, const void* wt, void* no, void* ro, size_t t, size_t hid, DataType d,
                  float eps = 1e-6f) { peerlink::allreduce_add_rmsnorm(comm, i, r, wt, no, ro, t, hid, d, eps); };
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, n, 1020, B), InvalidArgument, "hidden 1020", "multiple of 8");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, n, 1022, DataType::F32), InvalidArgument, "hidden 1022", "multiple of 4");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, n, h, DataType::F64), InvalidArgument, "dtype f64");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, n, h, DataType::I32), InvalidArgument, "dtype i32");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, 1, 16392, B), InvalidArgument, "hidden 16392", "16384");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, 1, 8200, DataType::F32), InvalidArgument, "hidden 8200", "8192");
    MP_CHECK_THROWS(ar(in, res, nullptr, norm, rout, n, h, B), InvalidArgument, "weight is null");
    MP_CHECK_THROWS(ar(in, nullptr, w, norm, rout, n, h, B), InvalidArgument, "residual_in is null");
    MP_CHECK_THROWS(ar(in, res, w, nullptr, rout, n, h, B), InvalidArgument, "norm_out is null");
    MP_CHECK_THROWS(ar(in + 1, res, w, norm, rout, n, h, B), InvalidArgument, "input", "not 16-byte aligned");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout + 4, n, h, B), InvalidArgument, "residual_out", "not 16-byte aligned");
    MP_CHECK_THROWS(ar(in, res, w, norm, rout, n, h, B, -1.f), InvalidArgument, "eps -1");
    MP_CHECK_THROWS(ar(in, res, w, norm, norm + 8, n, h, B), InvalidArgument, "norm_out", "residual_out", "overlap");
    MP_CHECK_THROWS(ar(in, res, w, in + 8, rout, n, h, B), InvalidArgument, "norm_out", "input", "overlap");
    MP_CHECK_THROWS(ar(in, res, w, res, rout, n, h, B), InvalidArgument, "norm_out", "residual_in", "overlap");
    MP_CHECK_THROWS(ar(in, res, w, w, rout, 1, h, B), InvalidArgument, "norm_out", "weight", "overlap");
    // A row of 2 KB does not fit 1 KB positions; this communicator's are 4 KB: 4096 bf16 are 8 KB.
    alignas(16) static uint16_t big_in[4096 * 2], big_res[4096 * 2], big_w[4096], big_norm[4096 * 2], big_rout[4096 * 2];
    MP_CHECK_THROWS(ar(big_in, big_res, big_w, big_norm, big_rout, 1, 4096, B), InvalidArgument, "8192 bytes",
                    "scratch position of 4096 bytes");
    auto fp8 = [&](void* qo, const float* s) {
      peerlink::allreduce_add_rmsnorm_fp8(comm, in, res, w, norm, rout, qo, s, n, h, B, 1e-6f);
    };
    MP_CHECK_THROWS(fp8(q, nullptr), InvalidArgument, "scale is null");
    MP_CHECK_THROWS(fp8(nullptr, &scale), InvalidArgument, "quant_out is null");
    MP_CHECK_THROWS(fp8(reinterpret_cast<uint8_t*>(rout) + 16, &scale), InvalidArgument, "quant_out", "overlap");
    for (size_t i = 0; i < count + 8; ++i)
      MP_CHECK_MSG(norm[i] == 0xEEEE && rout[i] == 0xEEEE, "element " << i << " was written by a refused call");
    for (size_t i = 0; i < count + 16; ++i) MP_CHECK_MSG(q[i] == 0xEE, "quant byte " << i << " was written");
    // tokens 0 writes nothing; the communicator still works.
    ar(in, res, w, norm, rout, 0, h, B);
    MP_CHECK(norm[0] == 0xEEEE);
    ar(in, res, w, norm, rout, n, h, B);
    MP_CHECK_MSG(rout[0] == 0x4040, "residual_out[0] is 0x" << std::hex << rout[0] << ", want 3.0 (0x4040)");
  });
  EXPECT_EQ(fail, "");
}

}  // namespace
