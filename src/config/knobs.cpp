// The knob registry: every variable the library reads, in one table. Options::from_env and
// Options::validate iterate it (options.cpp) and docs/configuration.md is rendered from it
// (knob_docs.cpp, `make docs`; `make test-docs` fails when the committed file is stale).
//
// Adding a knob: a field of Options (include/peerlink/options.h, its default as the member's
// initializer and, where a measurement decided it, the measurement in a comment there), then ONE
// row below, in the section of its audience:
//   row(t, <User|Tuning|Test>, "PEERLINK_<NAME>"  (or {"PEERLINK_<NAME>", "NCCL_<NAME>"} where NCCL
//       has the same knob: read, as NCCL reads it, when the PEERLINK_ variable is unset),
//       <integer|flag|switch_|choice|text>(OPT(<field>), <range or names>), "<one line for the docs>");
// then `make docs`. The descriptor (knob_types.h) parses, validates and shows the value by the
// member's type: integer(OPT(f), lo, hi) for int / size_t / milliseconds (.zero_means("..."),
// .zero_or_at_least(n), .multiple_of(k)), flag for bool, switch_ for an int set by 0/1 whose -1 means
// "decide", choice with a spelling table of spellings.h for an enum, text for a string. A test
// switch is a member of detail::TestHooks (test_hooks.h, HOOK(f)) with audience Test: it stays out
// of the public header and the docs.
#include "config/knobs.h"

#include <cctype>
#include <type_traits>

#include "config/knob_types.h"

