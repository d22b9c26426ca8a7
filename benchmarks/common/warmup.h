// Warm-up before a size sweep, shared by the collective benchmarks.
#pragma once
#include <cstddef>
#include <exception>
#include <functional>
#include <vector>

namespace bench {

// As nccl-tests' TimeTest: `iters` untimed calls at each of `counts` (the sweep's largest, then its
// smallest), each batch followed by `sync`, before the first row, so that no implementation's first
// row pays for a cold GPU. (One H200, -n 50 -w 5: peerlink's first row, measured first at its size,
// read 3.03 us against 1.77 us at the next size.) Errors are left to the measured
// rows, which report them.
inline void prewarm(int iters, const std::vector<size_t>& counts, const std::function<void(size_t)>& run,
                    const std::function<void()>& sync) {
  try {
    for (size_t count : counts) {
      if (count == 0) continue;
      for (int i = 0; i < iters; ++i) run(count);
      sync();
    }
  } catch (const std::exception&) {
  }
}

}  // namespace bench
