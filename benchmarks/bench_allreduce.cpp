// bench_allreduce: nccl-tests style allreduce benchmark, peerlink and NCCL side by side in the same
// forked ranks (NCCL through dlopen, when libnccl.so.2 exists). Columns per implementation:
// time (us per op, max over ranks; on GPUs measured with events around the timed loop), algbw = bytes / time, busbw = algbw * 2(n-1)/n, #wrong (elements
// that differ from the exact reduction, summed over ranks, checked before and after the timed loop).
//   bench_allreduce -b 8 -e 1G -f 2 -n 20 -w 5 -d bfloat16 -o sum --impl both [-G 1]
// Algorithm sweep (what tests/collectives/sweep used to be): --algo oneshot,twoshot,bandwidth,auto
// runs the size sweep once per algorithm, each on a communicator whose Options::allreduce_algo
// forces it (NCCL, when requested, runs in the first pass only). Tuning knobs come from the
// environment as for every communicator (PEERLINK_ALLREDUCE_BLOCKS=64 bench_allreduce ...).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/allreduce_data.h"
#include "common/allreduce_report.h"
#include "common/cli.h"
#include "common/launch.h"
#include "common/nccl_dl.h"
#include "common/warmup.h"
#include "peerlink/device.h"
#include "peerlink/peerlink.h"
#if __has_include("peerlink/collectives.h")
#include "common/pl_types.h"
#include "peerlink/collectives.h"
#define BENCH_HAVE_PEERLINK_ALLREDUCE 1
// Weak, so this benchmark links against a library whose collectives are not built yet (the header
// and the implementation land separately); run_rank reports peerlink as unavailable then.
namespace peerlink {
void allreduce(Communicator&, const void*, void*, size_t, DataType, ReduceOp, void*) __attribute__((weak));
void allreduce_check(Communicator&) __attribute__((weak));
}
#else
#define BENCH_HAVE_PEERLINK_ALLREDUCE 0
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  size_t min_bytes = 8, max_bytes = size_t(32) << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1, graph = 0, nranks = 0;
  bench::Dt dt = bench::Dt::F32;
  bench::Op op = bench::Op::Sum;
  bool want_peerlink = true, want_nccl = true;
  std::vector<int> gpus;
  std::string json;
  int time_limit_s = 900;
  bool inject_error = false;  // test hook: rank 0 corrupts one result element before the check
  bool threads = false;       // --threads: the ranks as threads of one process (launch.h thread_ranks)
  std::vector<std::string> algos{"auto"};  // --algo: one pass per peerlink algorithm
};

const char* kUsage =
    "usage: bench_allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-G 0|1]\n"
    "  [-d float|half|bfloat16|double|int32|int64] [-o sum|prod|max|min|avg] [-g NRANKS]\n"
    "  [--impl peerlink|nccl|both] [--algo auto|oneshot|twoshot|bandwidth[,..]] [--gpus D0,D1,..]\n"
    "  [--json FILE] [--time-limit S] [--inject-error] [--threads]\n"
    "  --threads: the ranks as threads of one process (with --gpus 0,0: the single-GPU stand-in)\n"
    "  --algo LIST: one size sweep per peerlink algorithm (forced through Options::allreduce_algo);\n"
    "               with --json and several algorithms, FILE gets the algorithm inserted: x.oneshot.json\n";

