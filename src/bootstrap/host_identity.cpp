// Host identity and node-carrying unique ids (host_identity.h).
#include "bootstrap/host_identity.h"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "common/format.h"

namespace peerlink::bootstrap {
namespace {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string b;
  std::getline(f, b);
  return b;
}

// Letters, digits, '-', '_' and '.' only, at most 63 characters: a name that fits in a record and
// in a unique id (whose node part follows the last '.').
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (out.size() >= 63) break;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.';
    out.push_back(ok ? c : '_');
  }
  return out;
}

bool all_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

}  // namespace

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

HostIdentity host_identity(const std::string& configured) {
  HostIdentity id;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string boot = boot_id();
  id.machine = fnv1a(boot);
  id.hostname = printable(host);
  if (!configured.empty()) {
    id.node = fnv1a(configured, fnv1a("hostid:"));
    id.name = printable(configured);
  } else {
    std::string short_name(host);
    short_name = short_name.substr(0, short_name.find('.'));  // NCCL hashes the name up to its first '.'
    id.node = fnv1a(boot, fnv1a(short_name));
    id.name = printable(host);
  }
  return id;
}

std::string make_node_unique_id(const HostIdentity& maker) {
  unsigned char r[8];
  if (getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    std::seed_seq seq{static_cast<unsigned>(getpid()),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    std::mt19937_64 g(seq);
    for (auto& b : r) b = static_cast<unsigned char>(g());
  }
  std::string hex;
  for (int i = 0; i < 8; ++i) hex += common::format("{:02x}", r[i]);
  return common::format("pl-{}@{}.{:016x}", hex, printable(maker.name), static_cast<unsigned long long>(maker.node));
}

bool parse_node_unique_id(const std::string& id, uint64_t* node, std::string* name) {
  if (id.size() < 3 + 16 + 1 + 1 + 16 || id.compare(0, 3, "pl-") != 0 || id[19] != '@') return false;
  if (!all_hex(id.substr(3, 16))) return false;
  size_t dot = id.rfind('.');
  if (dot == std::string::npos || dot < 20 || id.size() - dot - 1 != 16) return false;
  std::string hex = id.substr(dot + 1);
  if (!all_hex(hex)) return false;
  *node = std::strtoull(hex.c_str(), nullptr, 16);
  *name = id.substr(20, dot - 20);
  return true;
}

}  // namespace peerlink::bootstrap
