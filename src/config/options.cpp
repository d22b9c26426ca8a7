// Options: every PEERLINK_* variable, read when a communicator is created, and the one validate().
// This is the only file of the library that reads the environment (scripts/check_layers.sh checks
// that no getenv appears in src/ outside src/config/): a knob that is not a field of Options does
// not exist, and a value is checked in one place whether it came from the environment or from code.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace peerlink {
namespace {

using common::cat;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

// The numeric knobs: field, variable and the accepted range, shared by from_env (which names the
// variable and the text) and validate (which names the field and the value).
struct Range {
  const char* field;
  const char* var;
  long long lo, hi;
};
constexpr Range kTimeout{"timeout", "PEERLINK_TIMEOUT_MS", 1, 86400000LL};
constexpr Range kChannelReady{"channel_ready_timeout", "PEERLINK_CHANNEL_READY_MS", 1, 3600000LL};
constexpr Range kRelayChunk{"relay_chunk_bytes", "PEERLINK_RELAY_CHUNK_BYTES", 4096, 1LL << 30};
constexpr Range kRelaySlots{"relay_slots", "PEERLINK_RELAY_SLOTS", 2, 64};
constexpr Range kStripeStreams{"stripe_streams", "PEERLINK_STRIPE_STREAMS", 1, 16};
constexpr Range kStripeThreshold{"stripe_threshold", "PEERLINK_STRIPE_THRESHOLD", 4096, 1LL << 40};
constexpr Range kHostChunk{"host_chunk_bytes", "PEERLINK_HOST_CHUNK_BYTES", 0, 1LL << 40};
constexpr Range kKernelCopyMax{"kernel_copy_max", "PEERLINK_KERNEL_COPY_MAX", 0, 1LL << 30};
constexpr Range kHostArm{"host_arm_us", "PEERLINK_HOST_ARM_US", 0, 10000};
// 0 = the backend's default; otherwise at least one 16-byte vector per rank position.
constexpr Range kScratch{"allreduce_scratch_bytes", "PEERLINK_ALLREDUCE_SCRATCH_BYTES", 0, 1LL << 32};
constexpr long long kScratchMin = 64;
constexpr Range kThreads{"allreduce_threads", "PEERLINK_ALLREDUCE_THREADS", 0, 1024};
constexpr Range kBlocks{"allreduce_blocks", "PEERLINK_ALLREDUCE_BLOCKS", 0, kMaxAllreduceBlocks};
constexpr Range kMaxBlocks{"max_blocks", "PEERLINK_MAX_BLOCKS", 0, kMaxAllreduceBlocks};
constexpr Range kLlMax{"allreduce_ll_max", "PEERLINK_ALLREDUCE_LL_MAX", 0, 1LL << 28};
constexpr Range kLl128Max{"allreduce_ll128_max", "PEERLINK_ALLREDUCE_LL128_MAX", 0, 1LL << 26};
constexpr Range kPdl{"allreduce_pdl", "PEERLINK_ALLREDUCE_PDL", -1, 1};
constexpr Range kCollLlMax{"coll_ll_max", "PEERLINK_COLL_LL_MAX", 0, 1LL << 28};
constexpr Range kCollCeMin{"coll_ce_min", "PEERLINK_COLL_CE_MIN", 0, 1LL << 40};
constexpr Range kCollCeChunk{"coll_ce_chunk_bytes", "PEERLINK_COLL_CE_CHUNK_BYTES", 0, 1LL << 32};
constexpr Range kCollCeLanes{"coll_ce_lanes", "PEERLINK_COLL_CE_LANES", 1, 4};
constexpr Range kCollZeroCopyMin{"coll_zero_copy_min", "PEERLINK_COLL_ZERO_COPY_MIN", 0, 1LL << 40};
constexpr Range kCollZeroCopyCe{"coll_zero_copy_ce", "PEERLINK_COLL_ZERO_COPY_CE", 0, 1};
constexpr Range kCollZeroCopyCeMin{"coll_zero_copy_ce_min", "PEERLINK_COLL_ZERO_COPY_CE_MIN", 0, 1LL << 40};
constexpr Range kCollGraphRegister{"coll_graph_register", "PEERLINK_COLL_GRAPH_REGISTER", 0, 2};
constexpr Range kStreamPdl{"stream_pdl", "PEERLINK_STREAM_PDL", -1, 1};
constexpr Range kStreamBlocks{"stream_blocks", "PEERLINK_STREAM_BLOCKS", 0, 1024};
constexpr Range kStreamThreads{"stream_threads", "PEERLINK_STREAM_THREADS", 0, 512};
constexpr Range kStreamLlMax{"stream_ll_max", "PEERLINK_STREAM_LL_MAX", 0, 512LL << 10};
constexpr Range kStreamCeMin{"stream_ce_min", "PEERLINK_STREAM_CE_MIN", 0, 1LL << 40};
constexpr Range kStreamDirectMin{"stream_direct_min", "PEERLINK_STREAM_DIRECT_MIN", 0, 1LL << 40};
constexpr Range kStreamDirectIpcMin{"stream_direct_ipc_min", "PEERLINK_STREAM_DIRECT_IPC_MIN", 0, 1LL << 40};
constexpr Range kNcclP2pPlanMin{"nccl_p2p_plan_min", "PEERLINK_NCCL_P2P_PLAN_MIN", 0, 1LL << 40};
constexpr Range kHierMinBytes{"hier_min_bytes", "PEERLINK_HIER_MIN_BYTES", 0, 1LL << 50};
constexpr Range kStreamCeLanes{"stream_ce_lanes", "PEERLINK_STREAM_CE_LANES", 1, 4};

long long parse_int(const Range& r, const char* v) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (!end || end == v || *end != '\0' || errno == ERANGE || x < r.lo || x > r.hi)
    throw InvalidArgument(cat(r.var, "='", v, "' is not an integer in [", r.lo, ", ", r.hi, "]"));
  return x;
}

