// p2p_matrix: the p2pBandwidthLatencyTest view of peerlink. For every ordered device pair (a, b),
// and for the direct and relay paths, two forked ranks on a and b measure unidirectional and
// bidirectional bandwidth and one-way latency through the public API with verified payloads.
// On the host backend the "devices" are two host ranks (a 2x2 matrix), which keeps CI covering it.
//   p2p_matrix [-s 256M] [-l 8] [-n 10] [--lat-iters 200] [--paths direct,relay] [--gpus 0,1] [--json F]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/launch.h"
#include "common/p2p_engine.h"
#include "common/report.h"
#include "peerlink/peerlink.h"

namespace {

struct Config {
  size_t bw_bytes = 0;  // 0: 256M on GPUs, 4M on the host backend
  size_t lat_bytes = 8;
  int iters = 10, warmup = 3, lat_iters = 200, window = 4;
  std::vector<std::string> paths = {"direct", "relay"};
  std::vector<int> gpus;
  std::string json;
  int cell_limit_s = 120;
};

// What rank 0 of one cell leaves for the supervisor (shared anonymous memory).
struct Cell {
  int done;
  int path_used;  // peerlink::Path
  double uni_gbps, bidir_gbps, lat_p50_us, lat_p99_us;
  unsigned long long wrong;
};

const char* kUsage =
    "usage: p2p_matrix [-s BW_BYTES] [-l LAT_BYTES] [-n ITERS] [-w WARMUP] [--lat-iters N] [--window N]\n"
    "  [--paths direct,relay] [--gpus D0,D1,..] [--json FILE] [--cell-limit S]\n";

Config parse(int argc, char** argv) {
  Config c;
  bench::Args a(argc, argv);
  while (a.next()) {
    if (a.flag("-s", "--bw-bytes")) c.bw_bytes = bench::parse_size(a.value());
    else if (a.flag("-l", "--lat-bytes")) c.lat_bytes = bench::parse_size(a.value());
    else if (a.flag("-n", "--iters")) c.iters = static_cast<int>(bench::parse_int("-n", a.value(), 1, 1 << 20));
    else if (a.flag("-w", "--warmup_iters")) c.warmup = static_cast<int>(bench::parse_int("-w", a.value(), 0, 1 << 20));
    else if (a.flag("--lat-iters")) c.lat_iters = static_cast<int>(bench::parse_int("--lat-iters", a.value(), 1, 1 << 24));
    else if (a.flag("--window")) c.window = static_cast<int>(bench::parse_int("--window", a.value(), 1, 1024));
    else if (a.flag("--gpus")) c.gpus = bench::parse_int_list("--gpus", a.value());
    else if (a.flag("--json")) c.json = a.value();
    else if (a.flag("--cell-limit")) c.cell_limit_s = static_cast<int>(bench::parse_int("--cell-limit", a.value(), 1, 86400));
    else if (a.flag("--paths")) {
      c.paths.clear();
      std::string v = a.value();
      for (size_t p = 0; p <= v.size();) {
        size_t q = v.find(',', p);
        std::string item = v.substr(p, q == std::string::npos ? std::string::npos : q - p);
        if (item != "direct" && item != "relay") throw bench::UsageError("--paths item '" + item + "' is not direct or relay");
        c.paths.push_back(item);
        if (q == std::string::npos) break;
        p = q + 1;
      }
    } else if (a.flag("-h", "--help")) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw bench::UsageError("unknown flag '" + a.current() + "'");
  }
  return c;
}

// Both ranks of one cell: three engines (latency, bandwidth, bidir) on one communicator, each
// publishing its buffers at a higher version than the one before.
int run_cell(const Config& c, const std::string& uid, int rank, int device, const std::string& path, size_t bw,
             Cell* out) {
  peerlink::Options o = peerlink::Options::from_env();
  o.path = path == "relay" ? peerlink::Path::Relay : peerlink::Path::Direct;
  peerlink::Communicator comm(uid, rank, 2, device, o);
  bench::EngineConfig e;
  e.window = c.window;
  e.warmup = c.warmup;
  unsigned long long wrong = 0;
  auto run = [&](bench::Mode m, size_t bytes, int iters, uint64_t version) {
    e.mode = m;
    e.sizes = {bytes};
    e.iters = iters;
    e.version = version;
    bench::PairEngine eng(comm, e);
    bench::SizeResult r = eng.run().at(0);
    wrong += r.wrong;
    return r;
  };
  bench::SizeResult lat = run(bench::Mode::Latency, c.lat_bytes, c.lat_iters, 1);
  bench::SizeResult uni = run(bench::Mode::Bandwidth, bw, c.iters, 2);
  bench::SizeResult bi = run(bench::Mode::Bidir, bw, c.iters, 3);
  if (rank == 0) {
    out->path_used = static_cast<int>(comm.path_to(1));
    out->lat_p50_us = lat.p50_us;
    out->lat_p99_us = lat.p99_us;
    out->uni_gbps = uni.gbps;
    out->bidir_gbps = bi.gbps;
    out->wrong = wrong;
    out->done = 1;
  }
  return wrong ? 2 : 0;
}

void print_matrix(const char* title, const std::vector<int>& devs, const std::vector<Cell>& cells, size_t base,
                  double Cell::*field) {
  const size_t n = devs.size();
  std::printf("%s\n   D\\D", title);
  for (size_t b = 0; b < n; ++b) std::printf(" %9zu", b);
  std::printf("\n");
  for (size_t a = 0; a < n; ++a) {
    std::printf("%7zu", a);
    for (size_t b = 0; b < n; ++b) {
      const Cell& x = cells[base + a * n + b];
      if (x.done) std::printf(" %9.2f", x.*field);
      else std::printf(" %9s", "fail");
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    c = parse(argc, argv);
  } catch (const bench::UsageError& e) {
    std::fprintf(stderr, "p2p_matrix: %s\n%s", e.what(), kUsage);
    return 1;
  }
  std::vector<int> devs = c.gpus;
  if (devs.empty()) {
    int d = bench::probe_device_count();
    if (d == 0) devs = {peerlink::kHostDevice, peerlink::kHostDevice};
    for (int i = 0; i < d; ++i) devs.push_back(i);
  }
  const bool host = devs[0] < 0;
  const size_t bw = c.bw_bytes ? c.bw_bytes : host ? size_t(4) << 20 : size_t(256) << 20;
  const size_t n = devs.size(), per_path = n * n;
  Cell* cells = bench::shared_anonymous<Cell>(per_path * c.paths.size());
  int failures = 0;
  std::printf("# p2p_matrix devices=%zu (%s) bandwidth message=%zu B window=%d iters=%d latency message=%zu B iters=%d\n",
              n, host ? "host backend" : peerlink::device::runtime_name(), bw, c.window, c.iters, c.lat_bytes, c.lat_iters);
  for (size_t p = 0; p < c.paths.size(); ++p)
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        Cell* out = &cells[p * per_path + a * n + b];
        std::string uid = bench::make_unique_id("pm");
        int d[2] = {devs[a], devs[b]};
        int rc = bench::fork_ranks(
            2, [&](int r) { return run_cell(c, uid, r, d[r], c.paths[p], bw, out); }, std::chrono::seconds(c.cell_limit_s));
        if (rc != 0 || !out->done) {
          std::fprintf(stderr, "p2p_matrix: cell %zu->%zu (%s) failed with %d\n", a, b, c.paths[p].c_str(), rc);
          out->done = 0;
          ++failures;
        }
      }
  unsigned long long wrong = 0;
  std::vector<Cell> v(cells, cells + per_path * c.paths.size());
  for (size_t p = 0; p < c.paths.size(); ++p) {
    std::string pth = c.paths[p];
    print_matrix(("\nUnidirectional bandwidth (GB/s), path " + pth).c_str(), devs, v, p * per_path, &Cell::uni_gbps);
    print_matrix(("\nBidirectional bandwidth (GB/s, both directions), path " + pth).c_str(), devs, v, p * per_path, &Cell::bidir_gbps);
    print_matrix(("\nOne-way latency p50 (us), path " + pth).c_str(), devs, v, p * per_path, &Cell::lat_p50_us);
    print_matrix(("\nOne-way latency p99 (us), path " + pth).c_str(), devs, v, p * per_path, &Cell::lat_p99_us);
  }
  for (const Cell& x : v) wrong += x.wrong;
  if (!c.json.empty()) {
    std::ofstream o(c.json);
    o << "{\n  \"benchmark\": \"p2p_matrix\",\n  \"meta\": {\"bw_bytes\": \"" << bw << "\", \"lat_bytes\": \""
      << c.lat_bytes << "\", \"window\": \"" << c.window << "\"},\n  \"cells\": [\n";
    for (size_t p = 0; p < c.paths.size(); ++p)
      for (size_t i = 0; i < per_path; ++i) {
        const Cell& x = v[p * per_path + i];
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "    {\"a\": %zu, \"b\": %zu, \"path\": \"%s\", \"ok\": %s, \"uni_gbps\": %.3f, \"bidir_gbps\": "
                      "%.3f, \"lat_p50_us\": %.3f, \"lat_p99_us\": %.3f, \"wrong\": %llu}%s\n",
                      i / n, i % n, c.paths[p].c_str(), x.done ? "true" : "false", x.uni_gbps, x.bidir_gbps,
                      x.lat_p50_us, x.lat_p99_us, x.wrong, (p + 1 == c.paths.size() && i + 1 == per_path) ? "" : ",");
        o << buf;
      }
    o << "  ]\n}\n";
  }
  std::printf("\n#wrong %llu, failed cells %d\n", wrong, failures);
  return wrong ? 2 : failures ? 3 : 0;
}
