// peerlink-topo: prints the GPU matrix with path type, chosen transport (direct P2P or relay) and
// the reason for every pair, plus the CPU generation and the P2P level in force.
//   peerlink-topo [--json] [--xml FILE | --sysfs-root DIR] [--no-live-check]
// Environment: PEERLINK_P2P_LEVEL, PEERLINK_P2P_DISABLE, PEERLINK_TOPO_FILE, PEERLINK_TRANSPORT.
#include <cstdio>
#include <cstring>
#include <string>

#include "peerlink/errors.h"
#include "peerlink/options.h"
#include "peerlink/topology.h"

using namespace peerlink;

namespace {

const char* kUsage =
    "usage: peerlink-topo [--json] [--xml FILE | --sysfs-root DIR] [--no-live-check]\n"
    "\n"
    "Shows, for every GPU pair, the path type (NCCL's names: NVL, PIX, PXB, PHB, SYS), whether\n"
    "peerlink copies directly (P2P) or relays through pinned host memory, and why.\n"
    "\n"
    "  --json            machine-readable output:\n"
    "                    {\"cpu\": {\"vendor\", \"family\", \"model\", \"generation\", \"inter_socket_gbps\"},\n"
    "                     \"p2p_level\", \"gpus\": [{\"index\", \"bus_id\", \"numa\"}],\n"
    "                     \"pairs\": [{\"a\", \"b\", \"path\", \"transport\", \"reason\"}]}\n"
    "  --xml FILE        read an NCCL topology XML (as written with NCCL_TOPO_DUMP_FILE)\n"
    "                    instead of probing this machine\n"
    "  --sysfs-root DIR  probe the sysfs tree under DIR (DIR/sys/..., DIR/proc/cpuinfo), e.g. a\n"
    "                    test fixture; GPUs are its NVIDIA/AMD display and 3D PCI devices\n"
    "  --no-live-check   on this machine, skip the runtime's peer-access answer and the real\n"
    "                    pattern copy that otherwise confirm every pair the policy allows\n"
    "  --help            this text\n"
    "\n"
    "Environment (as for every peerlink communicator):\n"
    "  PEERLINK_P2P_LEVEL    LOC|NVL|PIX|PXB|PHB|SYS or 0-4 (0=LOC 1=PIX 2=PXB 3=PHB 4=SYS):\n"
    "                        the farthest PCIe path still used for direct P2P\n"
    "  PEERLINK_P2P_DISABLE  1: relay for every pair, NVLink too\n"
    "  PEERLINK_TOPO_FILE    NCCL topology XML to use instead of probing (like --xml)\n"
    "  PEERLINK_TRANSPORT    relay|direct: force one transport for every pair\n"
    "Exit status: 0 with a result (also with zero GPUs), 2 on bad arguments or settings.\n";

}  // namespace

int main(int argc, char** argv) {
  bool json = false, live_check = true;
  std::string xml, root;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json")
      json = true;
    else if (a == "--no-live-check")
      live_check = false;
    else if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if ((a == "--xml" || a == "--sysfs-root") && i + 1 < argc)
      (a == "--xml" ? xml : root) = argv[++i];
    else {
      std::fprintf(stderr, "peerlink-topo: unknown or incomplete argument '%s'\n\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (!xml.empty() && !root.empty()) {
    std::fprintf(stderr, "peerlink-topo: --xml and --sysfs-root exclude each other\n");
    return 2;
  }
  try {
    topology::ReportRequest req;
    req.json = json;
    req.xml = xml;
    req.sysfs_root = root;
    req.live_check = live_check;
    const topology::Report rep = topology::cli_report(Options::from_env(), req);
    std::fputs(rep.output.c_str(), stdout);
    if (json)  // the text matrix prints its warnings itself
      for (const std::string& w : rep.warnings) std::fprintf(stderr, "peerlink-topo: warning: %s\n", w.c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "peerlink-topo: %s\n", e.what());
    return 2;
  }
}
