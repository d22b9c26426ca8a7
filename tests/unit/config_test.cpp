// Options (config/): every knob from the environment through the one registry, one validate() for
// values from code too, and nothing cached between communicators.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "config/knobs.h"
#include "config/test_hooks.h"
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
  EXPECT_FALSE(detail::test_hooks(d).allreduce_oneshot_generic);
  EXPECT_EQ(d.test_hooks, nullptr);
  EXPECT_EQ(d.allreduce_algo, AllreduceAlgo::Auto);
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
  EXPECT_TRUE(detail::test_hooks(o).allreduce_oneshot_generic);
  EXPECT_EQ(o.allreduce_algo, AllreduceAlgo::TwoShot);
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
  bad([](Options& o) { o.allreduce_algo = static_cast<AllreduceAlgo>(9); }, "allreduce_algo 9");
  bad([](Options& o) { o.completion = static_cast<Completion>(7); }, "PEERLINK_COMPLETION");
  bad([](Options& o) { o.log_level = static_cast<LogLevel>(-2); }, "log_level");
  bad([](Options& o) { o.fd_passing = static_cast<DescriptorPassing>(3); }, "fd_passing");
  bad([](Options& o) { o.p2p_level = "PCIE"; }, "PCIE");
  bad([](Options& o) { o.coll_ce_chunk_bytes = 63; }, "coll_ce_chunk_bytes 63 is below 64");
  Options ok;
  ok.p2p_level = "nvl";
  ok.allreduce_algo = AllreduceAlgo::Bandwidth;
  EXPECT_NO_THROW(ok.validate());
  for (const char* zc : {"zero_copy", "ZC", "zero-copy", "zerocopy"})
    EXPECT_EQ(parse_allreduce_algo(zc), AllreduceAlgo::ZeroCopy) << zc;
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

// The registry: one row per variable and per field, each default valid, and the docs listing every
// user and tuning knob but no test switch.
TEST(Config, RegistryRowsAreDistinctAndDocumented) {
  std::set<std::string> vars, fields;
  const std::string md = config::render_configuration_markdown();
  const Options defaults;
  const detail::TestHooks hooks;
  for (const auto& k : config::knobs()) {
    EXPECT_TRUE(vars.insert(k->var).second) << "two rows read " << k->var;
    if (k->alias) {
      EXPECT_TRUE(vars.insert(k->alias).second) << "two rows read " << k->alias;
    }
    EXPECT_TRUE(fields.insert(k->field).second) << "two rows set " << k->field;
    EXPECT_NO_THROW(k->check(config::ConstSettings{defaults, hooks})) << k->var;
    EXPECT_FALSE(std::string(k->doc).empty()) << k->var;
    const bool listed = md.find(std::string("`") + k->var + "`") != std::string::npos;
    EXPECT_EQ(listed, k->audience != config::Audience::Test) << k->var;
  }
  EXPECT_GE(vars.size(), 50u);
  EXPECT_LT(md.find("`PEERLINK_TIMEOUT_MS`"), md.find("## Advanced"));  // user knobs first
  EXPECT_GT(md.find("`PEERLINK_RELAY_SLOTS`"), md.find("## Advanced"));
}

// Test switches come from their variables into the internal block, which copies of the Options share;
// none set: no block at all.
TEST(Config, TestHooksFromTheirVariables) {
  EXPECT_EQ(Options::from_env().test_hooks, nullptr);
  EnvScope env;
  env.set("PEERLINK_TEST_CHANNEL_NEVER_READY", "1");
  env.set("PEERLINK_TEST_WINDOW_MAP_FAIL", "yes");
  Options o = Options::from_env();
  ASSERT_NE(o.test_hooks, nullptr);
  EXPECT_TRUE(detail::test_hooks(o).channel_never_ready);
  EXPECT_TRUE(detail::test_hooks(o).window_map_fail);
  EXPECT_FALSE(detail::test_hooks(o).allreduce_oneshot_generic);
  Options copy = o;
  EXPECT_TRUE(detail::test_hooks(copy).channel_never_ready);
  detail::set_test_hook(copy, &detail::TestHooks::channel_never_ready, false);
  EXPECT_FALSE(detail::test_hooks(copy).channel_never_ready);
  EXPECT_TRUE(detail::test_hooks(copy).window_map_fail);
  EXPECT_TRUE(detail::test_hooks(o).channel_never_ready);  // the original keeps its own
  env.set("PEERLINK_TEST_WINDOW_MAP_FAIL", "sometimes");
  EXPECT_NE(error_of([] { Options::from_env(); }).find("PEERLINK_TEST_WINDOW_MAP_FAIL='sometimes'"), std::string::npos);
}

// NCCL's variables stand in for unset PEERLINK_ ones, read as NCCL reads them (never an error).
TEST(Config, NcclAliasesAreReadLeniently) {
  {
    EnvScope env;
    env.set("NCCL_P2P_DISABLE", "1");
    env.set("NCCL_P2P_LEVEL", "PXB");
    env.set("NCCL_TOPO_FILE", "/tmp/topo.xml");
    Options o = Options::from_env();
    EXPECT_TRUE(o.p2p_disable);
    EXPECT_EQ(o.p2p_level, "PXB");
    EXPECT_EQ(o.topo_file, "/tmp/topo.xml");
  }
  {
    EnvScope env;
    env.set("NCCL_P2P_DISABLE", "1");
    env.set("PEERLINK_P2P_DISABLE", "0");  // the PEERLINK_ variable wins
    env.set("NCCL_P2P_LEVEL", "NOT_A_LEVEL");  // ignored, as NCCL ignores what it cannot read
    Options o = Options::from_env();
    EXPECT_FALSE(o.p2p_disable);
    EXPECT_EQ(o.p2p_level, "");
  }
  {
    EnvScope env;
    env.set("NCCL_P2P_DISABLE", "2");  // NCCL: any integer but 0 is on
    EXPECT_TRUE(Options::from_env().p2p_disable);
  }
}