void check(const Range& r, long long x) {
  if (x < r.lo || x > r.hi)
    throw InvalidArgument(cat("Options::", r.field, " ", x, " is outside [", r.lo, ", ", r.hi, "] (", r.var, ")"));
}

// size_t fields compared without narrowing them to long long first.
void check_size(const Range& r, size_t x) {
  if (x > static_cast<unsigned long long>(r.hi) || static_cast<long long>(x) < r.lo)
    throw InvalidArgument(cat("Options::", r.field, " ", x, " is outside [", r.lo, ", ", r.hi, "] (", r.var, ")"));
}

// NCCL's own variable, read as NCCL reads it: a value out of range is clamped, text that is no
// integer is ignored (0: no cap), so a program that runs on NCCL never fails here.
int nccl_max_ctas(const char* v) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (!end || end == v || *end != '\0' || errno == ERANGE || x <= 0) return 0;
  return static_cast<int>(x < kMaxAllreduceBlocks ? x : kMaxAllreduceBlocks);
}

bool parse_bool(const char* name, const char* v) {
  std::string s = lower(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw InvalidArgument(cat(name, "='", v, "' is not a boolean (use 1 or 0)"));
}

// PEERLINK_P2P_LEVEL's spellings. The topology layer interprets the level (topology::parse_level,
// same names); this layer only refuses what it could never interpret, so a typo fails when the
// communicator is created and not at the first GPU pair decision.
bool valid_p2p_level(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* n : {"LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS"})
    if (s == n) return true;
  return s.size() == 1 && s[0] >= '0' && s[0] <= '4';  // NCCL's legacy numeric levels
}

}  // namespace

const char* to_string(Completion c) {
  switch (c) {
    case Completion::Auto: return "auto";
    case Completion::DoneSeq: return "done_seq";
    case Completion::Ring: return "ring";
  }
  return "?";
}

const char* to_string(Path p) {
  switch (p) {
    case Path::Auto: return "auto";
    case Path::Direct: return "direct";
    case Path::Relay: return "relay";
  }
  return "?";
}

const char* to_string(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::Auto: return "auto";
    case AllreduceAlgo::OneShot: return "oneshot";
    case AllreduceAlgo::TwoShot: return "twoshot";
    case AllreduceAlgo::Bandwidth: return "bandwidth";
    case AllreduceAlgo::ZeroCopy: return "zero_copy";
  }
  return "?";
}

