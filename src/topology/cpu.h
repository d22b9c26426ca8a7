// CPU vendor / family / model from CPUID (decoding is a pure function of register values so tests
// feed real ones), the generation table with an inter-socket bandwidth estimate, and NCCL's XML
// familyid encodings.
#pragma once
#include <cstdint>
#include <string>

#include "topology/system.h"

namespace peerlink::topology {

// Vendor string from CPUID leaf 0 (the 12 bytes are ebx, edx, ecx in that order).
std::string cpuid_vendor(uint32_t ebx, uint32_t edx, uint32_t ecx);

// x86 rule on CPUID leaf 1 eax: family = base family (+ extended family only when base == 0xF);
// model = base model (+ extended model << 4 only when the base family is 6 or 0xF).
void decode_family_model(uint32_t leaf1_eax, int* family, int* model);

// Everything above plus the generation, for an x86_64 CPU.
CpuInfo cpu_from_cpuid(uint32_t leaf0_ebx, uint32_t leaf0_ecx, uint32_t leaf0_edx, uint32_t leaf1_eax);

// Fills generation and inter_socket_gbps from vendor/family/model. Unknown CPUs get the most
// conservative estimate in the table (6 GB/s).
void classify_generation(CpuInfo* cpu);
constexpr double kConservativeInterSocketGbps = 6.0;

// NCCL's XML familyid. NCCL before 2.30 wrote AMD families as (extended family << 4) | base family
// (0x8F = 143 for 0x17, 0xAF = 175 for 0x19, 0xBF = 191 for 0x1A); newer NCCL writes the real family
// (23, 25, 26). Both are accepted. The old encoding is recognised by a low nibble of 0xF above 0xF,
// which no real family has today (families 0x1F, 0x2F, ... would be misread; none exist).
int family_from_nccl_familyid(int familyid);

// This machine: CPUID on x86, otherwise only the architecture.
CpuInfo cpu_of_this_machine();

// From the text of /proc/cpuinfo (used for fixture roots). Unknown fields stay unknown.
CpuInfo cpu_from_proc_cpuinfo(const std::string& text);

}  // namespace peerlink::topology
