// bench_fused: the tensor-parallel epilogue of a decoder layer, fused against unfused, per (tokens,
// hidden): "fused" is peerlink::allreduce_add_rmsnorm, "unfused" peerlink::allreduce followed by
// peerlink::add_rmsnorm (residual add + RMSNorm in one kernel, one block per row: the work of
// torch's add and rms_norm in one launch). Both out of place on the same inputs, each timed as -n
// calls captured in one CUDA graph (-G 1, default) or issued eagerly, with events around the launch;
// the host backend times wall clock. Time = the slowest rank's, per call. ratio = unfused / fused.
// #wrong: output elements that differ from the reference (residual_out bitwise; norm_out more than
// one ulp from a double-precision norm), summed over ranks, checked before and after the timed loop.
//   bench_fused [--tokens 1,8,32,128,512] [--hidden 4096,8192] [-d bfloat16|float] [-n 20] [-w 5] [-G 1]
//               [--gpus 0,1 | -g N] [--threads] [--inject-error] [--time-limit S]
// Launcher mode: PEERLINK_RANK, PEERLINK_WORLD_SIZE, PEERLINK_UNIQUE_ID (one process per rank).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/launch.h"
#include "common/table_report.h"
#include "peerlink/device.h"
#include "peerlink/peerlink.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<size_t> tokens{1, 8, 32, 128, 512}, hiddens{4096, 8192};
  bool bf16 = true;
  int iters = 20, warmup = 5, graph = 1, nranks = 0, time_limit_s = 900;
  std::vector<int> gpus;
  bool threads = false, inject_error = false;
  bench::LaunchIdentity id;
};

const char* kUsage =
    "usage: bench_fused [--tokens LIST] [--hidden LIST] [-d bfloat16|float] [-n ITERS] [-w WARMUP] [-G 0|1]\n"
    "  [-g NRANKS] [--gpus D0,D1,..] [--threads] [--inject-error] [--time-limit S]\n"
    "  --threads: the ranks as threads of one process (with --gpus 0,0: the single-GPU stand-in)\n";

// "1,8,32": positive counts.
std::vector<size_t> parse_list(const std::string& flag, const std::string& v) {
  std::vector<size_t> out;
  for (size_t p = 0; p <= v.size();) {
    size_t q = v.find(',', p);
    if (q == std::string::npos) q = v.size();
    out.push_back(static_cast<size_t>(bench::parse_int(flag, v.substr(p, q - p), 1, 1 << 24)));
    p = q + 1;
  }
  return out;
}

