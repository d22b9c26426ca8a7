// split_members (peerlink/multinode.h): the one membership rule of every engine's split and of
// HierCommunicator::split, so that all of them order a new group alike.
#include <algorithm>

#include "common/format.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"

namespace peerlink {

SplitMembers split_members(InterNodeEngine& engine, int color, int key) {
  if (color < 0 && color != kNoColor) throw InvalidArgument(common::format("split: color {} is negative", color));
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(engine.size()));
  engine.exchange(mine, sizeof mine, all.data());
  SplitMembers out;
  if (color == kNoColor) return out;
  for (int q = 0; q < engine.size(); ++q)
    if (all[2 * q] == color) out.members.push_back(q);
  std::stable_sort(out.members.begin(), out.members.end(),
                   [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  out.rank = static_cast<int>(std::find(out.members.begin(), out.members.end(), engine.rank()) - out.members.begin());
  return out;
}

}  // namespace peerlink
