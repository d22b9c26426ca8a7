// Rows of the allreduce benchmark: per-size results gathered from every rank (max time, summed
// #wrong), printed nccl-tests style by rank 0 and optionally written as JSON for plot.py (where
// "wrong": -1 marks an unchecked run, which plot.py leaves out).
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "report.h"
#include "peerlink/communicator.h"

namespace bench {

// One implementation's allreduce entry, stream-ordered on GPUs.
struct ArImpl {
  const char* name = "";
  bool available = false;
  std::string why;  // when unavailable
  std::function<void(const void*, void*, size_t, void*)> run;
  std::function<void()> after_sync;  // surfaces errors a stream-ordered op recorded (optional)
};

struct ArRow {
  double time_us = 0;
  uint64_t wrong = 0;
  bool ok = false;
  std::string note;  // the error when !ok
};

struct ArMeta {
  std::string dtype, op, json;
  std::string algo = "auto";  // peerlink's algorithm (--algo), "auto" = chosen by size
  int iters = 0, warmup = 0;
  bool graph = false;
  bool check = true;  // false (-c 0): results were not verified, #wrong prints N/A
};

class ArReporter {
 public:
  ArReporter(peerlink::Communicator& comm, ArMeta meta, const ArImpl* impls[2])
      : comm_(comm), meta_(std::move(meta)), impls_{impls[0], impls[1]} {
    n_ = comm.world_size();
    if (comm.rank() != 0) return;
    std::printf("# bench_allreduce nranks=%d type=%s redop=%s iters=%d warmup=%d graph=%d algo=%s\n", n_,
                meta_.dtype.c_str(), meta_.op.c_str(), meta_.iters, meta_.warmup, meta_.graph ? 1 : 0,
                meta_.algo.c_str());
    for (const ArImpl* i : impls_)
      std::printf("# %-8s : %s\n", i->name, i->available ? "available" : ("unavailable (" + i->why + ")").c_str());
    std::printf("#%11s %12s %8s %6s", "", "", "", "");
    for (const ArImpl* i : impls_) std::printf("   %-33s", i->name);
    std::printf("\n#%11s %12s %8s %6s", "size", "count", "type", "redop");
    for (int k = 0; k < 2; ++k) std::printf(" %10s %7s %7s %6s", "time", "algbw", "busbw", "#wrong");
    std::printf("\n#%11s %12s %8s %6s", "(B)", "(elements)", "", "");
    for (int k = 0; k < 2; ++k) std::printf(" %10s %7s %7s %6s", "(us)", "(GB/s)", "(GB/s)", "");
    std::printf("\n");
    std::fflush(stdout);
  }

  // Collective: every rank calls it once per size, in the same order.
  void add(size_t bytes, size_t count, const ArRow rows[2]) {
    struct Wire { double time_us; uint64_t wrong; int32_t ok, pad; } mine[2], all[2 * 64];
    for (int k = 0; k < 2; ++k) mine[k] = {rows[k].time_us, rows[k].wrong, rows[k].ok ? 1 : 0, 0};
    comm_.allgather_bytes(mine, sizeof mine, all);
    for (int k = 0; k < 2; ++k)
      if (impls_[k]->available && !rows[k].ok)
        std::fprintf(stderr, "rank %d: %s allreduce of %zu bytes failed: %s\n", comm_.rank(), impls_[k]->name,
                     bytes, rows[k].note.c_str());
    if (comm_.rank() != 0) return;
    std::printf(" %11zu %12zu %8s %6s", bytes, count, meta_.dtype.c_str(), meta_.op.c_str());
    for (int k = 0; k < 2; ++k) {
      Agg a;
      a.impl = impls_[k]->name;
      a.bytes = bytes;
      a.count = count;
      a.ok = impls_[k]->available;
      for (int r = 0; r < n_; ++r) {
        const Wire& w = all[r * 2 + k];
        a.time_us = std::max(a.time_us, w.time_us);
        a.wrong += w.wrong;
        a.ok = a.ok && w.ok;
      }
      if (!impls_[k]->available) {
        std::printf(" %10s %7s %7s %6s", "n/a", "n/a", "n/a", "n/a");
        continue;
      }
      if (!a.ok) {
        failures_++;
        std::printf(" %10s %7s %7s %6s", "error", "-", "-", "-");
        continue;
      }
      a.algbw = a.time_us > 0 ? static_cast<double>(bytes) / (a.time_us * 1e-6) / 1e9 : 0;
      a.busbw = a.algbw * 2.0 * (n_ - 1) / n_;
      wrong_ += a.wrong;
      if (meta_.check)
        std::printf(" %10.2f %7.2f %7.2f %6llu", a.time_us, a.algbw, a.busbw, static_cast<unsigned long long>(a.wrong));
      else
        std::printf(" %10.2f %7.2f %7.2f %6s", a.time_us, a.algbw, a.busbw, "N/A");
      rows_.push_back(a);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // Rank 0: summary and JSON. Returns the exit code (0 only when nothing was wrong or failed).
  int finish() {
    if (comm_.rank() != 0) return 0;
    if (meta_.check)
      std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong_), wrong_ ? "ERROR" : "OK");
    else
      std::printf("# Out of bounds values : N/A (-c 0: results not checked)\n");
    for (const ArImpl* i : impls_) {
      double sum = 0;
      int cnt = 0;
      for (const Agg& a : rows_)
        if (a.impl == std::string(i->name)) sum += a.busbw, ++cnt;
      if (cnt) std::printf("# Avg bus bandwidth (%s) : %.3f\n", i->name, sum / cnt);
    }
    if (!meta_.json.empty()) write_json();
    return wrong_ ? 2 : failures_ ? 3 : 0;
  }

 private:
  struct Agg {
    std::string impl;
    size_t bytes = 0, count = 0;
    double time_us = 0, algbw = 0, busbw = 0;
    uint64_t wrong = 0;
    bool ok = false;
  };
  void write_json() const {
    std::ofstream o(meta_.json);
    if (!o) throw std::runtime_error("cannot write JSON file '" + meta_.json + "'");
    o << "{\n  \"benchmark\": \"bench_allreduce\",\n  \"meta\": {\"nranks\": \"" << n_ << "\", \"dtype\": \""
      << meta_.dtype << "\", \"op\": \"" << meta_.op << "\", \"graph\": \"" << (meta_.graph ? 1 : 0)
      << "\", \"iters\": \"" << meta_.iters << "\", \"algo\": \"" << meta_.algo
      << "\"},\n  \"results\": [\n";
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Agg& a = rows_[i];
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "    {\"impl\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"time_us\": %.3f, \"algbw\": %.3f, "
                    "\"busbw\": %.3f, \"wrong\": %lld}%s\n",
                    a.impl.c_str(), a.bytes, a.count, a.time_us, a.algbw, a.busbw,
                    meta_.check ? static_cast<long long>(a.wrong) : -1LL, i + 1 < rows_.size() ? "," : "");
      o << buf;
    }
    o << "  ]\n}\n";
  }

  peerlink::Communicator& comm_;
  ArMeta meta_;
  const ArImpl* impls_[2];
  int n_ = 0;
  std::vector<Agg> rows_;
  uint64_t wrong_ = 0;
  int failures_ = 0;
};

}  // namespace bench