AllreduceAlgo parse_allreduce_algo(const std::string& s) {
  std::string v = lower(s);
  if (v.empty() || v == "auto") return AllreduceAlgo::Auto;
  if (v == "oneshot" || v == "one_shot" || v == "one-shot") return AllreduceAlgo::OneShot;
  if (v == "twoshot" || v == "two_shot" || v == "two-shot") return AllreduceAlgo::TwoShot;
  if (v == "bandwidth" || v == "bw") return AllreduceAlgo::Bandwidth;
  if (v == "zero_copy" || v == "zerocopy" || v == "zero-copy" || v == "zc") return AllreduceAlgo::ZeroCopy;
  throw InvalidArgument(cat("PEERLINK_ALLREDUCE_ALGO='", s, "' is not one of oneshot, twoshot, bandwidth, zero_copy, auto"));
}

const char* to_string(CollAlgo a) {
  switch (a) {
    case CollAlgo::Auto: return "auto";
    case CollAlgo::LL: return "ll";
    case CollAlgo::LL128: return "ll128";
    case CollAlgo::Push: return "push";
    case CollAlgo::CopyEngine: return "ce";
    case CollAlgo::ZeroCopy: return "zero_copy";
    case CollAlgo::TwoHop: return "two_hop";
  }
  return "?";
}

CollAlgo parse_coll_algo(const std::string& s) {
  std::string v = lower(s);
  if (v.empty() || v == "auto") return CollAlgo::Auto;
  if (v == "ll") return CollAlgo::LL;
  if (v == "ll128") return CollAlgo::LL128;
  if (v == "push" || v == "direct") return CollAlgo::Push;
  if (v == "ce" || v == "copy_engine" || v == "copyengine") return CollAlgo::CopyEngine;
  if (v == "zero_copy" || v == "zc" || v == "zerocopy") return CollAlgo::ZeroCopy;
  if (v == "two_hop" || v == "twohop" || v == "two-hop") return CollAlgo::TwoHop;
  throw InvalidArgument(
      cat("collective algorithm '", s, "' is not one of ll, ll128, push, ce, zero_copy, two_hop, auto"));
}

namespace {
// The per-collective algorithm overrides: field, variable.
struct CollAlgoKnob {
  std::string Options::*field;
  const char* var;
};
const CollAlgoKnob kCollAlgoKnobs[] = {
    {&Options::all_gather_algo, "PEERLINK_ALL_GATHER_ALGO"},
    {&Options::reduce_scatter_algo, "PEERLINK_REDUCE_SCATTER_ALGO"},
    {&Options::broadcast_algo, "PEERLINK_BROADCAST_ALGO"},
    {&Options::reduce_algo, "PEERLINK_REDUCE_ALGO"},
    {&Options::all_to_all_algo, "PEERLINK_ALL_TO_ALL_ALGO"},
};
}  // namespace

