// Payload patterns that make every benchmark figure come from a verified transfer.
//
// Each sending rank owns a "pool": max_bytes + kShiftSpan bytes of pseudo-random, never-zero bytes
// derived from a seed both ranks know. Message k is sent from pool + shift(k) with shift(k) a
// multiple of 256 bytes (alignment stays friendly to copy engines) that changes from one message to
// the next, so the bytes differ per iteration at zero cost in the timed region, and a receiver
// that kept stale data (or got a partial copy) sees mismatches. The receiver regenerates the
// sender's pool on the host and compares what landed (copied back with device::copy_sync,
// outside the timed region).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "peerlink/device.h"

namespace bench {

constexpr size_t kShiftStep = 256;
constexpr size_t kShiftSlots = 16;
constexpr size_t kShiftSpan = kShiftStep * kShiftSlots;

inline size_t shift_of(uint64_t msg_index) { return (msg_index % kShiftSlots) * kShiftStep; }

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Deterministic non-zero bytes for `seed` (every byte has its low bit set, so no byte is zero).
inline std::vector<unsigned char> make_pool(uint64_t seed, size_t bytes) {
  std::vector<unsigned char> pool((bytes + 7) & ~size_t(7));
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  for (size_t i = 0; i < pool.size(); i += 8) {
    uint64_t w = splitmix64(state) | 0x0101010101010101ull;
    std::memcpy(&pool[i], &w, 8);
  }
  pool.resize(bytes);
  return pool;
}

// Compares `len` bytes at device/host pointer `landed` with expected[0, len). Messages up to
// full_limit are checked whole; larger ones at their head, tail and `samples` chunks whose
// positions depend on `salt` (so different iterations probe different places). Returns the number
// of mismatching bytes among those checked.
inline uint64_t verify_landed(const void* landed, const unsigned char* expected,
                              size_t len, size_t full_limit, uint64_t salt,
                              std::vector<unsigned char>& scratch, int samples = 8) {
  constexpr size_t kChunk = 4096;
  auto check_range = [&](size_t off, size_t n) -> uint64_t {
    if (scratch.size() < n) scratch.resize(n);
    peerlink::device::copy_sync(scratch.data(), static_cast<const char*>(landed) + off, n);
    if (std::memcmp(scratch.data(), expected + off, n) == 0) return 0;
    uint64_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += scratch[i] != expected[off + i];
    return bad;
  };
  if (len <= full_limit || len <= 2 * kChunk) return check_range(0, len);
  uint64_t bad = check_range(0, kChunk) + check_range(len - kChunk, kChunk);
  uint64_t state = salt;
  for (int s = 0; s < samples; ++s) {
    size_t off = static_cast<size_t>(splitmix64(state) % (len - kChunk));
    bad += check_range(off, kChunk);
  }
  return bad;
}

}  // namespace bench
