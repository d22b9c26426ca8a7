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

#include "peerlink/communicator.h"
#include "report.h"
#include "table_report.h"

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
    for (const ArImpl* i : impls_) table::print_availability(i->name, i->available, i->why);
    std::printf("#%11s %12s %8s %6s", "", "", "", "");
    for (const ArImpl* i : impls_) std::printf("   %-33s", i->name);
    std::printf("\n#%11s %12s %8s %6s", "size", "count", "type", "redop");
    table::print_cell_heads(2);
    std::printf("\n#%11s %12s %8s %6s", "(B)", "(elements)", "", "");
    table::print_cell_units(2);
    std::printf("\n");
    std::fflush(stdout);
  }

  // Collective: every rank calls it once per size, in the same order.
  void add(size_t bytes, size_t count, const ArRow rows[2]) {
    const std::vector<table::Cell> cells = table::gather(comm_, rows, 2);
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
      a.time_us = cells[k].time_us;
      a.wrong = cells[k].wrong;
      a.ok = impls_[k]->available && cells[k].ok;
      if (!impls_[k]->available) {
        table::print_unavailable_cell();
        continue;
      }
      if (!a.ok) {
        failures_++;
        table::print_error_cell();
        continue;
      }
      a.algbw = table::algbw(bytes, a.time_us);
      a.busbw = a.algbw * 2.0 * (n_ - 1) / n_;
      wrong_ += a.wrong;
      table::print_cell(a.time_us, a.algbw, a.busbw, a.wrong, meta_.check);
      rows_.push_back(a);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  // Rank 0: summary and JSON. Returns the exit code (0 only when nothing was wrong or failed).
  int finish() {
    if (comm_.rank() != 0) return 0;
    table::print_wrong_total(wrong_, meta_.check);
    for (const ArImpl* i : impls_) {
      double sum = 0;
      int cnt = 0;
      for (const Agg& a : rows_)
        if (a.impl == std::string(i->name)) sum += a.busbw, ++cnt;
      if (cnt) table::print_avg_busbw(i->name, sum / cnt);
    }
    if (!meta_.json.empty()) write_json();
    return table::exit_code(wrong_, failures_);
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