Options Options::from_env() {
  Options o;
  if (const char* v = env(kTimeout.var)) o.timeout = std::chrono::milliseconds(parse_int(kTimeout, v));
  if (const char* v = env("PEERLINK_COMPLETION")) {
    std::string s = lower(v);
    if (s == "auto") o.completion = Completion::Auto;
    else if (s == "done_seq" || s == "doneseq") o.completion = Completion::DoneSeq;
    else if (s == "ring") o.completion = Completion::Ring;
    else throw InvalidArgument(cat("PEERLINK_COMPLETION='", v, "' is not one of auto, done_seq, ring"));
  }
  if (const char* v = env("PEERLINK_TRANSPORT")) {
    std::string s = lower(v);
    if (s == "auto") o.path = Path::Auto;
    else if (s == "direct" || s == "p2p") o.path = Path::Direct;
    else if (s == "relay") o.path = Path::Relay;
    else throw InvalidArgument(cat("PEERLINK_TRANSPORT='", v, "' is not one of auto, direct, relay"));
  }
  if (const char* v = env("PEERLINK_P2P_DISABLE")) o.p2p_disable = parse_bool("PEERLINK_P2P_DISABLE", v);
  if (const char* v = env("PEERLINK_P2P_LEVEL")) o.p2p_level = v;
  if (const char* v = env("PEERLINK_TOPO_FILE")) o.topo_file = v;
  if (const char* v = env("PEERLINK_ALLREDUCE_ALGO")) o.allreduce_algo = lower(v);
  if (const char* v = env("PEERLINK_DEBUG")) {
    std::string s = lower(v);
    if (s == "warn") o.log_level = LogLevel::Warn;
    else if (s == "info") o.log_level = LogLevel::Info;
    else if (s == "trace") o.log_level = LogLevel::Trace;
    else if (s == "none" || s == "off") o.log_level = LogLevel::None;
    else throw InvalidArgument(cat("PEERLINK_DEBUG='", v, "' is not one of WARN, INFO, TRACE, NONE"));
  }
  if (const char* v = env("PEERLINK_NCCL_LIBRARY")) o.nccl_library = v;
  if (const char* v = env("NCCL_DEBUG")) o.nccl_debug = v;
  if (const char* v = env("PEERLINK_NCCL_HOST_BACKEND"))
    o.nccl_host_backend = parse_bool("PEERLINK_NCCL_HOST_BACKEND", v);
  // NCCL's own names after ours, as NCCL reads them (any string; never rejected).
  if (const char* v = env("PEERLINK_HOSTID")) o.host_id = v;
  else if (const char* w = env("NCCL_HOSTID")) o.host_id = w;
  if (const char* v = env("PEERLINK_SOCKET_IFNAME")) o.socket_ifname = v;
  else if (const char* w = env("NCCL_SOCKET_IFNAME")) o.socket_ifname = w;
  if (const char* v = env(kHierMinBytes.var)) o.hier_min_bytes = static_cast<size_t>(parse_int(kHierMinBytes, v));
  if (const char* v = env("PEERLINK_TEST_HIER_REAL_ENGINE"))
    o.test_hier_real_engine = parse_bool("PEERLINK_TEST_HIER_REAL_ENGINE", v);
  if (const char* v = env(kChannelReady.var))
    o.channel_ready_timeout = std::chrono::milliseconds(parse_int(kChannelReady, v));
  if (const char* v = env(kRelayChunk.var)) o.relay_chunk_bytes = static_cast<size_t>(parse_int(kRelayChunk, v));
  if (const char* v = env(kRelaySlots.var)) o.relay_slots = static_cast<int>(parse_int(kRelaySlots, v));
  if (const char* v = env(kStripeStreams.var)) o.stripe_streams = static_cast<int>(parse_int(kStripeStreams, v));
  if (const char* v = env(kStripeThreshold.var))
    o.stripe_threshold = static_cast<size_t>(parse_int(kStripeThreshold, v));
  if (const char* v = env(kKernelCopyMax.var)) o.kernel_copy_max = static_cast<size_t>(parse_int(kKernelCopyMax, v));
  if (const char* v = env(kHostArm.var)) o.host_arm_us = static_cast<int>(parse_int(kHostArm, v));
  if (const char* v = env("PEERLINK_TEST_CHANNEL_NEVER_READY"))
    o.test_channel_never_ready = parse_bool("PEERLINK_TEST_CHANNEL_NEVER_READY", v);
  if (const char* v = env("PEERLINK_TEST_WINDOW_MAP_FAIL"))
    o.test_window_map_fail = parse_bool("PEERLINK_TEST_WINDOW_MAP_FAIL", v);
  if (const char* v = env("PEERLINK_FD_PASSING")) {
    std::string s = lower(v);
    if (s == "auto") o.fd_passing = DescriptorPassing::Auto;
    else if (s == "pidfd") o.fd_passing = DescriptorPassing::Pidfd;
    else if (s == "socket") o.fd_passing = DescriptorPassing::Socket;
    else throw InvalidArgument(cat("PEERLINK_FD_PASSING='", v, "' is not one of auto, pidfd, socket"));
  }
  if (const char* v = env("PEERLINK_HOST_FD")) o.host_fd = parse_bool("PEERLINK_HOST_FD", v);
  if (const char* v = env(kHostChunk.var)) o.host_chunk_bytes = static_cast<size_t>(parse_int(kHostChunk, v));
  if (const char* v = env(kScratch.var)) {
    long long x = parse_int(kScratch, v);
    if (x != 0 && x < kScratchMin)
      throw InvalidArgument(cat(kScratch.var, "='", v, "' is below ", kScratchMin, " (0 = default)"));
    o.allreduce_scratch_bytes = static_cast<size_t>(x);
  }
  if (const char* v = env(kThreads.var)) o.allreduce_threads = static_cast<int>(parse_int(kThreads, v));
  if (const char* v = env(kBlocks.var)) o.allreduce_blocks = static_cast<int>(parse_int(kBlocks, v));
  if (const char* v = env(kMaxBlocks.var)) o.max_blocks = static_cast<int>(parse_int(kMaxBlocks, v));
  else if (const char* w = env("NCCL_MAX_CTAS")) o.max_blocks = nccl_max_ctas(w);
  if (const char* v = env(kLlMax.var)) o.allreduce_ll_max = static_cast<size_t>(parse_int(kLlMax, v));
  if (const char* v = env(kLl128Max.var)) o.allreduce_ll128_max = static_cast<size_t>(parse_int(kLl128Max, v));
  if (const char* v = env(kPdl.var)) o.allreduce_pdl = parse_bool(kPdl.var, v) ? 1 : 0;
  if (const char* v = env("PEERLINK_ALLREDUCE_ONESHOT_GENERIC"))
    o.allreduce_oneshot_generic = parse_bool("PEERLINK_ALLREDUCE_ONESHOT_GENERIC", v);
  for (const auto& k : kCollAlgoKnobs)
    if (const char* v = env(k.var)) o.*k.field = lower(v);
  if (const char* v = env(kCollLlMax.var)) o.coll_ll_max = static_cast<size_t>(parse_int(kCollLlMax, v));
  if (const char* v = env(kCollCeMin.var)) o.coll_ce_min = static_cast<size_t>(parse_int(kCollCeMin, v));
  if (const char* v = env(kCollCeChunk.var)) o.coll_ce_chunk_bytes = static_cast<size_t>(parse_int(kCollCeChunk, v));
  if (const char* v = env(kCollCeLanes.var)) o.coll_ce_lanes = static_cast<int>(parse_int(kCollCeLanes, v));
  if (const char* v = env(kCollZeroCopyMin.var))
    o.coll_zero_copy_min = static_cast<size_t>(parse_int(kCollZeroCopyMin, v));
  if (const char* v = env(kCollZeroCopyCe.var)) o.coll_zero_copy_ce = parse_bool(kCollZeroCopyCe.var, v) ? 1 : 0;
  if (const char* v = env(kCollZeroCopyCeMin.var))
    o.coll_zero_copy_ce_min = static_cast<size_t>(parse_int(kCollZeroCopyCeMin, v));
  if (const char* v = env(kCollGraphRegister.var))
    o.coll_graph_register = static_cast<int>(parse_int(kCollGraphRegister, v));
  if (const char* v = env(kStreamPdl.var)) o.stream_pdl = parse_bool(kStreamPdl.var, v) ? 1 : 0;
  if (const char* v = env(kStreamBlocks.var)) o.stream_blocks = static_cast<int>(parse_int(kStreamBlocks, v));
  if (const char* v = env(kStreamThreads.var)) o.stream_threads = static_cast<int>(parse_int(kStreamThreads, v));
  if (const char* v = env(kStreamLlMax.var)) o.stream_ll_max = static_cast<size_t>(parse_int(kStreamLlMax, v));
  if (const char* v = env(kStreamCeMin.var)) o.stream_ce_min = static_cast<size_t>(parse_int(kStreamCeMin, v));
  if (const char* v = env(kStreamDirectMin.var)) o.stream_direct_min = static_cast<size_t>(parse_int(kStreamDirectMin, v));
  if (const char* v = env(kStreamDirectIpcMin.var))
    o.stream_direct_ipc_min = static_cast<size_t>(parse_int(kStreamDirectIpcMin, v));
  if (const char* v = env(kNcclP2pPlanMin.var))
    o.nccl_p2p_plan_min = static_cast<size_t>(parse_int(kNcclP2pPlanMin, v));
  if (const char* v = env("PEERLINK_STREAM_ACQUIRE_LOAD"))
    o.stream_acquire_load = parse_bool("PEERLINK_STREAM_ACQUIRE_LOAD", v);
  if (const char* v = env(kStreamCeLanes.var)) o.stream_ce_lanes = static_cast<int>(parse_int(kStreamCeLanes, v));
  o.validate();
  return o;
}