Config parse(int argc, char** argv) {
  Config c;
  bench::Args a(argc, argv);
  while (a.next()) {
    if (a.flag("--tokens")) c.tokens = parse_list("--tokens", a.value());
    else if (a.flag("--hidden")) c.hiddens = parse_list("--hidden", a.value());
    else if (a.flag("-d", "--datatype")) {
      const std::string v = a.value();
      if (v != "bfloat16" && v != "bf16" && v != "float" && v != "float32")
        throw bench::UsageError("-d '" + v + "' is not bfloat16 or float");
      c.bf16 = v == "bfloat16" || v == "bf16";
    } else if (a.flag("-n", "--iters")) c.iters = static_cast<int>(bench::parse_int("-n", a.value(), 1, 1 << 20));
    else if (a.flag("-w", "--warmup_iters")) c.warmup = static_cast<int>(bench::parse_int("-w", a.value(), 0, 1 << 20));
    else if (a.flag("-G", "--cudagraph")) c.graph = static_cast<int>(bench::parse_int("-G", a.value(), 0, 1));
    else if (a.flag("-g", "--nranks")) c.nranks = static_cast<int>(bench::parse_int("-g", a.value(), 1, 8));
    else if (a.flag("--gpus")) c.gpus = bench::parse_int_list("--gpus", a.value());
    else if (a.flag("--threads")) c.threads = true;
    else if (a.flag("--inject-error")) c.inject_error = true;
    else if (a.flag("--time-limit")) c.time_limit_s = static_cast<int>(bench::parse_int("--time-limit", a.value(), 1, 86400));
    else if (a.flag("-h", "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw bench::UsageError("unknown flag '" + a.current() + "'");
  }
  c.id.from_env();
  c.id.validate();
  if (c.threads && c.id.launched()) throw bench::UsageError("--threads runs every rank itself: not with a launcher's rank");
  return c;
}

// bf16 <-> f32 (round to nearest even), for inputs and the reference.
float bf16_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// The call's data on the host: every rank's input (for the reference), the residual and weight, in
// the element type (bf16 or f32), as floats.
struct HostData {
  bool bf16;
  size_t es() const { return bf16 ? 2 : 4; }
  float round(float v) const { return bf16 ? bf16_f32(f32_bf16(v)) : v; }
  static float gen(size_t seed, size_t i, float lo, float span) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (lo + span * float(x >> 40) / float(1 << 24)) * ((x & 1) ? -1.f : 1.f);
  }
  std::vector<unsigned char> encode(const std::vector<float>& v) const {
    std::vector<unsigned char> out(v.size() * es());
    for (size_t i = 0; i < v.size(); ++i) {
      if (bf16) {
        const uint16_t b = f32_bf16(v[i]);
        std::memcpy(&out[i * 2], &b, 2);
      } else {
        std::memcpy(&out[i * 4], &v[i], 4);
      }
    }
    return out;
  }
  float decode(const unsigned char* p, size_t i) const {
    if (!bf16) {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    uint16_t b;
    std::memcpy(&b, p + i * 2, 2);
    return bf16_f32(b);
  }
  std::vector<float> values(size_t seed, size_t n, float lo, float span) const {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = round(gen(seed, i, lo, span));
    return v;
  }
};

// Output elements of one run that differ from the reference: residual_out bitwise, norm_out within
// one ulp of a double-precision norm. `unfused`: the allreduce rounds its sum before the add.
uint64_t count_wrong(const HostData& d, int world, size_t tokens, size_t hidden, const std::vector<float>& res,
                     const std::vector<float>& w, const std::vector<unsigned char>& norm,
                     const std::vector<unsigned char>& rout, bool unfused) {
  std::vector<std::vector<float>> ins;
  for (int r = 0; r < world; ++r) ins.push_back(d.values(100 + r, tokens * hidden, 0.25f, 1.f));
  uint64_t wrong = 0;
  std::vector<double> ro(hidden);
  for (size_t t = 0; t < tokens; ++t) {
    double ss = 0;
    for (size_t e = 0; e < hidden; ++e) {
      const size_t i = t * hidden + e;
      float acc = ins[0][i];
      for (int r = 1; r < world; ++r) acc += ins[r][i];
      if (unfused) acc = d.round(acc);
      const float want = d.round(acc + res[i]);
      if (d.decode(rout.data(), i) != want) ++wrong;
      ro[e] = want;
      ss += ro[e] * ro[e];
    }
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-6);
    for (size_t e = 0; e < hidden; ++e) {
      const double exact = ro[e] * inv * double(w[e]);
      int ex = 0;
      std::frexp(exact, &ex);
      // bf16: one ulp; f32: 2e-5 relative (the row's sum of squares is an f32 sum in the
      // implementation's order: a few ulps of f32 on a GPU, more for the host's sequential sum).
      const double tol = d.bf16 ? std::ldexp(1.0, std::max(ex - 1, -126) - 7) : 2e-5 * std::fabs(exact) + 1e-30;
      if (std::fabs(double(d.decode(norm.data(), t * hidden + e)) - exact) > tol) ++wrong;
    }
  }
  return wrong;
}

struct Row {
  double time_us = 0;
  uint64_t wrong = 0;
  bool ok = false;
};

class Runner {
 public:
  Runner(const Config& c, peerlink::Communicator& comm, void* stream) : c_(c), comm_(comm), stream_(stream) {
    if (stream_) {
      ev0_ = peerlink::device::timing_event_create();
      ev1_ = peerlink::device::timing_event_create();
    }
  }
  ~Runner() {
    if (ev0_) peerlink::device::event_destroy(ev0_);
    if (ev1_) peerlink::device::event_destroy(ev1_);
  }
  void sync() {
    if (stream_) peerlink::device::stream_sync(stream_);
    peerlink::allreduce_check(comm_);
  }
  // run() -iters times: eager or in one graph; the slowest rank's time per call comes from the row gather.
  template <typename Run>
  double time(Run&& run) {
    for (int i = 0; i < c_.warmup; ++i) run();
    sync();
    peerlink::device::Graph g = nullptr;
    if (stream_ && c_.graph) {
      peerlink::device::begin_capture(stream_);
      try {
        for (int i = 0; i < c_.iters; ++i) run();
      } catch (...) {
        try { peerlink::device::end_capture(stream_); } catch (...) {}
        throw;
      }
      g = peerlink::device::end_capture(stream_);
      peerlink::device::graph_launch(g, stream_);  // uploads the graph, untimed
      sync();
    }
    comm_.barrier();
    const auto t0 = Clock::now();
    if (ev0_) peerlink::device::event_record(ev0_, stream_);
    if (g) peerlink::device::graph_launch(g, stream_);
    else for (int i = 0; i < c_.iters; ++i) run();
    if (ev1_) peerlink::device::event_record(ev1_, stream_);
    sync();
    const double us = ev0_ ? 1e3 * peerlink::device::elapsed_ms(ev0_, ev1_)
                           : std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (g) peerlink::device::graph_destroy(g);
    return us / c_.iters;
  }

 private:
  const Config& c_;
  peerlink::Communicator& comm_;
  void* stream_;
  peerlink::device::Event ev0_ = nullptr, ev1_ = nullptr;
};

int run_rank(const Config& c, const std::string& uid, int rank, int world, const std::vector<int>& devs) {
  const int dev = devs[static_cast<size_t>(rank)];
  void* stream = nullptr;
  if (dev >= 0) {
    peerlink::device::set_current(dev);
    stream = peerlink::device::stream_create();
  }
  struct StreamGuard {
    void* s;
    ~StreamGuard() { if (s) peerlink::device::stream_destroy(s); }
  } sg{stream};
  peerlink::Communicator comm(uid, rank, world, dev);
  const HostData d{c.bf16};
  const auto dt = c.bf16 ? peerlink::DataType::BF16 : peerlink::DataType::F32;
  size_t max_count = 0, max_hidden = 0;
  for (size_t t : c.tokens)
    for (size_t h : c.hiddens) max_count = std::max(max_count, t * h), max_hidden = std::max(max_hidden, h);
  const size_t bytes_max = max_count * d.es();
  std::vector<void*> bufs;
  auto alloc = [&](size_t n) { bufs.push_back(comm.alloc(n)); return bufs.back(); };
  void *in = alloc(bytes_max), *res = alloc(bytes_max), *w = alloc(max_hidden * d.es()), *norm = alloc(bytes_max),
       *rout = alloc(bytes_max), *ar = alloc(bytes_max);
  Runner runner(c, comm, stream);
  if (rank == 0) {
    std::printf("# bench_fused nranks=%d type=%s iters=%d warmup=%d graph=%d eps=1e-06 weight_bias=0\n", world,
                c.bf16 ? "bfloat16" : "float", c.iters, c.warmup, stream && c.graph ? 1 : 0);
    std::printf("# fused: allreduce_add_rmsnorm; unfused: allreduce, then add_rmsnorm (one kernel)\n");
    std::printf("# %7s %7s %9s %11s %11s %8s %7s\n", "tokens", "hidden", "type", "fused(us)", "unfused(us)",
                "ratio", "#wrong");
  }
  uint64_t wrong_total = 0;
  int failures = 0;
  for (size_t h : c.hiddens)
    for (size_t t : c.tokens) {
      Row rows[2];
      const size_t count = t * h, bytes = count * d.es();
      const auto resv = d.values(7, count, 0.5f, 2.f), wv = d.values(9, h, 0.05f, 1.f);
      peerlink::device::copy_sync(in, d.encode(d.values(100 + rank, count, 0.25f, 1.f)).data(), bytes);
      peerlink::device::copy_sync(res, d.encode(resv).data(), bytes);
      peerlink::device::copy_sync(w, d.encode(wv).data(), h * d.es());
      auto fused = [&] { peerlink::allreduce_add_rmsnorm(comm, in, res, w, norm, rout, t, h, dt, 1e-6f, 0.f, stream); };
      auto unfused = [&] {
        peerlink::allreduce(comm, in, ar, count, dt, peerlink::ReduceOp::Sum, stream);
        peerlink::add_rmsnorm(dev, ar, res, w, norm, rout, t, h, dt, 1e-6f, 0.f, stream);
      };
      for (int k = 0; k < 2; ++k) {
        try {
          auto check = [&] {
            std::vector<unsigned char> gn(bytes), gr(bytes);
            peerlink::device::copy_sync(gn.data(), norm, bytes);
            peerlink::device::copy_sync(gr.data(), rout, bytes);
            if (c.inject_error && rank == 0) gn[0] ^= 0x40;
            return count_wrong(d, world, t, h, resv, wv, gn, gr, k == 1);
          };
          std::vector<unsigned char> garbage(bytes, 0xA5);  // no earlier result passes
          peerlink::device::copy_sync(norm, garbage.data(), bytes);
          peerlink::device::copy_sync(rout, garbage.data(), bytes);
          if (k == 0) fused(); else unfused();
          runner.sync();
          rows[k].wrong = check();
          rows[k].time_us = k == 0 ? runner.time(fused) : runner.time(unfused);
          rows[k].wrong += check();
          rows[k].ok = true;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s tokens %zu hidden %zu: %s\n", rank, k == 0 ? "fused" : "unfused", t, h,
                       e.what());
        }
      }
      const std::vector<bench::table::Cell> cells = bench::table::gather(comm, rows, 2);
      if (rank != 0) continue;
      const uint64_t wrong = cells[0].wrong + cells[1].wrong;
      wrong_total += wrong;
      if (!cells[0].ok || !cells[1].ok) {
        ++failures;
        std::printf("  %7zu %7zu %9s %11s %11s %8s %7s\n", t, h, c.bf16 ? "bfloat16" : "float", "error", "error", "-", "-");
        continue;
      }
      std::printf("  %7zu %7zu %9s %11.2f %11.2f %8.2f %7llu\n", t, h, c.bf16 ? "bfloat16" : "float",
                  cells[0].time_us, cells[1].time_us, cells[0].time_us > 0 ? cells[1].time_us / cells[0].time_us : 0.,
                  static_cast<unsigned long long>(wrong));
      std::fflush(stdout);
    }
  comm.barrier();
  for (void* p : bufs) comm.free(p);
  if (rank != 0) return 0;
  bench::table::print_wrong_total(wrong_total, true);
  return bench::table::exit_code(wrong_total, failures);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_main("bench_fused", kUsage, argc, argv, parse, [](const Config& c) {
    if (c.id.launched()) {
      std::vector<int> devs = c.gpus;
      if (devs.empty()) {
        const int n = peerlink::device::count();
        for (int r = 0; r < c.id.world_size; ++r) devs.push_back(n > 0 ? r % n : peerlink::kHostDevice);
      }
      if (static_cast<int>(devs.size()) != c.id.world_size)
        throw bench::UsageError("--gpus names " + std::to_string(devs.size()) + " devices for " +
                                std::to_string(c.id.world_size) + " ranks");
      return run_rank(c, c.id.unique_id, c.id.rank, c.id.world_size, devs);
    }
    const std::vector<int> devs = bench::rank_devices(c.nranks, c.gpus);
    const int n = static_cast<int>(devs.size());
    const std::string uid = bench::make_unique_id("fu");
    auto body = [&](int r) { return run_rank(c, uid, r, n, devs); };
    if (c.threads) return bench::thread_ranks(n, body, std::chrono::seconds(c.time_limit_s));
    return bench::fork_ranks(n, body, std::chrono::seconds(c.time_limit_s));
  });
}
