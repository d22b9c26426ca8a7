// The fused epilogue's shared pieces: the e4m3 conversion (against every code enumerated), the
// per-call geometry (threads, slots, LL128 passes, shards) and Options::fused_algo.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "collectives/fused_harness.h"
#include "collectives/fused_math.h"
#include "collectives/fused_plan.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace pc = peerlink::coll;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(FusedMath, E4m3MatchesTheNearestCode) {
  // Every bf16 value (every exponent, sign, NaN and infinity), then random f32 bit patterns.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float x = from_bits(b << 16);
    ASSERT_EQ(pc::f32_to_e4m3(x), pltest::coll::e4m3_reference(x)) << "x = " << x << " (bits 0x" << std::hex << (b << 16) << ")";
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    const float x = from_bits(u);
    ASSERT_EQ(pc::f32_to_e4m3(x), pltest::coll::e4m3_reference(x)) << "x = " << x << " (bits 0x" << std::hex << u << ")";
  }
  // Values near the codes: the midpoints (ties to even) and one f32 ulp either side.
  for (int c = 0; c < 0x7e; ++c) {
    const double mid = (pltest::coll::e4m3_value(c) + pltest::coll::e4m3_value(c + 1)) / 2;
    for (float x : {float(mid), std::nextafter(float(mid), 0.f), std::nextafter(float(mid), 1e9f)}) {
      EXPECT_EQ(pc::f32_to_e4m3(x), pltest::coll::e4m3_reference(x)) << "x = " << x;
      EXPECT_EQ(pc::f32_to_e4m3(-x), pltest::coll::e4m3_reference(-x)) << "x = " << -x;
    }
  }
  EXPECT_EQ(pc::f32_to_e4m3(448.f), 0x7e);
  EXPECT_EQ(pc::f32_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(pc::f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(pc::f32_to_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(pc::f32_to_e4m3(1.f), 0x38);
  EXPECT_EQ(pc::f32_to_e4m3(std::ldexp(1.f, -9)), 0x01);  // the smallest subnormal
  EXPECT_EQ(pc::f32_to_e4m3(std::ldexp(1.f, -10)), 0x00);  // half of it: ties to even (0)
  EXPECT_EQ(pc::f32_to_e4m3(-0.f), 0x80);
}

TEST(FusedPlan, UnitGeometryCoversTheRowInAtMostFourSlots) {
  for (size_t units : {1ul, 63ul, 64ul, 128ul, 512ul, 513ul, 641ul, 1024ul, 1282ul, 2048ul}) {
    const pc::FusedGeometry g = pc::fused_unit_geometry(units);
    EXPECT_EQ(g.threads % 64, 0) << units;
    EXPECT_LE(g.threads, pc::kFusedThreadsMax) << units;
    EXPECT_GE(size_t(g.threads) * size_t(g.slots), units) << units;
    EXPECT_LT(size_t(g.threads) * size_t(g.slots - 1), units) << units;
    EXPECT_LE(g.slots, pc::kFusedSlots) << units;
  }
  EXPECT_EQ(pc::fused_unit_geometry(1024).threads, 512);  // hidden 8192 bf16: 512 threads, 2 units each
  EXPECT_EQ(pc::fused_unit_geometry(1024).slots, 2);
  EXPECT_EQ(pc::fused_unit_geometry(128).threads, 128);  // hidden 1024 bf16: one unit each
}

TEST(FusedPlan, Ll128GeometryCoversTheRowOrSaysItCannot) {
  for (size_t row_bytes = 16; row_bytes <= peerlink::kFusedMaxRowBytes; row_bytes += 16) {
    const pc::FusedGeometry g = pc::fused_ll128_geometry(row_bytes);
    const size_t lines = pc::fused_ll128_lines_per_row(row_bytes);
    EXPECT_GE(lines * pc::kLl128Words * 8, row_bytes);
    if (g.slots == 0) {
      EXPECT_GT(row_bytes, size_t(30720)) << "a row LL128 could carry in 4 passes of 16 warps";
      continue;
    }
    EXPECT_EQ(g.threads % 32, 0);
    EXPECT_LE(g.threads, pc::kFusedThreadsMax);
    EXPECT_GE(size_t(g.slots) * size_t(g.threads / 32) * pc::kFusedLl128LinesPerStore, lines) << row_bytes;
  }
  EXPECT_EQ(pc::fused_ll128_geometry(16384).slots, 3);  // hidden 8192 bf16: 137 lines, 16 warps, 3 passes
}

TEST(FusedPlan, ShardsCutEveryStepIntoConsecutiveRanges) {
  for (size_t len : {0ul, 1ul, 2ul, 7ul, 8ul, 33ul, 1000ul})
    for (int world : {2, 3, 4, 8}) {
      size_t next = 0;
      for (int q = 0; q < world; ++q) {
        const pc::RowRange r = pc::fused_shard(len, world, q);
        EXPECT_EQ(r.lo, std::min(next, len)) << len << " " << world << " " << q;
        EXPECT_LE(r.n, (len + world - 1) / world);
        next = r.lo + r.n;
      }
      EXPECT_EQ(next, len);
    }
}

TEST(FusedPlan, FusedAlgoIsAnOptionsField) {
  using peerlink::AllreduceAlgo;
  peerlink::Options o;
  EXPECT_EQ(o.fused_algo, AllreduceAlgo::Auto);
  for (AllreduceAlgo ok : {AllreduceAlgo::Auto, AllreduceAlgo::OneShot, AllreduceAlgo::TwoShot}) {
    o.fused_algo = ok;
    EXPECT_NO_THROW(o.validate()) << peerlink::to_string(ok);
  }
  for (AllreduceAlgo bad : {AllreduceAlgo::Bandwidth, AllreduceAlgo::ZeroCopy}) {
    o.fused_algo = bad;
    try {
      o.validate();
      ADD_FAILURE() << peerlink::to_string(bad) << " was accepted";
    } catch (const peerlink::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("PEERLINK_FUSED_ALGO"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"bandwidth", "zero_copy", "fastest"}) {
    setenv("PEERLINK_FUSED_ALGO", bad, 1);
    try {
      peerlink::Options::from_env();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const peerlink::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("PEERLINK_FUSED_ALGO='") + bad), std::string::npos) << e.what();
    }
  }
  setenv("PEERLINK_FUSED_ALGO", "TWOSHOT", 1);
  EXPECT_EQ(peerlink::Options::from_env().fused_algo, AllreduceAlgo::TwoShot);
  unsetenv("PEERLINK_FUSED_ALGO");
}
