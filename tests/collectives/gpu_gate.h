// Gate and placement of the multi-process GPU tests of collectives and stream send/recv: they run
// when PEERLINK_TEST_GPUS >= 2 (else skip with how to enable them); rank r uses device
// PEERLINK_TEST_DEVICES[r] (default "0,1"; "0,1,0,1" runs 4 ranks on 2 GPUs).
#pragma once
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace pltest {

inline bool have_gpus() {
  const char* v = std::getenv("PEERLINK_TEST_GPUS");
  return v && std::atoi(v) >= 2;
}

inline std::vector<int> gpu_test_devices() {
  const char* v = std::getenv("PEERLINK_TEST_DEVICES");
  std::vector<int> d;
  std::stringstream ss(v && *v ? v : "0,1");
  for (std::string item; std::getline(ss, item, ',');) d.push_back(std::atoi(item.c_str()));
  return d;
}

// The device of `rank` in a 2-rank test: PEERLINK_TEST_DEVICES[rank], wrapping when the list is shorter
// ("0" puts both ranks on GPU 0).
inline int gpu_test_device(int rank) {
  const std::vector<int> d = gpu_test_devices();
  return d.empty() ? rank : d[static_cast<size_t>(rank) % d.size()];
}
}  // namespace pltest

#define REQUIRE_GPUS() \
  if (!::pltest::have_gpus()) GTEST_SKIP() << "set PEERLINK_TEST_GPUS=2 on a machine with 2 GPUs"
