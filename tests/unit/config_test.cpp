// Options (config/): every knob from the environment, one validate() for values from code too, and
// nothing cached between communicators (issue 11.2).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "peerlink/communicator.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

using namespace peerlink;

namespace {

// Sets variables for one scope, then removes them.
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

TEST(Config, AllreduceKnobsAreOptionsFields) {
  Options d;
  EXPECT_EQ(d.allreduce_scratch_bytes, 0u);
  EXPECT_EQ(d.allreduce_threads, 0);
  EXPECT_EQ(d.allreduce_blocks, 0);
  EXPECT_EQ(d.allreduce_ll_max, size_t(512) << 10);
  EXPECT_EQ(d.allreduce_ll128_max, size_t(4) << 20);
  EXPECT_EQ(d.allreduce_pdl, -1);
  EXPECT_FALSE(d.allreduce_oneshot_generic);
  EnvScope env;
  env.set("PEERLINK_ALLREDUCE_SCRATCH_BYTES", "4096");
  env.set("PEERLINK_ALLREDUCE_THREADS", "256");
  env.set("PEERLINK_ALLREDUCE_BLOCKS", "64");
  env.set("PEERLINK_ALLREDUCE_LL_MAX", "1024");
  env.set("PEERLINK_ALLREDUCE_LL128_MAX", "0");
  env.set("PEERLINK_ALLREDUCE_PDL", "0");
  env.set("PEERLINK_ALLREDUCE_ONESHOT_GENERIC", "1");
  env.set("PEERLINK_ALLREDUCE_ALGO", "TwoShot");
  env.set("PEERLINK_STREAM_THREADS", "256");
  Options o = Options::from_env();
  EXPECT_EQ(o.stream_threads, 256);
  EXPECT_EQ(o.allreduce_scratch_bytes, 4096u);
  EXPECT_EQ(o.allreduce_threads, 256);
  EXPECT_EQ(o.allreduce_blocks, 64);
  EXPECT_EQ(o.allreduce_ll_max, 1024u);
  EXPECT_EQ(o.allreduce_ll128_max, 0u);
  EXPECT_EQ(o.allreduce_pdl, 0);
  EXPECT_TRUE(o.allreduce_oneshot_generic);
  EXPECT_EQ(parse_allreduce_algo(o.allreduce_algo), AllreduceAlgo::TwoShot);
}

TEST(Config, FromEnvNamesTheVariableAndValue) {
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {{"PEERLINK_ALLREDUCE_BLOCKS", "161"},  {"PEERLINK_ALLREDUCE_THREADS", "-1"},
               {"PEERLINK_ALLREDUCE_SCRATCH_BYTES", "8"}, {"PEERLINK_ALLREDUCE_LL_MAX", "1e3"},
               {"PEERLINK_ALLREDUCE_LL128_MAX", "67108865"},
               {"PEERLINK_ALLREDUCE_PDL", "maybe"},   {"PEERLINK_ALLREDUCE_ALGO", "fastest"},
               {"PEERLINK_RELAY_SLOTS", "1"},         {"PEERLINK_TIMEOUT_MS", "99999999999999999999"},
               {"PEERLINK_P2P_LEVEL", "PCIE"},        {"PEERLINK_DEBUG", "loud"},
               {"PEERLINK_STREAM_THREADS", "100"},    {"PEERLINK_STREAM_THREADS", "1024"}};
  for (const Case& c : cases) {
    EnvScope env;
    env.set(c.var, c.value);
    std::string what = error_of([] { Options::from_env(); });
    EXPECT_NE(what.find(c.value), std::string::npos) << c.var << ": '" << what << "'";
  }
}

TEST(Config, ValidateHoldsValuesFromCodeToTheSameRules) {
  auto bad = [](const std::function<void(Options&)>& set, const char* needle) {
    Options o;
    set(o);
    std::string what = error_of([&] { o.validate(); });
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << what << "' lacks '" << needle << "'";
  };
  bad([](Options& o) { o.timeout = std::chrono::milliseconds(0); }, "timeout");
  bad([](Options& o) { o.relay_slots = 1; }, "relay_slots");
  bad([](Options& o) { o.relay_chunk_bytes = 100; }, "relay_chunk_bytes");
  bad([](Options& o) { o.stripe_streams = 0; }, "stripe_streams");
  bad([](Options& o) { o.allreduce_blocks = kMaxAllreduceBlocks + 1; }, "allreduce_blocks");
  bad([](Options& o) { o.allreduce_threads = 4096; }, "allreduce_threads");
  bad([](Options& o) { o.stream_threads = 48; }, "stream_threads");
  bad([](Options& o) { o.stream_threads = 544; }, "stream_threads");
  bad([](Options& o) { o.allreduce_scratch_bytes = 8; }, "allreduce_scratch_bytes");
  bad([](Options& o) { o.allreduce_pdl = 2; }, "allreduce_pdl");
  bad([](Options& o) { o.allreduce_ll128_max = size_t(1) << 27; }, "allreduce_ll128_max");
  bad([](Options& o) { o.allreduce_algo = "quick"; }, "quick");
  bad([](Options& o) { o.p2p_level = "PCIE"; }, "PCIE");
  Options ok;
  ok.p2p_level = "nvl";
  ok.allreduce_algo = "bandwidth";
  EXPECT_NO_THROW(ok.validate());
  for (const char* zc : {"zero_copy", "ZC", "zero-copy", "zerocopy"}) {
    EXPECT_EQ(parse_allreduce_algo(zc), AllreduceAlgo::ZeroCopy) << zc;
    ok.allreduce_algo = zc;
    EXPECT_NO_THROW(ok.validate()) << zc;
  }
  EXPECT_STREQ(to_string(AllreduceAlgo::ZeroCopy), "zero_copy");
}

// Options::max_blocks: PEERLINK_MAX_BLOCKS strictly (a bad value names itself), else NCCL's own
// NCCL_MAX_CTAS as NCCL reads it (clamped; text that is no integer ignored), so that a program that
// runs on NCCL never fails here.
TEST(Config, MaxBlocksFromPeerlinkOrNcclVariable) {
  EXPECT_EQ(Options().max_blocks, 0);
  {
    EnvScope env;
    env.set("PEERLINK_MAX_BLOCKS", "12");
    env.set("NCCL_MAX_CTAS", "4");
    EXPECT_EQ(Options::from_env().max_blocks, 12);
  }
  struct Case {
    const char* value;
    int want;
  } nccl[] = {{"4", 4}, {"1000", kMaxAllreduceBlocks}, {"0", 0}, {"-3", 0}, {"many", 0}};
  for (const Case& c : nccl) {
    EnvScope env;
    env.set("NCCL_MAX_CTAS", c.value);
    EXPECT_EQ(Options::from_env().max_blocks, c.want) << c.value;
  }
  for (const char* v : {"161", "-1", "eight"}) {
    EnvScope env;
    env.set("PEERLINK_MAX_BLOCKS", v);
    std::string what = error_of([] { Options::from_env(); });
    EXPECT_NE(what.find(std::string("PEERLINK_MAX_BLOCKS='") + v), std::string::npos) << what;
  }
  Options o;
  o.max_blocks = kMaxAllreduceBlocks + 1;
  EXPECT_NE(error_of([&] { o.validate(); }).find("max_blocks"), std::string::npos);
}

// The Communicator runs the same validate() before any rendezvous (nothing is created).
TEST(Config, CommunicatorRejectsInvalidOptionsFirst) {
  Options o;
  o.relay_slots = 65;
  std::string what = error_of([&] { Communicator c("cfg-reject", 0, 2, kHostDevice, o); });
  EXPECT_NE(what.find("relay_slots 65"), std::string::npos) << what;
}

// Options are read per call of from_env(): nothing is cached in statics.
TEST(Config, NothingCachedBetweenReads) {
  EnvScope env;
  env.set("PEERLINK_ALLREDUCE_BLOCKS", "8");
  EXPECT_EQ(Options::from_env().allreduce_blocks, 8);
  env.set("PEERLINK_ALLREDUCE_BLOCKS", "16");
  EXPECT_EQ(Options::from_env().allreduce_blocks, 16);
  unsetenv("PEERLINK_ALLREDUCE_BLOCKS");
  EXPECT_EQ(Options::from_env().allreduce_blocks, 0);
}
