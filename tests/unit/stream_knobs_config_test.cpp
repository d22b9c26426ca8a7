// The stream-ordered engine's performance knobs (Options::stream_ll_max, stream_ce_min,
// stream_ce_lanes, stream_acquire_load): read from PEERLINK_STREAM_*, held to their ranges by
// validate(), bad values named with their variable.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <string>
#include <vector>

#include "peerlink/errors.h"
#include "peerlink/options.h"
#include "stream/stream_layout.h"

using namespace peerlink;

namespace {

struct EnvScope {
  std::vector<std::string> names;
  void set(const char* n, const char* v) {
    setenv(n, v, 1);
    names.push_back(n);
  }
  ~EnvScope() {
    for (auto& n : names) unsetenv(n.c_str());
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StreamKnobsConfig, FromEnv) {
  EnvScope env;
  env.set("PEERLINK_STREAM_LL_MAX", "131072");
  env.set("PEERLINK_STREAM_CE_MIN", "33554432");
  env.set("PEERLINK_STREAM_CE_LANES", "3");
  env.set("PEERLINK_STREAM_ACQUIRE_LOAD", "0");
  env.set("PEERLINK_STREAM_DIRECT_MIN", "4194304");
  env.set("PEERLINK_STREAM_DIRECT_IPC_MIN", "0");
  Options o = Options::from_env();
  EXPECT_EQ(o.stream_direct_min, size_t(4) << 20);
  EXPECT_EQ(o.stream_direct_ipc_min, size_t(0));
  EXPECT_EQ(o.stream_ll_max, size_t(128) << 10);
  EXPECT_EQ(o.stream_ce_min, size_t(32) << 20);
  EXPECT_EQ(o.stream_ce_lanes, 3);
  EXPECT_FALSE(o.stream_acquire_load);
}

TEST(StreamKnobsConfig, Defaults) {
  Options o;
  EXPECT_EQ(o.stream_ll_max, size_t(512) << 10);  // multi-block LL, measured on 2x H100
  EXPECT_EQ(o.stream_ce_min, size_t(128) << 20);  // copy engine from 128 MB, one lane
  EXPECT_EQ(o.stream_ce_lanes, 1);
  EXPECT_TRUE(o.stream_acquire_load);
  EXPECT_EQ(o.stream_direct_min, size_t(16) << 20);  // in-process zero-copy NCCL form from 16 MB (2x H200)
  EXPECT_EQ(o.stream_direct_ipc_min, size_t(16) << 20);  // between processes from 16 MB
  EXPECT_NO_THROW(o.validate());
}

TEST(StreamKnobsConfig, BadValuesNamed) {
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {{"PEERLINK_STREAM_LL_MAX", "524289"},
               {"PEERLINK_STREAM_LL_MAX", "-8"},
               {"PEERLINK_STREAM_CE_MIN", "12x"},
               {"PEERLINK_STREAM_CE_LANES", "0"},
               {"PEERLINK_STREAM_CE_LANES", "5"},
               {"PEERLINK_STREAM_ACQUIRE_LOAD", "sometimes"},
               {"PEERLINK_STREAM_DIRECT_MIN", "1M"},
               {"PEERLINK_STREAM_DIRECT_IPC_MIN", "-1"}};
  for (const Case& c : cases) {
    EnvScope env;
    env.set(c.var, c.value);
    std::string what = error_of([] { Options::from_env(); });
    EXPECT_NE(what.find(c.var), std::string::npos) << "'" << what << "'";
    EXPECT_NE(what.find(c.value), std::string::npos) << "'" << what << "'";
  }
  auto bad = [](const std::function<void(Options&)>& set, const char* needle) {
    Options o;
    set(o);
    std::string what = error_of([&] { o.validate(); });
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << what << "' lacks '" << needle << "'";
  };
  bad([](Options& o) { o.stream_ll_max = (size_t(512) << 10) + 1; }, "stream_ll_max");
  bad([](Options& o) { o.stream_ce_lanes = 0; }, "stream_ce_lanes");
  bad([](Options& o) { o.stream_ce_min = (size_t(1) << 40) + 1; }, "stream_ce_min");
  bad([](Options& o) { o.stream_direct_min = (size_t(1) << 40) + 1; }, "stream_direct_min");
  bad([](Options& o) { o.stream_direct_ipc_min = (size_t(1) << 40) + 1; }, "stream_direct_ipc_min");
}

// The NCCL-form chunking both sides derive from a message's length (stream_layout.h raw_piece):
// LL pieces (4 KB for 8-128 KB, else 8 KB) up to ll_max, half slots up to kHalfChunkMax, whole slots above.
TEST(StreamKnobsConfig, RawPieceByLength) {
  const uint64_t slot = 128 << 10, ll = 256 << 10;
  EXPECT_EQ(stream::raw_piece(1, slot, ll), stream::kLLPiece);
  EXPECT_EQ(stream::raw_piece(stream::kLLPiece, slot, ll), stream::kLLPiece);  // one piece up to 8 KB
  EXPECT_EQ(stream::raw_piece(stream::kLLPiece + 1, slot, ll), stream::kLLSmallPiece);
  EXPECT_EQ(stream::raw_piece(stream::kLLSmallPieceMax, slot, ll), stream::kLLSmallPiece);
  EXPECT_EQ(stream::raw_piece(stream::kLLSmallPieceMax + 1, slot, ll), stream::kLLPiece);
  EXPECT_EQ(stream::raw_piece(ll, slot, ll), stream::kLLPiece);
  EXPECT_EQ(stream::raw_piece(ll + 1, slot, ll), slot / 2);
  EXPECT_EQ(stream::raw_piece(stream::kHalfChunkMax, slot, ll), slot / 2);
  EXPECT_EQ(stream::raw_piece(stream::kHalfChunkMax + 1, slot, ll), slot);
  EXPECT_EQ(stream::raw_piece(8, slot, 0), slot / 2);  // LL off: staged from the first byte
}

// raw_chunks is the one chunk count of kernels, block assignment and gates: ceil(len / piece) with a
// shift, one empty chunk for len 0; checked against a plain division over every piece boundary.
TEST(StreamKnobsConfig, RawChunksMatchesDivision) {
  const uint64_t slot = 128 << 10;
  for (uint64_t ll : {uint64_t(0), uint64_t(256) << 10, uint64_t(512) << 10}) {
    EXPECT_EQ(stream::raw_chunks(0, slot, ll), 1u);
    for (uint64_t base : {uint64_t(1), stream::kLLPiece, stream::kLLSmallPieceMax, ll, stream::kHalfChunkMax,
                          uint64_t(1) << 30}) {
      for (uint64_t len = base > 3 ? base - 3 : 1; len <= base + 3; ++len) {
        const uint64_t piece = stream::raw_piece(len, slot, ll);
        EXPECT_EQ(stream::raw_chunks(len, slot, ll), (len + piece - 1) / piece) << "len " << len << " ll_max " << ll;
      }
    }
  }
  EXPECT_EQ(stream::raw_chunks(128 << 10, slot, 256 << 10), 32u);  // 4 KB LL pieces
  EXPECT_EQ(stream::raw_chunks(1 << 20, slot, 256 << 10), 16u);    // half slots
  EXPECT_EQ(stream::raw_chunks(8 << 20, slot, 256 << 10), 64u);    // whole slots
}
