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
};

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

inline void print_table(FILE* f, const std::vector<SizeResult>& rows) {
  std::fprintf(f, "%12s | %10s | %10s | %9s | %6s | %s\n", "Size", "p50 us", "p99 us", "GB/s", "window", "#wrong");
  for (const auto& r : rows)
    std::fprintf(f, "%12zu | %10.2f | %10.2f | %9.2f | %6d | %llu\n", r.bytes, r.p50_us, r.p99_us, r.gbps,
                 r.window, static_cast<unsigned long long>(r.wrong));
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
                  "\"mean_us\": %.3f, \"gbps\": %.3f, \"wrong\": %llu}%s\n",
                  r.bytes, r.iters, r.window, r.p50_us, r.p99_us, r.mean_us, r.gbps,
                  static_cast<unsigned long long>(r.wrong), i + 1 < rows.size() ? "," : "");
    o << buf;
  }
  o << "  ]\n}\n";
  if (!o) throw std::runtime_error("writing JSON file '" + path + "' failed");
}

inline void write_csv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& meta,
                      const std::vector<SizeResult>& rows) {
  std::ofstream o(path);
  if (!o) throw std::runtime_error("cannot write CSV file '" + path + "'");
  for (const auto& m : meta) o << "# " << m.first << "=" << m.second << "\n";
  o << "bytes,iters,window,p50_us,p99_us,mean_us,gbps,wrong\n";
  for (const auto& r : rows) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%zu,%d,%d,%.3f,%.3f,%.3f,%.3f,%llu\n", r.bytes, r.iters, r.window, r.p50_us,
                  r.p99_us, r.mean_us, r.gbps, static_cast<unsigned long long>(r.wrong));
    o << buf;
  }
  if (!o) throw std::runtime_error("writing CSV file '" + path + "' failed");
}

}  // namespace bench
