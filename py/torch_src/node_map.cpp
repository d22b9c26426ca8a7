#include "node_map.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace peerlink::pt {

namespace {

// "0-3" / "0,2,5" / "1"
std::string ranks_text(const std::vector<int>& ranks) {
  bool run = ranks.size() > 2;
  for (size_t i = 1; i < ranks.size(); ++i) run = run && ranks[i] == ranks[i - 1] + 1;
  if (run) return c10::str(ranks.front(), "-", ranks.back());
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string NodeMap::describe() const {
  std::string s;
  for (int n = 0; n < nodes(); ++n) {
    std::vector<int> ranks;
    for (size_t r = 0; r < node_of_rank.size(); ++r)
      if (node_of_rank[r] == n) ranks.push_back(static_cast<int>(r));
    s += c10::str(n ? "; " : "", "host '", hosts[n], "': rank", ranks.size() > 1 ? "s " : " ", ranks_text(ranks));
  }
  return s;
}

NodeMap exchange_node_map(c10d::Store& store, const std::string& prefix, int rank, int size, const std::string& host_id) {
  TORCH_CHECK_VALUE(!host_id.empty(), "peerlink: empty host identity");
  store.set(c10::str(prefix, rank), host_id);
  NodeMap m;
  m.node_of_rank.resize(size);
  for (int r = 0; r < size; ++r) {
    std::string h = r == rank ? host_id : store.get_to_str(c10::str(prefix, r));
    int n = 0;
    while (n < m.nodes() && m.hosts[n] != h) ++n;
    if (n == m.nodes()) m.hosts.push_back(h);
    m.node_of_rank[r] = n;
  }
  return m;
}

}  // namespace peerlink::pt
