// Topology: for every GPU pair of this machine, direct peer-to-peer or relay through host memory,
// and why. Reads the machine (sysfs, NVML, the GPU runtime, CPUID) or, when Options::topo_file
// (PEERLINK_TOPO_FILE) is set, an NCCL topology XML. Configuration comes from Options only:
// p2p_disable (PEERLINK_P2P_DISABLE), p2p_level (PEERLINK_P2P_LEVEL), path (PEERLINK_TRANSPORT).
#pragma once
#include <string>
#include <vector>

#include "peerlink/options.h"

namespace peerlink::topology {

struct PairDecision {
  int a = 0, b = 0;
  std::string path;     // NVL, PIX, PXB, PHB, SYS (NCCL's names); LOC when a == b
  bool direct = false;  // false: relay through pinned host memory
  std::string reason;   // the rule and the setting that decided, then how the path was found
};

// Decides for GPU devices a and b of this machine (or of opts.topo_file when set). Machine or XML
// problems never throw: they are logged as warnings and the answer is conservative (relay).
// Throws InvalidArgument only for an invalid opts.p2p_level. On a live machine, a pair the policy
// allows is also checked with the runtime's peer-access answer and a small real copy with a known
// pattern (once per process and pair; the result is cached). That check allocates 256 KiB on both
// devices, so it initializes the runtime on the peer device in this process too.
PairDecision decide_pair(const Options& opts, int dev_a, int dev_b);

// The job's GPUs named by PCI bus id ("0000:3b:00.0", gathered from every rank), every pair a < b
// (a, b are positions in bus_ids). Works also when each process sees only its own GPU
// (CUDA_VISIBLE_DEVICES), which decide_pair's runtime indices cannot express. Paths come from sysfs and NVML, or opts.topo_file; the AMD default
// counts the job's GPUs, as NCCL does; live checks run only for pairs this process can see.
// Same error contract as decide_pair.
std::vector<PairDecision> decide_job_pairs(const Options& opts, const std::vector<std::string>& bus_ids);

// Every pair a < b, with one probe of the machine.
std::vector<PairDecision> decide_all_pairs(const Options& opts);

// The GPU matrix with path, transport and reason per pair, the CPU generation and the P2P level,
// as `peerlink-topo` prints it (for PEERLINK_DEBUG=INFO logs).
std::string explain(const Options& opts);

// What the `peerlink-topo` CLI prints, as a library call (the tool uses public headers only).
struct ReportRequest {
  bool json = false;        // the JSON schema of ARCHITECTURE.md instead of the text matrix
  std::string xml;          // read this NCCL topology XML instead of probing
  std::string sysfs_root;   // probe the sysfs tree under this directory (test fixtures)
  bool live_check = true;   // on this machine: runtime peer-access answer + pattern copy per pair
};
struct Report {
  std::string output;                 // the text matrix or the JSON document
  std::vector<std::string> warnings;  // what probing or reading noticed (JSON keeps them apart)
};
// Throws InvalidArgument for an invalid opts.p2p_level or a request naming both xml and sysfs_root.
Report cli_report(const Options& opts, const ReportRequest& req);

}  // namespace peerlink::topology
