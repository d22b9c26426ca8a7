// CPUID decoding and the CPU generation table.
#include "topology/cpu.h"

#include <sys/utsname.h>

#include <cstring>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace peerlink::topology {

std::string cpuid_vendor(uint32_t ebx, uint32_t edx, uint32_t ecx) {
  char v[13];
  std::memcpy(v, &ebx, 4);
  std::memcpy(v + 4, &edx, 4);
  std::memcpy(v + 8, &ecx, 4);
  v[12] = '\0';
  return v;
}

void decode_family_model(uint32_t eax, int* family, int* model) {
  const int base_family = (eax >> 8) & 0xF;
  const int ext_family = (eax >> 20) & 0xFF;
  const int base_model = (eax >> 4) & 0xF;
  const int ext_model = (eax >> 16) & 0xF;
  *family = base_family == 0xF ? base_family + ext_family : base_family;
  // Intel SDM / AMD APM: the extended model applies when the *base* family field is 6 or 0xF
  // (so AMD Genoa, eax 0x00A10F11, is model 0x11, not 0x01).
  *model = (base_family == 0x6 || base_family == 0xF) ? base_model + (ext_model << 4) : base_model;
}

CpuInfo cpu_from_cpuid(uint32_t ebx0, uint32_t ecx0, uint32_t edx0, uint32_t eax1) {
  CpuInfo c;
  c.arch = "x86_64";
  c.vendor = cpuid_vendor(ebx0, edx0, ecx0);
  decode_family_model(eax1, &c.family, &c.model);
  classify_generation(&c);
  return c;
}

void classify_generation(CpuInfo* c) {
  c->generation = "unknown";
  c->inter_socket_gbps = kConservativeInterSocketGbps;
  if (c->vendor == "GenuineIntel" && c->family == 6) {
    // NCCL's classes: QPI/UPI bandwidth per generation. Models not in the table stay unknown.
    switch (c->model) {
      case 0x3F:
      case 0x4F:
      case 0x56:  // Haswell-EP, Broadwell-EP/DE
        c->generation = "BDW";
        c->inter_socket_gbps = 6;
        break;
      case 0x55:
      case 0x6A:
      case 0x6C:  // Skylake/Cascade/Cooper Lake-SP, Ice Lake-SP (UPI 1.0)
        c->generation = "SKL";
        c->inter_socket_gbps = 10;
        break;
      case 0x8F:  // Sapphire Rapids
        c->generation = "SRP";
        c->inter_socket_gbps = 22;
        break;
      case 0xCF:  // Emerald Rapids
        c->generation = "ERP";
        c->inter_socket_gbps = 40;
        break;
      default: break;
    }
  } else if (c->vendor == "AuthenticAMD") {
    switch (c->family) {
      case 0x17:
        c->generation = "Zen1/2";
        c->inter_socket_gbps = 16;
        break;
      case 0x19:
        c->generation = "Zen3/4";
        c->inter_socket_gbps = 24;
        break;
      case 0x1A:
        c->generation = "Zen5";
        c->inter_socket_gbps = 32;
        break;
      default: break;
    }
  }
}

int family_from_nccl_familyid(int v) {
  if (v > 0xF && v <= 0xFF && (v & 0xF) == 0xF) return 0xF + (v >> 4);
  return v;
}

namespace {
std::string machine_arch() {
  struct utsname u;
  if (uname(&u) != 0) return "";
  return u.machine;
}
}  // namespace

CpuInfo cpu_of_this_machine() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a0 = 0, b0 = 0, c0 = 0, d0 = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid(0, &a0, &b0, &c0, &d0) && a0 >= 1 && __get_cpuid(1, &a1, &b1, &c1, &d1)) {
    CpuInfo c = cpu_from_cpuid(b0, c0, d0, a1);
    c.arch = machine_arch();
    if (c.arch.empty()) c.arch = "x86_64";
    return c;
  }
#endif
  CpuInfo c;
  c.arch = machine_arch();
  classify_generation(&c);
  return c;
}

CpuInfo cpu_from_proc_cpuinfo(const std::string& text) {
  CpuInfo c;
  std::istringstream in(text);
  std::string line;
  bool have_family = false, have_model = false;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      if (!c.vendor.empty() && have_family) break;  // first processor block is enough
      continue;
    }
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string val = line.substr(colon + 1);
    while (!val.empty() && (val.front() == ' ' || val.front() == '\t')) val.erase(0, 1);
    try {
      if (key == "vendor_id" && c.vendor.empty())
        c.vendor = val;
      else if (key == "cpu family" && !have_family) {
        c.family = std::stoi(val);
        have_family = true;
      } else if (key == "model" && !have_model) {
        c.model = std::stoi(val);
        have_model = true;
      }
    } catch (const std::exception&) {
      // malformed number: the field stays unknown
    }
  }
  if (!c.vendor.empty()) c.arch = "x86_64";  // /proc/cpuinfo has vendor_id only on x86
  classify_generation(&c);
  return c;
}

}  // namespace peerlink::topology
