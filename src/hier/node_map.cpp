// NodeMap (peerlink/multinode.h) and the host identity functions.
#include "bootstrap/host_identity.h"
#include "common/format.h"
#include "peerlink/errors.h"
#include "peerlink/multinode.h"

namespace peerlink {

uint64_t host_id(const Options& opts) { return bootstrap::host_identity(opts.host_id).node; }
std::string host_name(const Options& opts) { return bootstrap::host_identity(opts.host_id).name; }

NodeMap::NodeMap(std::vector<uint64_t> hosts, std::vector<std::string> names, std::vector<uint64_t> machines)
    : machines_(std::move(machines)), names_(std::move(names)) {
  node_of_.resize(hosts.size());
  local_of_.resize(hosts.size());
  // Nodes in order of first rank: a linear search over the nodes seen so far keeps the order and
  // is fast enough for the node counts of a job (a map would too, at more code).
  for (size_t r = 0; r < hosts.size(); ++r) {
    int node = -1;
    for (size_t n = 0; n < hosts_.size(); ++n)
      if (hosts_[n] == hosts[r]) node = static_cast<int>(n);
    if (node < 0) {
      node = static_cast<int>(hosts_.size());
      hosts_.push_back(hosts[r]);
      ranks_.emplace_back();
    }
    node_of_[r] = node;
    local_of_[r] = static_cast<int>(ranks_[node].size());
    ranks_[node].push_back(static_cast<int>(r));
  }
  if (!names_.empty() && names_.size() != hosts_.size())
    throw InvalidArgument(common::format("NodeMap: {} node names for {} nodes", names_.size(), hosts_.size()));
  if (!machines_.empty() && machines_.size() != hosts_.size())
    throw InvalidArgument(common::format("NodeMap: {} node machines for {} nodes", machines_.size(), hosts_.size()));
}

namespace {
void check_rank(int rank, int n, const char* what) {
  if (rank < 0 || rank >= n) throw InvalidArgument(common::format("NodeMap::{}: rank {} is outside [0, {})", what, rank, n));
}
}  // namespace

int NodeMap::node_of(int rank) const {
  check_rank(rank, nranks(), "node_of");
  return node_of_[rank];
}

int NodeMap::local_rank(int rank) const {
  check_rank(rank, nranks(), "local_rank");
  return local_of_[rank];
}

int NodeMap::local_size(int node) const { return static_cast<int>(ranks_of_node(node).size()); }

const std::vector<int>& NodeMap::ranks_of_node(int node) const {
  if (node < 0 || node >= nodes())
    throw InvalidArgument(common::format("NodeMap: node {} is outside [0, {})", node, nodes()));
  return ranks_[node];
}

std::vector<int> NodeMap::rail(int local) const {
  std::vector<int> out;
  for (const auto& rs : ranks_)
    if (local >= 0 && local < static_cast<int>(rs.size())) out.push_back(rs[local]);
  return out;
}

uint64_t NodeMap::host_of_node(int node) const {
  ranks_of_node(node);
  return hosts_[node];
}

const std::string& NodeMap::name_of_node(int node) const {
  static const std::string none;
  ranks_of_node(node);
  return names_.empty() ? none : names_[node];
}

uint64_t NodeMap::machine_of_node(int node) const {
  ranks_of_node(node);
  return machines_.empty() ? 0 : machines_[node];
}

bool NodeMap::uniform() const {
  for (const auto& rs : ranks_)
    if (rs.size() != ranks_.front().size()) return false;
  return true;
}

bool NodeMap::node_contiguous() const {
  int expect = 0;
  for (const auto& rs : ranks_)
    for (int r : rs)
      if (r != expect++) return false;
  return true;
}

NodeMap NodeMap::subset(const std::vector<int>& members) const {
  std::vector<uint64_t> hosts;
  std::vector<int> first_node;  // the parent node of each child node, in the child's node order
  for (int m : members) {
    check_rank(m, nranks(), "subset");
    hosts.push_back(hosts_[node_of_[m]]);
    bool seen = false;
    for (int n : first_node) seen = seen || n == node_of_[m];
    if (!seen) first_node.push_back(node_of_[m]);
  }
  std::vector<std::string> names;
  std::vector<uint64_t> machines;
  for (int n : first_node) {
    if (!names_.empty()) names.push_back(names_[n]);
    if (!machines_.empty()) machines.push_back(machines_[n]);
  }
  return NodeMap(std::move(hosts), std::move(names), std::move(machines));
}

namespace {
// "0-3" for consecutive ranks, else "0,2,5".
std::string rank_list(const std::vector<int>& rs) {
  bool consecutive = true;
  for (size_t i = 1; i < rs.size(); ++i) consecutive = consecutive && rs[i] == rs[i - 1] + 1;
  if (consecutive && rs.size() > 2) return common::format("{}-{}", rs.front(), rs.back());
  std::string s;
  for (int r : rs) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}
}  // namespace

std::string NodeMap::describe() const {
  std::string s;
  if (uniform() && nodes() > 0)
    s = common::format("{} node{} x {} rank{}", nodes(), nodes() == 1 ? "" : "s", ranks_.front().size(),
                       ranks_.front().size() == 1 ? "" : "s");
  else
    s = common::format("{} nodes, uneven ({} ranks)", nodes(), nranks());
  s += node_contiguous() ? ", node-contiguous" : ", not node-contiguous";
  const int shown = 8;  // the first nodes only: a map of hundreds of nodes is no log line
  for (int n = 0; n < nodes() && n < shown; ++n)
    s += common::format("{} node {}{} ranks {}", n == 0 ? ":" : ";", n,
                        names_.empty() ? std::string() : " (" + names_[n] + ")", rank_list(ranks_[n]));
  if (nodes() > shown) s += common::format("; ... {} more nodes", nodes() - shown);
  return s;
}

}  // namespace peerlink