namespace peerlink::config {
namespace {

using Table = std::vector<std::unique_ptr<const Knob>>;
constexpr Audience User = Audience::User, Tuning = Audience::Tuning, Test = Audience::Test;

// A row's variable, and NCCL's name for the same knob when it has one.
struct Names {
  const char* var;
  const char* alias = nullptr;
  Names(const char* v) : var(v) {}  // NOLINT: a row names its variable as a plain string
  Names(const char* v, const char* a) : var(v), alias(a) {}
};

template <class K>
void row(Table& t, Audience audience, Names names, K&& knob, const char* doc) {
  auto k = std::make_unique<std::decay_t<K>>(std::forward<K>(knob));
  k->var = names.var;
  k->alias = names.alias;
  k->audience = audience;
  k->doc = doc;
  t.push_back(std::move(k));
}

#define OPT(member) &Options::member, #member
#define HOOK(member) &detail::TestHooks::member, #member

// PEERLINK_P2P_LEVEL's spellings. The topology layer interprets the level (topology::parse_level,
// same names); this layer only refuses what it could never interpret.
bool valid_p2p_level(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* n : {"LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS"})
    if (s == n) return true;
  return s.size() == 1 && s[0] >= '0' && s[0] <= '4';  // NCCL's legacy numeric levels
}

constexpr long long kTiB = 1LL << 40;
constexpr const char* kTwoHopOnly = "two_hop is a path of broadcast and reduce only";

// clang-format off
Table make_table() {
  Table t;
  // ---- User: what programs set.
  row(t, User, "PEERLINK_DEBUG", choice(OPT(log_level), spellings(kLogLevels)), "log level; `info` logs each pair's path and the reason for it, and the topology matrix");
  row(t, User, "PEERLINK_TIMEOUT_MS", integer(OPT(timeout), 1, 86400000), "bound of every wait, in milliseconds");
  row(t, User, "PEERLINK_COMPLETION", choice(OPT(completion), spellings(kCompletions)), "how a send's completion reaches the receiver: the done_seq channel when it becomes ready, else the SHM ring with an ACK per message (`auto`); `done_seq` makes a channel failure an error");
  row(t, User, "PEERLINK_TRANSPORT", choice(OPT(path), spellings(kPaths)), "force the data path of every pair: `direct` copies into the receiver's published buffer, `relay` stages through a pinned host SHM ring; `auto` follows the topology policy");
  row(t, User, {"PEERLINK_P2P_LEVEL", "NCCL_P2P_LEVEL"}, text(OPT(p2p_level), "`LOC`, `NVL`, `NVB`, `PIX`, `PXB`, `PHB`, `SYS` or `0`–`4` (NCCL's table)", valid_p2p_level), "highest PCI path between two GPUs that still uses direct peer-to-peer copies; unset: the topology's default");
  row(t, User, {"PEERLINK_P2P_DISABLE", "NCCL_P2P_DISABLE"}, flag(OPT(p2p_disable)), "relay for every GPU pair");
  row(t, User, {"PEERLINK_TOPO_FILE", "NCCL_TOPO_FILE"}, text(OPT(topo_file), "a path"), "read an NCCL topology XML (the format of `NCCL_TOPO_DUMP_FILE`) instead of probing the machine");
  row(t, User, {"PEERLINK_MAX_BLOCKS", "NCCL_MAX_CTAS"}, integer(OPT(max_blocks), 0, kMaxAllreduceBlocks).zero_means("no cap"), "at most this many thread blocks per collective kernel (the ranks use the smallest cap any of them sets) and per stream send/recv launch (one block per channel at least), so that kernels on other streams keep the rest of the GPU, as NCCL's `maxCTAs`. Ranks that share one GPU as threads of one process split its multiprocessors between them without it");
  row(t, User, "PEERLINK_ALLREDUCE_PDL", switch_(OPT(allreduce_pdl), -1, 1, "on from compute capability 9.0"), "launch the collective kernels with programmatic dependent launch: a kernel is scheduled while its predecessor on the stream finishes and waits for it on the device; a user kernel launched with PDL after a collective must call `cudaGridDependencySynchronize()` before reading its result. Never below compute capability 9.0");
  row(t, User, "PEERLINK_STREAM_PDL", switch_(OPT(stream_pdl), -1, 1, "on from compute capability 9.0"), "launch the stream send/recv kernels with programmatic dependent launch (as `PEERLINK_ALLREDUCE_PDL`: a user kernel launched with PDL after a `recv` must call `cudaGridDependencySynchronize()` before reading the received bytes)");
  row(t, User, "PEERLINK_COLL_GRAPH_REGISTER", integer(OPT(coll_graph_register), 0, 2), "a collective captured into a CUDA graph on buffers in no registered window registers its window buffer as a window of its own (`1`), also on eager calls, one host exchange each, for tests (`2`), or never (`0`). With it on, every rank must capture the collectives any rank captures");
  row(t, User, "PEERLINK_FD_PASSING", choice(OPT(fd_passing), spellings(kFdPassings)), "how memory exported by file descriptor reaches a peer: `pidfd_getfd` with a fallback to the job's Unix socket (`auto`), or only one of them");
  row(t, User, {"PEERLINK_HOSTID", "NCCL_HOSTID"}, text(OPT(host_id), "any string"), "this rank's host identity: ranks with equal ones form one node (`docs/multi-node.md`); unset: the hostname up to its first `.` and the boot id, as NCCL's host hash");
  row(t, User, {"PEERLINK_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}, text(OPT(socket_ifname), "NCCL's syntax: `eth,ib` prefixes, `^docker` excludes, `=eth0` exact"), "where the multi-node rendezvous of `ncclGetUniqueId` listens; unset: the first interface up and not loopback (`ib*` first), else loopback");
  row(t, User, "PEERLINK_HIER_MIN_BYTES", integer(OPT(hier_min_bytes), 0, 1LL << 50).zero_means("off"), "`libnccl.so.2` across nodes: collectives of at least this many bytes take the two-level plan (peerlink inside each node, the real NCCL between nodes; `docs/design-multinode.md` says where it pays); smaller ones run whole on the real NCCL. Every rank must agree");
  row(t, User, "PEERLINK_NCCL_LIBRARY", text(OPT(nccl_library), "a path"), "`libnccl.so.2`: the real NCCL that forwarded work runs on (also the NCCL the benchmarks compare with); unset: the usual places");
  row(t, User, "NCCL_DEBUG", text(OPT(nccl_debug), "NCCL's (`VERSION`, `WARN`, `INFO`, `TRACE`, ...)"), "`libnccl.so.2`'s log level, as NCCL reads it: at `INFO` it says which path each communicator and operation took");

  // ---- Tuning ("Advanced" in the docs): every rank must agree on those that shape shared memory.
  row(t, Tuning, "PEERLINK_ALLREDUCE_ALGO", choice(OPT(allreduce_algo), spellings(kAllreduceAlgos)), "force the allreduce algorithm (`auto`: by size, world and windows); `zero_copy` needs sendbuf and recvbuf in registered windows. Every rank must agree");
  row(t, Tuning, "PEERLINK_ALL_GATHER_ALGO", choice(OPT(all_gather_algo), spellings(kCollAlgos)).except(CollAlgo::TwoHop, kTwoHopOnly), "force all_gather's algorithm (`auto`: by size); `zero_copy` needs the recvbuf in a registered window. Every rank must agree");
  row(t, Tuning, "PEERLINK_REDUCE_SCATTER_ALGO", choice(OPT(reduce_scatter_algo), spellings(kCollAlgos)).except(CollAlgo::TwoHop, kTwoHopOnly), "force reduce_scatter's algorithm (`auto`: by size); `zero_copy` needs the sendbuf in a registered window. Every rank must agree");
  row(t, Tuning, "PEERLINK_BROADCAST_ALGO", choice(OPT(broadcast_algo), spellings(kCollAlgos)), "force broadcast's algorithm (`auto`: by size); `zero_copy` needs the recvbuf in a registered window. Every rank must agree");
  row(t, Tuning, "PEERLINK_REDUCE_ALGO", choice(OPT(reduce_algo), spellings(kCollAlgos)), "force reduce's algorithm (`auto`: by size); `zero_copy` needs the sendbuf in a registered window. Every rank must agree");
  row(t, Tuning, "PEERLINK_ALL_TO_ALL_ALGO", choice(OPT(all_to_all_algo), spellings(kCollAlgos)).except(CollAlgo::TwoHop, kTwoHopOnly), "force all_to_all's algorithm, and all_to_all_v's (which has no `zero_copy`); `zero_copy` needs the recvbuf in a registered window. Every rank must agree");
  row(t, Tuning, "PEERLINK_COLL_LL_MAX", integer(OPT(coll_ll_max), 0, 1LL << 28).zero_means("never"), "auto selection of the collectives other than allreduce: LL lines for pieces up to this many bytes (also bounded by `PEERLINK_ALLREDUCE_LL_MAX`). Every rank must agree");
  row(t, Tuning, "PEERLINK_COLL_CE_MIN", integer(OPT(coll_ce_min), 0, kTiB).zero_means("never"), "auto selection: copy engines for all_gather, broadcast and all_to_all pieces of at least this many bytes. Every rank must agree");
  row(t, Tuning, "PEERLINK_COLL_CE_CHUNK_BYTES", integer(OPT(coll_ce_chunk_bytes), 0, 1LL << 32).zero_or_at_least(64).zero_means("the scratch position"), "copy-engine path: bytes per piece per step");
  row(t, Tuning, "PEERLINK_COLL_CE_LANES", integer(OPT(coll_ce_lanes), 1, 4), "copy-engine path: copy streams each step's pushes are split over");
  row(t, Tuning, "PEERLINK_COLL_ZERO_COPY_MIN", integer(OPT(coll_zero_copy_min), 0, kTiB).zero_means("never by auto"), "auto selection of the zero-copy path for all_gather, broadcast and all_to_all pieces of at least this many bytes whose buffer lies in a zero-copy window (reduce and reduce_scatter from 128 / 32 MB pieces, never when 0). Every rank must agree");
  row(t, Tuning, "PEERLINK_COLL_ZERO_COPY_CE", switch_(OPT(coll_zero_copy_ce), 0, 1), "zero-copy pushes by copy engines (over `PEERLINK_COLL_CE_LANES` streams) instead of the copy kernel, at every size");
  row(t, Tuning, "PEERLINK_COLL_ZERO_COPY_CE_MIN", integer(OPT(coll_zero_copy_ce_min), 0, kTiB).zero_means("never by size"), "with 2 ranks, zero-copy calls whose largest push has at least this many bytes use copy engines (in-place all_to_all keeps the kernel)");
  row(t, Tuning, "PEERLINK_ALLREDUCE_SCRATCH_BYTES", integer(OPT(allreduce_scratch_bytes), 0, 1LL << 32).zero_or_at_least(64).zero_means("GPU: max(4 MiB, 32 MiB / world); host: 1 MiB"), "allreduce step size through the registered scratch, in bytes per region position (rounded up to 64). Every rank must agree");
  row(t, Tuning, "PEERLINK_ALLREDUCE_LL_MAX", integer(OPT(allreduce_ll_max), 0, 1LL << 28), "largest allreduce on the LL (flag per word) one-shot path; where LL128 lines are on, LL stops at 128 KiB; also sizes the LL area the other collectives use. Every rank must agree");
  row(t, Tuning, "PEERLINK_FUSED_ALGO", choice(OPT(fused_algo), spellings(kFusedAlgos)), "force the data flow of the fused allreduce + residual add + RMSNorm (`peerlink/fused.h`): `oneshot` or `twoshot` (`auto`: by size and world size). Every rank must agree");
  row(t, Tuning, "PEERLINK_ALLREDUCE_LL128_MAX", integer(OPT(allreduce_ll128_max), 0, 1LL << 26).zero_means("off"), "largest allreduce on the LL128 one-shot path (NVLink or one-GPU pairs, CUDA); sizes `2 × world × ⌈max/120⌉ × 128` bytes of scratch per rank. Every rank must agree");
  row(t, Tuning, "PEERLINK_ALLREDUCE_BLOCKS", integer(OPT(allreduce_blocks), 0, kMaxAllreduceBlocks).zero_means("per algorithm"), "grid of the collective kernels");
  row(t, Tuning, "PEERLINK_ALLREDUCE_THREADS", integer(OPT(allreduce_threads), 0, 1024).zero_means("per algorithm"), "threads per block of the collective kernels");
  row(t, Tuning, "PEERLINK_STREAM_BLOCKS", integer(OPT(stream_blocks), 0, 1024).zero_means("64"), "most thread blocks one stream send/recv channel uses (large messages are split across them); the grid is capped at the multiprocessor count");
  row(t, Tuning, "PEERLINK_STREAM_THREADS", integer(OPT(stream_threads), 0, 512).multiple_of(32).zero_means("by size: 128 up to 1 KiB, 256 up to 2 KiB, else 512"), "threads per block of the stream send/recv kernel, from the launch's largest message");
  row(t, Tuning, "PEERLINK_STREAM_LL_MAX", integer(OPT(stream_ll_max), 0, 512LL << 10).zero_means("never"), "GPU stream send/recv messages up to this size travel as LL lines (a flag in every line, no fence), split over one block per 8 KiB. Every rank must agree");
  row(t, Tuning, "PEERLINK_STREAM_CE_MIN", integer(OPT(stream_ce_min), 0, kTiB).zero_means("off"), "published-form sends of at least this size, issued alone or in a group of such sends only, are copied by the copy engine between two small kernels; a mismatched recv is still reported, but the bytes land at the sender's range");
  row(t, Tuning, "PEERLINK_STREAM_CE_LANES", integer(OPT(stream_ce_lanes), 1, 4), "copy-engine lanes (forked streams, at least 1 MiB each) of that path");
  row(t, Tuning, "PEERLINK_STREAM_DIRECT_MIN", integer(OPT(stream_direct_min), 0, kTiB).zero_means("off"), "NCCL-form messages of at least this size (above `PEERLINK_STREAM_LL_MAX`) between two ranks of one process go zero-copy into the recv buffer (staged when the peer's GPU cannot write that buffer: VMM, memory pools). Every rank must agree");
  row(t, Tuning, "PEERLINK_STREAM_DIRECT_IPC_MIN", integer(OPT(stream_direct_ipc_min), 0, kTiB).zero_means("off"), "the same between two processes: the receiver exports its recv buffers' allocations to the sender (up to 64 per peer), which maps them at its next send of such a size outside a capture; until then, and for buffers first used inside a capture, messages are staged. Every rank must agree");
  row(t, Tuning, "PEERLINK_STREAM_ACQUIRE_LOAD", flag(OPT(stream_acquire_load)), "after a stream kernel's spin sees a peer's flag: one `ld.acquire.sys` of the flag instead of `fence.acq_rel.sys` (the same ordering; CUDA only)");
  row(t, Tuning, "PEERLINK_NCCL_P2P_PLAN_MIN", integer(OPT(nccl_p2p_plan_min), 0, kTiB).zero_means("never"), "`libnccl.so.2`: ncclAllGather / ncclAlltoAll blocks of at least this size per peer run as grouped send/recv instead of the collective's staged push (not when both buffers are registered windows)");
  row(t, Tuning, "PEERLINK_CHANNEL_READY_MS", integer(OPT(channel_ready_timeout), 1, 3600000), "how long the lower rank of a pair waits for the higher one to open the done_seq channel before both use the ring, in milliseconds");
  row(t, Tuning, "PEERLINK_RELAY_CHUNK_BYTES", integer(OPT(relay_chunk_bytes), 4096, 1LL << 30), "relay staging ring: bytes per slot");
  row(t, Tuning, "PEERLINK_RELAY_SLOTS", integer(OPT(relay_slots), 2, 64), "relay staging ring: slots per ordered pair");
  row(t, Tuning, "PEERLINK_STRIPE_STREAMS", integer(OPT(stripe_streams), 1, 16), "copy lanes for large host-API messages on GPUs (one measured fastest on H100 and H200)");
  row(t, Tuning, "PEERLINK_STRIPE_THRESHOLD", integer(OPT(stripe_threshold), 4096, kTiB), "host-API messages of at least this size are striped over `PEERLINK_STRIPE_STREAMS` lanes");
  row(t, Tuning, "PEERLINK_KERNEL_COPY_MAX", integer(OPT(kernel_copy_max), 0, 1LL << 30).zero_means("always the copy engine"), "GPU host-API sends up to this size use a copy kernel that stores done_seq itself (measured slower than the copy engine on H200)");
  row(t, Tuning, "PEERLINK_HOST_ARM_US", integer(OPT(host_arm_us), 0, 10000).zero_means("off"), "GPU host-API sends up to 16 KiB run on a kernel launched ahead of the message, which serves the following sends too until the send worker cancels it about this many microseconds after the last one; while it waits, one block polls and a `cudaDeviceSynchronize` waits for it");
  row(t, Tuning, "PEERLINK_HOST_FD", flag(OPT(host_fd)), "host backend: `alloc()` makes memfd chunks exported by descriptor (as GPU VMM memory); `0`: one named POSIX SHM segment per allocation");
  row(t, Tuning, "PEERLINK_HOST_CHUNK_BYTES", integer(OPT(host_chunk_bytes), 0, kTiB).zero_means("one chunk"), "host fd memory: bytes per memfd chunk (page-rounded)");

  // ---- Test: switches of the library's own tests (not in the docs).
  row(t, Test, "PEERLINK_NCCL_HOST_BACKEND", flag(OPT(nccl_host_backend)), "libnccl.so.2's communicators use host memory whatever the current GPU (CI drives the NCCL C API without a GPU)");
  row(t, Test, "PEERLINK_TEST_HIER_REAL_ENGINE", flag(OPT(test_hier_real_engine)), "a multi-node communicator of `libnccl.so.2` on the host backend asks for the real NCCL as its inter-node engine (CI reaches the paths where it cannot be loaded)");
  row(t, Test, "PEERLINK_TEST_CHANNEL_NEVER_READY", flag(HOOK(channel_never_ready)), "fault injection: the higher rank of every pair never opens the done_seq channel");
  row(t, Test, "PEERLINK_TEST_WINDOW_MAP_FAIL", flag(HOOK(window_map_fail)), "fault injection: register_window on this rank fails to map its peers' ranges");
  row(t, Test, "PEERLINK_ALLREDUCE_ONESHOT_GENERIC", flag(HOOK(allreduce_oneshot_generic)), "the generic one-shot allreduce loop instead of the register kernel");
  return t;
}
// clang-format on

#undef OPT
#undef HOOK

}  // namespace

const std::vector<std::unique_ptr<const Knob>>& knobs() {
  static const Table table = make_table();  // constant: rows, never values
  return table;
}

bool parse_decimal(const char* text, long long* out) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(text, &end, 10);
  if (!end || end == text || *end != '\0' || errno == ERANGE) return false;
  *out = x;
  return true;
}

bool parse_boolean(const char* text, bool* out) {
  std::string s;
  for (const char* c = text; *c; ++c) s += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return *out = true, true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return *out = false, true;
  return false;
}

std::string bound_text(long long x) {
  if (x >= (1LL << 20) && (x & (x - 1)) == 0) {
    int n = 0;
    while ((1LL << n) != x) ++n;
    return common::format("2^{}", n);
  }
  return std::to_string(x);
}

std::string bytes_text(size_t x) {
  static const struct {
    size_t unit;
    const char* name;
  } units[] = {{size_t(1) << 30, "GiB"}, {size_t(1) << 20, "MiB"}, {size_t(1) << 10, "KiB"}};
  for (const auto& u : units)
    if (x >= u.unit && x % u.unit == 0) return common::format("`{}` ({} {})", x, x / u.unit, u.name);
  return common::format("`{}`", x);
}

}  // namespace peerlink::config
