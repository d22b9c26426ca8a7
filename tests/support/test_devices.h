// The devices GPU tests run their ranks on: PEERLINK_TEST_DEVICES=0,1 (or 0,0, or 0,1,0,1 for four
// ranks on two GPUs); unset = the host backend (-1). Rank r uses entry r % count.
#pragma once
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace pltest {

inline std::vector<int> test_devices() {
  std::vector<int> d;
  const char* v = std::getenv("PEERLINK_TEST_DEVICES");
  std::stringstream ss(v && *v ? v : "-1");
  std::string item;
  while (std::getline(ss, item, ',')) d.push_back(std::stoi(item));
  return d;
}
inline int device_of(int rank) {
  auto d = test_devices();
  return d[rank % d.size()];
}

}  // namespace pltest