Config parse(int argc, char** argv) {
  Config c;
  bench::Args a(argc, argv);
  while (a.next()) {
    if (a.flag("-b", "--minbytes")) c.min_bytes = bench::parse_size(a.value());
    else if (a.flag("-e", "--maxbytes")) c.max_bytes = bench::parse_size(a.value());
    else if (a.flag("-f", "--stepfactor")) c.factor = static_cast<size_t>(bench::parse_int("-f", a.value(), 2, 1 << 20));
    else if (a.flag("-n", "--iters")) c.iters = static_cast<int>(bench::parse_int("-n", a.value(), 1, 1 << 24));
    else if (a.flag("-w", "--warmup_iters")) c.warmup = static_cast<int>(bench::parse_int("-w", a.value(), 0, 1 << 24));
    else if (a.flag("-c", "--check")) c.check = static_cast<int>(bench::parse_int("-c", a.value(), 0, 1));
    else if (a.flag("-G", "--cudagraph")) c.graph = static_cast<int>(bench::parse_int("-G", a.value(), 0, 1 << 20)) > 0;
    else if (a.flag("-g", "--nranks")) c.nranks = static_cast<int>(bench::parse_int("-g", a.value(), 1, 8));
    else if (a.flag("-d", "--datatype")) {
      try { c.dt = bench::parse_dt(a.value()); } catch (const std::invalid_argument& e) { throw bench::UsageError(e.what()); }
    } else if (a.flag("-o", "--op")) {
      try { c.op = bench::parse_op(a.value()); } catch (const std::invalid_argument& e) { throw bench::UsageError(e.what()); }
    } else if (a.flag("--impl")) {
      std::string v = a.value();
      if (v != "peerlink" && v != "nccl" && v != "both") throw bench::UsageError("--impl '" + v + "' is not peerlink, nccl or both");
      c.want_peerlink = v != "nccl";
      c.want_nccl = v != "peerlink";
    } else if (a.flag("--gpus")) c.gpus = bench::parse_int_list("--gpus", a.value());
    else if (a.flag("--threads")) c.threads = true;
    else if (a.flag("--json")) c.json = a.value();
    else if (a.flag("--algo")) {
      c.algos.clear();
      std::string v = a.value();
      for (size_t p = 0; p <= v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        std::string name = v.substr(p, q - p);
        try {
          peerlink::parse_allreduce_algo(name);
        } catch (const peerlink::InvalidArgument& e) {
          throw bench::UsageError("--algo: " + std::string(e.what()));
        }
        if (!name.empty()) c.algos.push_back(name);
        p = q + 1;
      }
      if (c.algos.empty()) throw bench::UsageError("--algo: empty list");
    }
    else if (a.flag("--time-limit")) c.time_limit_s = static_cast<int>(bench::parse_int("--time-limit", a.value(), 1, 86400));
    else if (a.flag("--inject-error")) c.inject_error = true;
    else if (a.flag("-h", "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw bench::UsageError("unknown flag '" + a.current() + "'");
  }
  return c;
}

using Impl = bench::ArImpl;
using Row = bench::ArRow;

#if BENCH_HAVE_PEERLINK_ALLREDUCE
using bench::to_pl;  // common/pl_types.h
#endif
int to_nccl(bench::Dt t) {
  using namespace bench::nccl;
  static const int m[] = {Float32, Float16, Bfloat16, Float64, Int32, Int64};
  return m[static_cast<int>(t)];
}
int to_nccl(bench::Op o) {
  using namespace bench::nccl;
  static const int m[] = {Sum, Prod, Max, Min, Avg};
  return m[static_cast<int>(o)];
}

class RankRunner {
 public:
  RankRunner(const Config& c, peerlink::Communicator& comm, void* stream)
      : c_(c), comm_(comm), stream_(stream), pattern_(c.dt, c.op, comm.world_size()) {
    if (stream_) {
      ev0_ = peerlink::device::timing_event_create();
      ev1_ = peerlink::device::timing_event_create();
    }
  }
  ~RankRunner() {
    if (ev0_) peerlink::device::event_destroy(ev0_);
    if (ev1_) peerlink::device::event_destroy(ev1_);
  }
  RankRunner(const RankRunner&) = delete;
  RankRunner& operator=(const RankRunner&) = delete;

  // Untimed calls before the sweep (common/warmup.h).
  void prewarm(Impl& impl, const std::vector<size_t>& counts, void* send, void* recv) {
    bench::prewarm(
        c_.warmup, counts, [&](size_t count) { impl.run(send, recv, count, stream_); }, [&] { sync(impl); });
  }

  // Out-of-place allreduce of `count` elements with `impl`: check, time, check again.
  Row measure(Impl& impl, size_t count, void* send, void* recv, uint64_t seed) {
    Row row;
    const size_t bytes = count * bench::dt_size(c_.dt);
    const int me = comm_.rank();
    try {
      if (in_seed_ != seed || in_count_ != count) {  // both implementations share one input per size
        input_.resize(bytes);
        pattern_.fill_input(me, seed, count, input_.data());
        in_seed_ = seed;
        in_count_ = count;
      }
      peerlink::device::copy_sync(send, input_.data(), bytes);
      host_.assign(bytes, 0xA5);  // the receive buffer starts as garbage: no earlier result passes
      peerlink::device::copy_sync(recv, host_.data(), bytes);
      impl.run(send, recv, count, stream_);
      sync(impl);
      if (c_.inject_error && me == 0) {
        std::fill(host_.begin(), host_.begin() + bench::dt_size(c_.dt), 0x00);
        peerlink::device::copy_sync(recv, host_.data(), bench::dt_size(c_.dt));
      }
      if (c_.check) row.wrong += check(recv, count, seed);
      for (int i = 0; i < c_.warmup; ++i) impl.run(send, recv, count, stream_);
      sync(impl);
      peerlink::device::Graph graph = nullptr;
      if (c_.graph) {
        peerlink::device::begin_capture(stream_);
        try {
          for (int i = 0; i < c_.iters; ++i) impl.run(send, recv, count, stream_);
        } catch (...) {
          try { peerlink::device::end_capture(stream_); } catch (...) {}
          throw;
        }
        graph = peerlink::device::end_capture(stream_);
        peerlink::device::graph_launch(graph, stream_);  // uploads the graph, untimed
        sync(impl);
      }
      comm_.barrier();
      auto t0 = Clock::now();
      if (ev0_) peerlink::device::event_record(ev0_, stream_);
      if (graph) peerlink::device::graph_launch(graph, stream_);
      else for (int i = 0; i < c_.iters; ++i) impl.run(send, recv, count, stream_);
      if (ev1_) peerlink::device::event_record(ev1_, stream_);
      sync(impl);
      // GPUs: the time between two events around the loop on the stream (the issue's "timed
      // back-to-back on one stream with events"); the host backend: wall time.
      double us = ev0_ ? 1e3 * peerlink::device::elapsed_ms(ev0_, ev1_)
                       : std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      row.time_us = us / c_.iters;
      if (graph) peerlink::device::graph_destroy(graph);
      if (c_.check) row.wrong += check(recv, count, seed);  // the timed ops rewrote the same result
      row.ok = true;
    } catch (const std::exception& e) {
      row.note = e.what();
    }
    return row;
  }

 private:
  void sync(const Impl& impl) {
    if (stream_) peerlink::device::stream_sync(stream_);
    if (impl.after_sync) impl.after_sync();
  }
  uint64_t check(void* recv, size_t count, uint64_t seed) {
    const size_t bytes = count * bench::dt_size(c_.dt);
    host_.resize(bytes);
    peerlink::device::copy_sync(host_.data(), recv, bytes);
    return pattern_.count_wrong(seed, count, host_.data());
  }

  const Config& c_;
  peerlink::Communicator& comm_;
  void* stream_;
  bench::AllreducePattern pattern_;
  std::vector<unsigned char> host_, input_;
  uint64_t in_seed_ = 0;
  size_t in_count_ = 0;
  peerlink::device::Event ev0_ = nullptr, ev1_ = nullptr;  // timing events (GPU ranks)
};

// NCCL joins only when every rank can: the library loads, every rank has its own GPU. Rank 0's
// ncclUniqueId reaches the others through the peerlink bootstrap's allgather (SHM).
void setup_nccl(peerlink::Communicator& comm, const std::vector<int>& devs, Impl& nc,
                std::unique_ptr<bench::nccl::Library>& lib, bench::nccl::Comm& ncomm, const Config& c) {
  const int me = comm.rank(), n = comm.world_size();
  std::string why;
  for (int r = 0; r < n && why.empty(); ++r) {
    if (devs[r] < 0) why = "host backend (no GPU)";
    for (int q = 0; q < r && why.empty(); ++q)
      if (devs[q] == devs[r]) why = "ranks " + std::to_string(q) + " and " + std::to_string(r) + " share GPU " + std::to_string(devs[r]);
  }
  if (why.empty()) {
    lib = std::make_unique<bench::nccl::Library>();
    if (!lib->available()) why = lib->why();
  }
  struct Wire { int32_t ok; bench::nccl::UniqueId id; } mine{}, all[64];
  mine.ok = why.empty() ? 1 : 0;
  if (mine.ok && me == 0) lib->check(lib->get_unique_id(&mine.id), "ncclGetUniqueId");
  comm.allgather_bytes(&mine, sizeof mine, all);
  for (int r = 0; r < n; ++r)
    if (!all[r].ok && why.empty()) why = "NCCL unavailable on rank " + std::to_string(r);
  if (!why.empty()) {
    nc.why = why;
    return;
  }
  lib->check(lib->comm_init_rank(&ncomm, n, all[0].id, me), "ncclCommInitRank");
  nc.available = true;
  const int dt = to_nccl(c.dt), op = to_nccl(c.op);
  bench::nccl::Library* l = lib.get();
  nc.run = [l, &ncomm, dt, op](const void* s, void* r, size_t count, void* st) {
    l->check(l->all_reduce(s, r, count, dt, op, ncomm, st), "ncclAllReduce");
  };
  if (me == 0) std::printf("# nccl version %d from %s (NCCL_NVLS_ENABLE=%s)\n", l->version(), l->path().c_str(), std::getenv("NCCL_NVLS_ENABLE"));
}

// One pass: the size sweep with peerlink's algorithm `algo` (and NCCL when with_nccl).
int run_pass(const Config& c, const std::string& uid, int rank, const std::vector<int>& devs, void* stream,
             const std::string& algo, bool with_nccl) {
  const int n = static_cast<int>(devs.size());
  peerlink::Options opts = peerlink::Options::from_env();
  if (algo != "auto") opts.allreduce_algo = peerlink::parse_allreduce_algo(algo);
  peerlink::Communicator comm(uid, rank, n, devs[rank], opts);
  Impl pl, nc;
  pl.name = "peerlink";
  nc.name = "nccl";
#if BENCH_HAVE_PEERLINK_ALLREDUCE
  pl.available = c.want_peerlink && &peerlink::allreduce != nullptr;
  pl.why = !c.want_peerlink ? "not requested" : "libpeerlink has no peerlink::allreduce yet";
  pl.run = [&](const void* s, void* r, size_t count, void* st) {
    peerlink::allreduce(comm, s, r, count, to_pl(c.dt), to_pl(c.op), st);
  };
  if (&peerlink::allreduce_check != nullptr) pl.after_sync = [&comm] { peerlink::allreduce_check(comm); };
#else
  pl.why = "include/peerlink/collectives.h not present in this build";
#endif
  bench::nccl::Comm ncomm = nullptr;
  std::unique_ptr<bench::nccl::Library> lib;
  if (c.want_nccl && with_nccl) setup_nccl(comm, devs, nc, lib, ncomm, c);
  else nc.why = c.want_nccl ? "first --algo pass only" : "not requested";

  auto sizes = bench::size_sweep(c.min_bytes, c.max_bytes, c.factor);
  const size_t es = bench::dt_size(c.dt);
  const size_t max_bytes = sizes.back() / es * es;
  void* send = max_bytes ? comm.alloc(max_bytes) : nullptr;
  void* recv = max_bytes ? comm.alloc(max_bytes) : nullptr;
  RankRunner runner(c, comm, stream);
  const Impl* impls[2] = {&pl, &nc};
  std::string json = c.json;
  if (!json.empty() && c.algos.size() > 1) {
    size_t dot = json.rfind('.');
    json = dot == std::string::npos || json.find('/', dot) != std::string::npos
               ? json + "." + algo
               : json.substr(0, dot) + "." + algo + json.substr(dot);
  }
  bench::ArMeta meta{bench::dt_name(c.dt), bench::op_name(c.op), json, algo, c.iters, c.warmup, c.graph != 0,
                     c.check != 0};
  bench::ArReporter rep(comm, meta, impls);
  size_t first = 0;
  for (size_t bytes : sizes)
    if (!first && bytes / es) first = bytes / es;
  for (Impl* im : {&pl, &nc})
    if (im->available) runner.prewarm(*im, {max_bytes / es, first}, send, recv);
  for (size_t bytes : sizes) {
    size_t count = bytes / es;
    if (count == 0) continue;
    Row rows[2];
    Impl* run_impls[2] = {&pl, &nc};
    for (int k = 0; k < 2; ++k)
      if (run_impls[k]->available) rows[k] = runner.measure(*run_impls[k], count, send, recv, bytes * 2654435761u + 1);
    rep.add(count * es, count, rows);
  }
  comm.barrier();
  if (send) comm.free(send);
  if (recv) comm.free(recv);
  if (ncomm) lib->comm_destroy(ncomm);
  return rep.finish();
}

int run_rank(const Config& c_in, const std::string& uid, int rank, const std::vector<int>& devs) {
  const int dev = devs[rank];
  if (dev < 0 && c_in.graph) {
    if (rank == 0) std::printf("# -G ignored: graph capture needs GPUs (host backend)\n");
  }
  Config c = c_in;
  if (dev < 0) c.graph = 0;
  void* stream = nullptr;
  if (dev >= 0) {
    peerlink::device::set_current(dev);
    stream = peerlink::device::stream_create();
  }
  int rc = 0;
  try {
    for (size_t i = 0; i < c.algos.size(); ++i) {
      int r = run_pass(c, uid + "." + c.algos[i], rank, devs, stream, c.algos[i], i == 0);
      if (rc == 0) rc = r;
    }
  } catch (...) {
    if (stream) peerlink::device::stream_destroy(stream);
    throw;
  }
  if (stream) peerlink::device::stream_destroy(stream);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main("bench_allreduce", kUsage, argc, argv, parse, [](const Config& c) {
    bench::nccl::disable_nvls();
    std::vector<int> devs = bench::rank_devices(c.nranks, c.gpus);
    std::string uid = bench::make_unique_id("ar");
    if (c.threads) {
      Config cc = c;
      if (cc.want_nccl && bench::devices_repeat(devs)) {
        std::printf("# --threads with two ranks on one device: no NCCL columns (NCCL refuses that)\n");
        cc.want_nccl = false;
      }
      return bench::thread_ranks(
          static_cast<int>(devs.size()), [&](int r) { return run_rank(cc, uid, r, devs); },
          std::chrono::seconds(c.time_limit_s));
    }
    return bench::fork_ranks(static_cast<int>(devs.size()), [&](int r) { return run_rank(c, uid, r, devs); },
                             std::chrono::seconds(c.time_limit_s));
  });
}
