// Result rows, percentiles and the three output forms (table, JSON, CSV) of the benchmarks.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"

namespace bench {

struct SizeResult {
  size_t bytes = 0;
  int iters = 0;
  int window = 1;
  double p50_us = 0, p99_us = 0, mean_us = 0;
  double gbps = 0;
  uint64_t wrong = 0;  // mismatching payload bytes seen by the receivers
  // Raw anchors of the same size between the same ranks (anchors.h), one-way p50 us; < 0: not run.
  double flag_p50_us = -1, pipe_p50_us = -1;
  bool has_anchors() const { return flag_p50_us >= 0 && pipe_p50_us >= 0; }
};

inline bool any_anchors(const std::vector<SizeResult>& rows) {
  for (const auto& r : rows)
    if (r.has_anchors()) return true;
  return false;
}

// Nearest-rank percentile (p in [0, 100]) of `v`; 0 for an empty set.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  if (rank < 1) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}
inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// With anchors: after #wrong, the flag and pipe one-way p50 of the same size and peerlink's p50 as a
// multiple of each ("-" where the anchors were not run).
inline void print_table(FILE* f, const std::vector<SizeResult>& rows) {
  const bool anchors = any_anchors(rows);
  std::fprintf(f, "%12s | %10s | %10s | %9s | %6s | %6s", "Size", "p50 us", "p99 us", "GB/s", "window", "#wrong");
  if (anchors) std::fprintf(f, " | %9s | %9s | %8s | %8s", "flag us", "pipe us", "x flag", "x pipe");
  std::fprintf(f, "\n");
  for (const auto& r : rows) {
    std::fprintf(f, "%12zu | %10.2f | %10.2f | %9.2f | %6d | %6llu", r.bytes, r.p50_us, r.p99_us, r.gbps, r.window,
                 static_cast<unsigned long long>(r.wrong));
    if (anchors && r.has_anchors())
      std::fprintf(f, " | %9.2f | %9.2f | %8.1f | %8.2f", r.flag_p50_us, r.pipe_p50_us,
                   r.flag_p50_us > 0 ? r.p50_us / r.flag_p50_us : 0.0, r.pipe_p50_us > 0 ? r.p50_us / r.pipe_p50_us : 0.0);
    else if (anchors)
      std::fprintf(f, " | %9s | %9s | %8s | %8s", "-", "-", "-", "-");
    std::fprintf(f, "\n");
  }
  std::fflush(f);
}

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

// {"benchmark": ..., "meta": {k: v, ...}, "results": [{...}, ...]}; meta values are strings.
inline void write_json(const std::string& path, const std::string& benchmark,
                       const std::vector<std::pair<std::string, std::string>>& meta,
                       const std::vector<SizeResult>& rows) {
  std::ofstream o(path);
  if (!o) throw std::runtime_error("cannot write JSON file '" + path + "'");
  o << "{\n  \"benchmark\": \"" << json_escape(benchmark) << "\",\n  \"meta\": {";
  for (size_t i = 0; i < meta.size(); ++i)
    o << (i ? ", " : "") << "\"" << json_escape(meta[i].first) << "\": \"" << json_escape(meta[i].second) << "\"";
  o << "},\n  \"results\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "    {\"bytes\": %zu, \"iters\": %d, \"window\": %d, \"p50_us\": %.3f, \"p99_us\": %.3f, "
                  "\"mean_us\": %.3f, \"gbps\": %.3f, \"wrong\": %llu",
                  r.bytes, r.iters, r.window, r.p50_us, r.p99_us, r.mean_us, r.gbps,
                  static_cast<unsigned long long>(r.wrong));
    o << buf;
    if (r.has_anchors()) {
      std::snprintf(buf, sizeof buf,
                    ", \"flag_p50_us\": %.3f, \"pipe_p50_us\": %.3f, \"ratio_flag\": %.3f, \"ratio_pipe\": %.3f",
                    r.flag_p50_us, r.pipe_p50_us, r.flag_p50_us > 0 ? r.p50_us / r.flag_p50_us : 0.0,
                    r.pipe_p50_us > 0 ? r.p50_us / r.pipe_p50_us : 0.0);
      o << buf;
    }
    o << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  if (!o) throw std::runtime_error("writing JSON file '" + path + "' failed");
}

inline void write_csv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& meta,
                      const std::vector<SizeResult>& rows) {
  std::ofstream o(path);
  if (!o) throw std::runtime_error("cannot write CSV file '" + path + "'");
  for (const auto& m : meta) o << "# " << m.first << "=" << m.second << "\n";
  const bool anchors = any_anchors(rows);
  o << "bytes,iters,window,p50_us,p99_us,mean_us,gbps,wrong" << (anchors ? ",flag_p50_us,pipe_p50_us" : "") << "\n";
  for (const auto& r : rows) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%zu,%d,%d,%.3f,%.3f,%.3f,%.3f,%llu", r.bytes, r.iters, r.window, r.p50_us,
                  r.p99_us, r.mean_us, r.gbps, static_cast<unsigned long long>(r.wrong));
    o << buf;
    if (anchors) {
      if (r.has_anchors()) std::snprintf(buf, sizeof buf, ",%.3f,%.3f", r.flag_p50_us, r.pipe_p50_us);
      else std::snprintf(buf, sizeof buf, ",,");
      o << buf;
    }
    o << "\n";
  }
  if (!o) throw std::runtime_error("writing CSV file '" + path + "' failed");
}

}  // namespace bench
