// Command-line helpers shared by the benchmarks: nccl-tests style sizes (K/M/G suffixes), a small
// flag reader, and the rank identity (flags or PEERLINK_RANK / PEERLINK_WORLD_SIZE /
// PEERLINK_UNIQUE_ID from a launcher). Header-only because every benchmarks/*.cpp is its own binary.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& w) : std::runtime_error(w) {}
};

// "8", "64K", "1M", "1G" (binary multiples, like nccl-tests), case-insensitive, optional trailing B.
inline size_t parse_size(const std::string& s) {
  if (s.empty()) throw UsageError("empty size");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str() || errno != 0) throw UsageError("size '" + s + "' is not a number");
  std::string suf(end);
  if (!suf.empty() && (suf.back() == 'B' || suf.back() == 'b') && suf.size() > 1) suf.pop_back();
  unsigned long long mult = 1;
  if (suf.empty()) mult = 1;
  else if (suf == "K" || suf == "k") mult = 1ull << 10;
  else if (suf == "M" || suf == "m") mult = 1ull << 20;
  else if (suf == "G" || suf == "g") mult = 1ull << 30;
  else if (suf == "B" || suf == "b") mult = 1;
  else throw UsageError("size '" + s + "' has an unknown suffix '" + suf + "' (use K, M or G)");
  if (v > (~0ull) / mult) throw UsageError("size '" + s + "' overflows");
  return static_cast<size_t>(v * mult);
}

inline long long parse_int(const std::string& flag, const std::string& s, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw UsageError(flag + " '" + s + "' is not an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

// Geometric sweep min..max by factor (nccl-tests -b/-e/-f); always includes min, and max when the
// factor lands on it.
inline std::vector<size_t> size_sweep(size_t min, size_t max, size_t factor) {
  if (min == 0 || max < min) throw UsageError("sizes need 0 < -b <= -e");
  if (factor < 2) throw UsageError("-f must be >= 2");
  std::vector<size_t> out;
  for (size_t s = min; s <= max; s *= factor) {
    out.push_back(s);
    if (s > max / factor) break;
  }
  return out;
}

// "0,1" -> {0, 1}; "-1,-1" -> host backend for both ranks.
inline std::vector<int> parse_int_list(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    out.push_back(static_cast<int>(parse_int(flag, item, -1, 1023)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

inline std::string human_size(size_t b) {
  char buf[32];
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) std::snprintf(buf, sizeof buf, "%zuG", b >> 30);
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= (1ull << 10) && b % (1ull << 10) == 0) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

// Walks argv: `a.flag("-b", "--minbytes")` matches either spelling; `a.value()` consumes the
// argument after it (or the part after '=').
class Args {
 public:
  Args(int argc, char** argv) : argv_(argv + 1, argv + argc) {}
  bool next() {
    if (++i_ >= argv_.size()) return false;
    cur_ = argv_[i_];
    inline_value_.clear();
    has_inline_ = false;
    size_t eq = cur_.find('=');
    if (cur_.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value_ = cur_.substr(eq + 1);
      cur_ = cur_.substr(0, eq);
      has_inline_ = true;
    }
    return true;
  }
  const std::string& current() const { return cur_; }
  bool flag(const char* a, const char* b = nullptr) const { return cur_ == a || (b && cur_ == b); }
  std::string value() {
    if (has_inline_) return inline_value_;
    if (i_ + 1 >= argv_.size()) throw UsageError("flag " + cur_ + " needs a value");
    return argv_[++i_];
  }

 private:
  std::vector<std::string> argv_;
  size_t i_ = static_cast<size_t>(-1);
  std::string cur_, inline_value_;
  bool has_inline_ = false;
};

// Rank identity when a launcher (not this binary) starts one process per rank.
struct LaunchIdentity {
  int rank = -1;        // -1: not given, the benchmark forks its own ranks
  int world_size = -1;
  std::string unique_id;
  void from_env() {
    if (const char* r = std::getenv("PEERLINK_RANK")) rank = static_cast<int>(parse_int("PEERLINK_RANK", r, 0, 63));
    if (const char* w = std::getenv("PEERLINK_WORLD_SIZE"))
      world_size = static_cast<int>(parse_int("PEERLINK_WORLD_SIZE", w, 1, 64));
    if (const char* u = std::getenv("PEERLINK_UNIQUE_ID")) unique_id = u;
  }
  bool launched() const { return rank >= 0; }
  void validate() const {
    if (!launched()) return;
    if (world_size < 1 || rank >= world_size)
      throw UsageError("rank " + std::to_string(rank) + " needs a world size above it (got " +
                       std::to_string(world_size) + ")");
    if (unique_id.empty()) throw UsageError("rank given without a unique id (--uid or PEERLINK_UNIQUE_ID)");
  }
};

// A benchmark's main(): parse(argc, argv) gives the configuration (a UsageError prints
// "NAME: why" and the usage, exit 1), then body(config) gives the exit code (an exception prints
// "NAME: what", exit 1).
template <class Parse, class Body>
int run_main(const char* name, const char* usage, int argc, char** argv, Parse parse, Body body) {
  decltype(parse(argc, argv)) c;
  try {
    c = parse(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", name, e.what(), usage);
    return 1;
  }
  try {
    return body(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace bench
