// bench_transport: point-to-point latency and bandwidth of peerlink between two ranks, every
// figure from a run whose payloads were verified on the receiver. Forks its own two ranks, or runs
// as one rank of a launcher (PEERLINK_RANK / PEERLINK_WORLD_SIZE / PEERLINK_UNIQUE_ID or flags).
//   bench_transport -b 8 -e 64M -f 2 -n 100 -w 10 --mode latency --transport direct
//   bench_transport --demo        (what `make run` shows)
// Latency mode also measures, between the same two ranks and after each size, the raw anchors of
// common/anchors.h (a shared-memory flag ping-pong, the floor; a pipe ping-pong, kernel wake-ups)
// and prints peerlink's p50 as a multiple of each.
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/anchors.h"
#include "common/cli.h"
#include "common/launch.h"
#include "common/p2p_engine.h"
#include "common/report.h"
#include "common/stream_engine.h"
#include "peerlink/peerlink.h"

namespace {

struct Config {
  bench::EngineConfig engine;
  size_t min_bytes = 8, max_bytes = size_t(64) << 20, factor = 2;
  std::string transport = "auto", completion = "auto";
  std::vector<int> gpus;  // empty: default placement
  std::string json, csv;
  bool demo = false;
  int timeout_ms = -1;  // -1: PEERLINK_TIMEOUT_MS or the library default
  int time_limit_s = 600;
  bench::LaunchIdentity id;
  bool stream = false;  // --mode stream (common/stream_engine.h)
  bool graph = false;   // -G: stream mode, timed inside a CUDA graph
  bool nccl = true;
  bool threads = false;  // --threads: both ranks in one process (one forked child), one thread each
  bool anchors = true;   // --anchors 0: latency mode without the raw anchors
  std::vector<int> cpus;  // --cpus C0,C1: rank r runs on CPU cpus[r] (empty: wherever the kernel puts it)
  // Stream-mode knobs (Options::stream_*; -1 = PEERLINK_STREAM_* or the library default).
  long long ll_max = -1, ce_min = -1, ce_lanes = -1, acquire = -1, pdl = -1, blocks = -1;
};

const char* kUsage =
    "usage: bench_transport [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n"
    "  [--mode latency|bandwidth|bidir|stream] [-G 0|1] [--no-nccl] [--transport auto|direct|relay] [--completion auto|done_seq|ring]\n"
    "  [--gpus D0,D1] [--window N] [--json FILE] [--csv FILE] [--verify-full BYTES] [--timeout-ms MS]\n"
    "  [--time-limit S] [--rank R --world N --uid ID] [--threads] [--anchors 0|1] [--cpus C0,C1] [--demo]\n"
    "  [--inject-error (test hook)]\n"
    "  stream knobs: [--ll-max BYTES] [--ce-min BYTES] [--ce-lanes N] [--acquire-load 0|1] [--pdl 0|1]\n"
    "                [--stream-blocks N]  (Options::stream_*; default: PEERLINK_STREAM_* or the library's)\n"
    "Sizes take K/M/G suffixes. Devices: default GPUs 0,1 (0,0 with one GPU), else host backend -1.\n"
    "--threads: both ranks as two threads of one process. On one GPU that is the single-GPU proxy of a\n"
    "pair (the kernels of both ranks run at once, as on two GPUs; two processes on one GPU time-slice),\n"
    "without NVLink: use it to compare settings, not as a 2-GPU number. NCCL columns need two GPUs there.\n"
    "--anchors (latency mode, default 1): after each size up to 1 MB, a shared-memory flag ping-pong (the\n"
    "floor) and a pipe ping-pong (kernel wake-ups) between the same two ranks, with peerlink's p50 as a\n"
    "multiple of each (x flag, x pipe).\n"
    "--cpus C0,C1: pins rank r (its process, or its thread with --threads) to CPU Cr (one core each).\n";

Config parse(int argc, char** argv) {
  Config c;
  c.id.from_env();
  bench::Args a(argc, argv);
  while (a.next()) {
    if (a.flag("-b", "--minbytes")) c.min_bytes = bench::parse_size(a.value());
    else if (a.flag("-e", "--maxbytes")) c.max_bytes = bench::parse_size(a.value());
    else if (a.flag("-f", "--stepfactor")) c.factor = static_cast<size_t>(bench::parse_int("-f", a.value(), 2, 1 << 20));
    else if (a.flag("-n", "--iters")) c.engine.iters = static_cast<int>(bench::parse_int("-n", a.value(), 1, 1 << 24));
    else if (a.flag("-w", "--warmup_iters")) c.engine.warmup = static_cast<int>(bench::parse_int("-w", a.value(), 0, 1 << 24));
    else if (a.flag("--window")) c.engine.window = static_cast<int>(bench::parse_int("--window", a.value(), 1, 4096));
    else if (a.flag("--mode")) {
      std::string m = a.value();
      if (m == "latency") c.engine.mode = bench::Mode::Latency;
      else if (m == "bandwidth" || m == "bw") c.engine.mode = bench::Mode::Bandwidth;
      else if (m == "bidir") c.engine.mode = bench::Mode::Bidir;
      else if (m == "stream") c.stream = true;
      else throw bench::UsageError("--mode '" + m + "' is not latency, bandwidth, bidir or stream");
    } else if (a.flag("--transport")) c.transport = a.value();
    else if (a.flag("--completion")) c.completion = a.value();
    else if (a.flag("--gpus")) c.gpus = bench::parse_int_list("--gpus", a.value());
    else if (a.flag("--json")) c.json = a.value();
    else if (a.flag("--csv")) c.csv = a.value();
    else if (a.flag("--verify-full")) c.engine.full_verify_limit = bench::parse_size(a.value());
    else if (a.flag("--timeout-ms")) c.timeout_ms = static_cast<int>(bench::parse_int("--timeout-ms", a.value(), 1, 86400000));
    else if (a.flag("--time-limit")) c.time_limit_s = static_cast<int>(bench::parse_int("--time-limit", a.value(), 1, 86400));
    else if (a.flag("--rank")) c.id.rank = static_cast<int>(bench::parse_int("--rank", a.value(), 0, 63));
    else if (a.flag("--world")) c.id.world_size = static_cast<int>(bench::parse_int("--world", a.value(), 1, 64));
    else if (a.flag("--uid")) c.id.unique_id = a.value();
    else if (a.flag("--demo")) c.demo = true;
    else if (a.flag("-G", "--cudagraph")) c.graph = bench::parse_int("-G", a.value(), 0, 1 << 20) > 0;
    else if (a.flag("--no-nccl")) c.nccl = false;
    else if (a.flag("--threads")) c.threads = true;
    else if (a.flag("--anchors")) c.anchors = bench::parse_int("--anchors", a.value(), 0, 1) != 0;
    else if (a.flag("--cpus")) c.cpus = bench::parse_int_list("--cpus", a.value());
    else if (a.flag("--ll-max")) c.ll_max = static_cast<long long>(bench::parse_size(a.value()));
    else if (a.flag("--ce-min")) c.ce_min = static_cast<long long>(bench::parse_size(a.value()));
    else if (a.flag("--ce-lanes")) c.ce_lanes = bench::parse_int("--ce-lanes", a.value(), 1, 4);
    else if (a.flag("--acquire-load")) c.acquire = bench::parse_int("--acquire-load", a.value(), 0, 1);
    else if (a.flag("--pdl")) c.pdl = bench::parse_int("--pdl", a.value(), 0, 1);
    else if (a.flag("--stream-blocks")) c.blocks = bench::parse_int("--stream-blocks", a.value(), 0, 1024);
    else if (a.flag("--inject-error")) c.engine.inject_error = true;
    else if (a.flag("-h", "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw bench::UsageError("unknown flag '" + a.current() + "'");
  }
  if (c.transport != "auto" && c.transport != "direct" && c.transport != "relay")
    throw bench::UsageError("--transport '" + c.transport + "' is not auto, direct or relay");
  if (c.completion != "auto" && c.completion != "done_seq" && c.completion != "ring")
    throw bench::UsageError("--completion '" + c.completion + "' is not auto, done_seq or ring");
  if (c.demo) {
    c.engine.sizes = {8, 256, 4096, 65536, size_t(1) << 20, size_t(16) << 20, size_t(64) << 20};
    c.engine.mode = bench::Mode::Latency;
    c.engine.iters = 20;
    c.engine.warmup = 3;
  } else {
    c.engine.sizes = bench::size_sweep(c.min_bytes, c.max_bytes, c.factor);
  }
  c.id.validate();
  if (c.threads && c.id.launched()) throw bench::UsageError("--threads runs both ranks itself: not with a launcher's rank");
  if (!c.cpus.empty() && c.cpus.size() != 2) throw bench::UsageError("--cpus needs two CPUs (one per rank)");
  if (c.id.launched() && c.id.world_size != 2)
    throw bench::UsageError("bench_transport measures one pair: world size must be 2, got " +
                            std::to_string(c.id.world_size));
  return c;
}

peerlink::Options make_options(const Config& c) {
  peerlink::Options o = peerlink::Options::from_env();
  if (c.transport == "direct") o.path = peerlink::Path::Direct;
  else if (c.transport == "relay") o.path = peerlink::Path::Relay;
  else o.path = peerlink::Path::Auto;
  if (c.completion == "done_seq") o.completion = peerlink::Completion::DoneSeq;
  else if (c.completion == "ring") o.completion = peerlink::Completion::Ring;
  else o.completion = peerlink::Completion::Auto;
  if (c.timeout_ms > 0) o.timeout = std::chrono::milliseconds(c.timeout_ms);
  if (c.ll_max >= 0) o.stream_ll_max = static_cast<size_t>(c.ll_max);
  if (c.ce_min >= 0) o.stream_ce_min = static_cast<size_t>(c.ce_min);
  if (c.ce_lanes >= 0) o.stream_ce_lanes = static_cast<int>(c.ce_lanes);
  if (c.acquire >= 0) o.stream_acquire_load = c.acquire != 0;
  if (c.pdl >= 0) o.stream_pdl = static_cast<int>(c.pdl);
  if (c.blocks >= 0) o.stream_blocks = static_cast<int>(c.blocks);
  o.validate();  // a flag out of range: InvalidArgument naming the field
  return o;
}

// Sizes above this run no anchors: they measure copy bandwidth there, not wake-ups.
constexpr size_t kAnchorMaxBytes = size_t(1) << 20;

// What `make run` says first: which backend ran, on how many cores (and how loaded they were), and
// where the GPU numbers are.
void print_demo_header(int device) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(sysconf(_SC_NPROCESSORS_ONLN));
  double load[1] = {0};
  const bool have_load = getloadavg(load, 1) == 1;
  if (device < 0)
    std::printf("# peerlink demo: host backend (device -1: POSIX shared memory between the 2 processes%s)\n",
                peerlink::device::count() > 0 ? "" : "; no GPU found");
  else
    std::printf("# peerlink demo: %s backend, GPU %d and its peer, 2 processes\n", peerlink::device::runtime_name(), device);
  std::printf("# machine: %d CPU core%s available", cores, cores == 1 ? "" : "s");
  if (have_load) std::printf(", load average %.2f", load[0]);
  std::printf("; a loaded machine slows the host backend (compare the flag and pipe anchors of the same run)\n");
  std::printf("# GPU numbers (H200, NVLink): docs/performance.md\n");
}

// One rank's whole run; rank 0 prints and writes the results. Returns the exit code.
int run_rank(const Config& c, const std::string& uid, int rank, int device) {
  if (!c.cpus.empty()) {  // before the communicator: its workers inherit the mask
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(c.cpus[size_t(rank)], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      throw bench::UsageError("--cpus: cannot run rank " + std::to_string(rank) + " on CPU " +
                              std::to_string(c.cpus[size_t(rank)]));
  }
  peerlink::Communicator comm(uid, rank, 2, device, make_options(c));
  if (c.stream) {
    bench::StreamBenchConfig sc;
    sc.sizes = c.engine.sizes;
    sc.iters = c.engine.iters;
    sc.warmup = c.engine.warmup;
    sc.graph = c.graph;
    sc.nccl = c.nccl;
    const peerlink::Options& o = comm.options();
    sc.knobs = "ll_max=" + std::to_string(o.stream_ll_max) + " ce_min=" + std::to_string(o.stream_ce_min) +
               " ce_lanes=" + std::to_string(o.stream_ce_lanes) + " acquire_load=" + std::to_string(int(o.stream_acquire_load)) +
               " pdl=" + std::to_string(o.stream_pdl) + " blocks=" + std::to_string(o.stream_blocks);
    return bench::StreamBench(comm, sc).run();
  }
  std::vector<bench::SizeResult> rows;
  std::string path, completion;
  {
    bench::PairEngine engine(comm, c.engine);
    path = peerlink::to_string(comm.path_to(1 - rank));
    completion = peerlink::to_string(comm.completion_with(1 - rank));
    if (c.engine.mode == bench::Mode::Latency && c.anchors) {
      // Interleaved per size, so a load change on a shared machine shows in both columns.
      const size_t max_size = *std::max_element(c.engine.sizes.begin(), c.engine.sizes.end());
      bench::RawAnchors anchors(comm, uid, std::min(max_size, kAnchorMaxBytes));
      for (size_t s : c.engine.sizes) {
        bench::SizeResult r = engine.run_one(s);
        if (s <= anchors.max_bytes()) {
          r.flag_p50_us = anchors.flag_p50(s, c.engine.iters, c.engine.warmup);
          r.pipe_p50_us = anchors.pipe_p50(s, c.engine.iters, c.engine.warmup);
        }
        rows.push_back(r);
      }
      engine.finish();
    } else {
      rows = engine.run();
    }
  }
  if (rank != 0) return 0;
  std::vector<int> devs = c.gpus;
  std::vector<std::pair<std::string, std::string>> meta = {
      {"mode", bench::to_string(c.engine.mode)},
      {"transport", path},
      {"transport_requested", c.transport},
      {"completion", completion},
      {"completion_requested", c.completion},
      {"device_rank0", std::to_string(device)},
      {"runtime", peerlink::device::runtime_name()},
      {"iters", std::to_string(c.engine.iters)},
      {"warmup", std::to_string(c.engine.warmup)},
      {"window", std::to_string(c.engine.mode == bench::Mode::Latency ? 1 : c.engine.window)},
      {"anchors", bench::any_anchors(rows) ? "flag,pipe" : "none"},
      {"cpus", c.cpus.empty() ? "unpinned" : std::to_string(c.cpus[0]) + "," + std::to_string(c.cpus[1])},
  };
  if (c.demo) print_demo_header(device);
  std::printf("# bench_transport mode=%s transport=%s (requested %s) completion=%s (requested %s) "
              "device(rank0)=%d iters=%d warmup=%d cpus=%s\n",
              bench::to_string(c.engine.mode), path.c_str(), c.transport.c_str(), completion.c_str(),
              c.completion.c_str(), device, c.engine.iters, c.engine.warmup,
              c.cpus.empty() ? "unpinned" : (std::to_string(c.cpus[0]) + "," + std::to_string(c.cpus[1])).c_str());
  if (c.engine.mode == bench::Mode::Latency)
    std::printf("# latency: one-way = ping-pong round trip / 2; GB/s = size / p50 one-way%s\n",
                bench::any_anchors(rows) ? "; flag / pipe: the same ping-pong as a shared-memory flag / through "
                                           "a pipe between the same processes; x: peerlink p50 / anchor p50"
                                         : "");
  else
    std::printf("# %s: us per message (iteration / window); GB/s = bytes moved / p50 iteration time\n",
                bench::to_string(c.engine.mode));
  bench::print_table(stdout, rows);
  if (!c.json.empty()) bench::write_json(c.json, "bench_transport", meta, rows);
  if (!c.csv.empty()) bench::write_csv(c.csv, meta, rows);
  uint64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  if (wrong) {
    std::fprintf(stderr, "bench_transport: %llu payload bytes were wrong\n", static_cast<unsigned long long>(wrong));
    return 2;
  }
  return 0;
}

std::vector<int> default_devices(int count) {
  if (count >= 2) return {0, 1};
  if (count == 1) return {0, 0};
  return {peerlink::kHostDevice, peerlink::kHostDevice};
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    c = parse(argc, argv);
  } catch (const bench::UsageError& e) {
    std::fprintf(stderr, "bench_transport: %s\n%s", e.what(), kUsage);
    return 1;
  }
  try {
    if (c.id.launched()) {
      std::vector<int> devs = c.gpus;
      if (devs.empty()) {
        int n = peerlink::device::count();
        devs = n > 0 ? std::vector<int>{0 % n, 1 % n} : default_devices(0);
      }
      if (static_cast<int>(devs.size()) <= c.id.rank) throw bench::UsageError("--gpus names no device for this rank");
      return run_rank(c, c.id.unique_id, c.id.rank, devs[c.id.rank]);
    }
    std::vector<int> devs = c.gpus.empty() ? default_devices(bench::probe_device_count()) : c.gpus;
    if (devs.size() != 2) throw bench::UsageError("--gpus needs two devices (one per rank)");
    std::string uid = bench::make_unique_id("bt");
    if (c.threads) {
      Config cc = c;
      if (devs[0] == devs[1] && cc.nccl) {
        std::printf("# --threads on one device: no NCCL columns (NCCL refuses two ranks on one GPU)\n");
        cc.nccl = false;
      }
      return bench::thread_ranks(
          2, [&](int r) { return run_rank(cc, uid, r, devs[r]); }, std::chrono::seconds(c.time_limit_s));
    }
    return bench::fork_ranks(
        2, [&](int r) { return run_rank(c, uid, r, devs[r]); }, std::chrono::seconds(c.time_limit_s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transport: %s\n", e.what());
    return 1;
  }
}