void Options::validate() const {
  check(kTimeout, timeout.count());
  check(kChannelReady, channel_ready_timeout.count());
  check_size(kRelayChunk, relay_chunk_bytes);
  check(kRelaySlots, relay_slots);
  check(kStripeStreams, stripe_streams);
  check_size(kStripeThreshold, stripe_threshold);
  check_size(kKernelCopyMax, kernel_copy_max);
  check(kHostArm, host_arm_us);
  check_size(kHostChunk, host_chunk_bytes);
  if (static_cast<int>(fd_passing) < 0 || static_cast<int>(fd_passing) > static_cast<int>(DescriptorPassing::Socket))
    throw InvalidArgument(cat("Options::fd_passing ", static_cast<int>(fd_passing), " is not a DescriptorPassing"));
  if (!p2p_level.empty() && !valid_p2p_level(p2p_level))
    throw InvalidArgument(cat("PEERLINK_P2P_LEVEL='", p2p_level, "' is not one of LOC, NVL, PIX, PXB, PHB, SYS or 0-4"));
  parse_allreduce_algo(allreduce_algo);  // throws naming the string
  if (static_cast<int>(log_level) < static_cast<int>(LogLevel::None) ||
      static_cast<int>(log_level) > static_cast<int>(LogLevel::Trace))
    throw InvalidArgument(cat("Options::log_level ", static_cast<int>(log_level), " is not a LogLevel (PEERLINK_DEBUG)"));
  check_size(kScratch, allreduce_scratch_bytes);
  if (allreduce_scratch_bytes != 0 && allreduce_scratch_bytes < static_cast<size_t>(kScratchMin))
    throw InvalidArgument(cat("Options::allreduce_scratch_bytes ", allreduce_scratch_bytes, " is below ", kScratchMin,
                              " (0 = default; ", kScratch.var, ")"));
  check(kThreads, allreduce_threads);
  check(kBlocks, allreduce_blocks);
  check(kMaxBlocks, max_blocks);
  check_size(kLlMax, allreduce_ll_max);
  check_size(kLl128Max, allreduce_ll128_max);
  check(kPdl, allreduce_pdl);
  for (const auto& k : kCollAlgoKnobs) {
    CollAlgo a;
    try {
      a = parse_coll_algo(this->*k.field);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(cat(k.var, ": ", e.what()));
    }
    if (a == CollAlgo::TwoHop && k.field != &Options::broadcast_algo && k.field != &Options::reduce_algo)
      throw InvalidArgument(cat(k.var, "='", this->*k.field, "': two_hop is a path of broadcast and reduce only"));
  }
  check_size(kCollLlMax, coll_ll_max);
  check_size(kCollCeMin, coll_ce_min);
  check_size(kCollCeChunk, coll_ce_chunk_bytes);
  if (coll_ce_chunk_bytes != 0 && coll_ce_chunk_bytes < static_cast<size_t>(kScratchMin))
    throw InvalidArgument(cat("Options::coll_ce_chunk_bytes ", coll_ce_chunk_bytes, " is below ", kScratchMin,
                              " (0 = the scratch position; ", kCollCeChunk.var, ")"));
  check(kCollCeLanes, coll_ce_lanes);
  check_size(kCollZeroCopyMin, coll_zero_copy_min);
  check(kCollZeroCopyCe, coll_zero_copy_ce);
  check_size(kCollZeroCopyCeMin, coll_zero_copy_ce_min);
  check(kCollGraphRegister, coll_graph_register);
  check(kStreamPdl, stream_pdl);
  check(kStreamBlocks, stream_blocks);
  check(kStreamThreads, stream_threads);
  if (stream_threads % 32 != 0)
    throw InvalidArgument(cat("Options::stream_threads ", stream_threads, " is not a multiple of 32 (0 = by size; ",
                              kStreamThreads.var, ")"));
  check_size(kStreamLlMax, stream_ll_max);
  check_size(kStreamCeMin, stream_ce_min);
  check_size(kStreamDirectMin, stream_direct_min);
  check_size(kStreamDirectIpcMin, stream_direct_ipc_min);
  check_size(kNcclP2pPlanMin, nccl_p2p_plan_min);
  check(kStreamCeLanes, stream_ce_lanes);
  check_size(kHierMinBytes, hier_min_bytes);
}

}  // namespace peerlink
