// The nccl-tests style table of the collective benchmarks (bench_allreduce: allreduce_report.h,
// bench_collectives: coll_bench.h): each implementation's cell of a size row gathered from every
// rank (max time, summed #wrong, failed anywhere), the cells' column heads, the cells, and the
// summary lines. The leading columns (size, count, type, ...) are the callers' own.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "peerlink/communicator.h"

namespace bench::table {

// One implementation's result of one size row over all ranks.
struct Cell {
  double time_us = 0;  // the slowest rank's
  uint64_t wrong = 0;  // summed over ranks
  bool ok = true;      // no rank failed
};

// Collective: every rank calls it once per row, in the same order, with its own results of the
// row's `k` implementations; every rank gets the gathered cells. Row has time_us, wrong and ok.
template <class Row>
std::vector<Cell> gather(peerlink::Communicator& comm, const Row* rows, int k) {
  struct Wire {
    double time_us;
    uint64_t wrong;
    int32_t ok, pad;
  };
  const int n = comm.world_size();
  std::vector<Wire> mine(k), all(static_cast<size_t>(k) * n);
  for (int i = 0; i < k; ++i) mine[i] = {rows[i].time_us, rows[i].wrong, rows[i].ok ? 1 : 0, 0};
  comm.allgather_bytes(mine.data(), sizeof(Wire) * k, all.data());
  std::vector<Cell> cells(k);
  for (int i = 0; i < k; ++i)
    for (int r = 0; r < n; ++r) {
      const Wire& w = all[static_cast<size_t>(r) * k + i];
      cells[i].time_us = std::max(cells[i].time_us, w.time_us);
      cells[i].wrong += w.wrong;
      cells[i].ok = cells[i].ok && w.ok;
    }
  return cells;
}

// GB/s of `bytes` moved in `time_us` (0 for no time).
inline double algbw(size_t bytes, double time_us) {
  return time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e-6) / 1e9 : 0;
}

// `why`: the reason when unavailable; `note`: said after "available" when not empty.
inline void print_availability(const char* name, bool available, const std::string& why,
                               const std::string& note = "") {
  const std::string what = available ? (note.empty() ? "available" : "available (" + note + ")")
                                     : "unavailable (" + why + ")";
  std::printf("# %-8s : %s\n", name, what.c_str());
}

// The cells' parts of the two head lines, for `k` implementations.
inline void print_cell_heads(int k) {
  for (int i = 0; i < k; ++i) std::printf(" %10s %7s %7s %6s", "time", "algbw", "busbw", "#wrong");
}
inline void print_cell_units(int k) {
  for (int i = 0; i < k; ++i) std::printf(" %10s %7s %7s %6s", "(us)", "(GB/s)", "(GB/s)", "");
}

inline void print_unavailable_cell() { std::printf(" %10s %7s %7s %6s", "n/a", "n/a", "n/a", "n/a"); }
inline void print_error_cell() { std::printf(" %10s %7s %7s %6s", "error", "-", "-", "-"); }
// `checked` false (-c 0): the results were not verified, #wrong prints N/A.
inline void print_cell(double time_us, double algbw, double busbw, uint64_t wrong, bool checked) {
  if (checked)
    std::printf(" %10.2f %7.2f %7.2f %6llu", time_us, algbw, busbw, static_cast<unsigned long long>(wrong));
  else
    std::printf(" %10.2f %7.2f %7.2f %6s", time_us, algbw, busbw, "N/A");
}

// Summary lines after the table.
inline void print_wrong_total(uint64_t wrong, bool checked) {
  if (checked)
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong), wrong ? "ERROR" : "OK");
  else
    std::printf("# Out of bounds values : N/A (-c 0: results not checked)\n");
}
inline void print_avg_busbw(const char* name, double avg) {
  std::printf("# Avg bus bandwidth (%s) : %.3f\n", name, avg);
}

// The benchmarks' exit code: 2 when a payload was wrong, 3 when a row failed, else 0.
inline int exit_code(uint64_t wrong, int failures) { return wrong ? 2 : failures ? 3 : 0; }

}  // namespace bench::table
