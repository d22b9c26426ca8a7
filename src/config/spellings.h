// The spellings of every enum knob: one table per enum, used by the knob registry (parsing,
// validate, the docs) and by the public to_string / parse_* functions, so a name is written once.
#pragma once
#include <cctype>
#include <cstddef>
#include <string>

#include "peerlink/log_level.h"
#include "peerlink/options.h"

namespace peerlink::config {

template <class E>
struct Spelling {
  const char* name;
  E value;
};

// A table of spellings; the first spelling of each value is its name (to_string, docs), the others
// are accepted too. Lookups are case-insensitive.
template <class E>
struct Spellings {
  const Spelling<E>* items;
  size_t size;

  const Spelling<E>* begin() const { return items; }
  const Spelling<E>* end() const { return items + size; }
  const char* name(E v) const {
    for (const auto& s : *this)
      if (s.value == v) return s.name;
    return nullptr;
  }
  bool find(const std::string& text, E* out) const {
    std::string t;
    for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const auto& s : *this)
      if (t == s.name) {
        *out = s.value;
        return true;
      }
    return false;
  }
  // "a, b, c": the names (first spellings) in table order.
  std::string names(const char* sep = ", ") const {
    std::string out;
    for (const auto* s = begin(); s != end(); ++s) {
      if (name(s->value) != s->name) continue;  // another spelling of a value already listed
      if (!out.empty()) out += sep;
      out += s->name;
    }
    return out;
  }
};

template <class E, size_t N>
constexpr Spellings<E> spellings(const Spelling<E> (&t)[N]) {
  return {t, N};
}

inline constexpr Spelling<LogLevel> kLogLevels[] = {
    {"warn", LogLevel::Warn}, {"info", LogLevel::Info}, {"trace", LogLevel::Trace},
    {"none", LogLevel::None}, {"off", LogLevel::None}};
inline constexpr Spelling<Completion> kCompletions[] = {
    {"auto", Completion::Auto}, {"done_seq", Completion::DoneSeq}, {"doneseq", Completion::DoneSeq},
    {"ring", Completion::Ring}};
inline constexpr Spelling<Path> kPaths[] = {
    {"auto", Path::Auto}, {"direct", Path::Direct}, {"p2p", Path::Direct}, {"relay", Path::Relay}};
inline constexpr Spelling<DescriptorPassing> kFdPassings[] = {
    {"auto", DescriptorPassing::Auto}, {"pidfd", DescriptorPassing::Pidfd}, {"socket", DescriptorPassing::Socket}};
inline constexpr Spelling<AllreduceAlgo> kAllreduceAlgos[] = {
    {"auto", AllreduceAlgo::Auto},           {"oneshot", AllreduceAlgo::OneShot},
    {"one_shot", AllreduceAlgo::OneShot},    {"one-shot", AllreduceAlgo::OneShot},
    {"twoshot", AllreduceAlgo::TwoShot},     {"two_shot", AllreduceAlgo::TwoShot},
    {"two-shot", AllreduceAlgo::TwoShot},    {"bandwidth", AllreduceAlgo::Bandwidth},
    {"bw", AllreduceAlgo::Bandwidth},        {"zero_copy", AllreduceAlgo::ZeroCopy},
    {"zerocopy", AllreduceAlgo::ZeroCopy},   {"zero-copy", AllreduceAlgo::ZeroCopy},
    {"zc", AllreduceAlgo::ZeroCopy}};
// The fused epilogue's data flows (a subset of the allreduce's).
inline constexpr Spelling<AllreduceAlgo> kFusedAlgos[] = {
    {"auto", AllreduceAlgo::Auto},        {"oneshot", AllreduceAlgo::OneShot}, {"one_shot", AllreduceAlgo::OneShot},
    {"one-shot", AllreduceAlgo::OneShot}, {"twoshot", AllreduceAlgo::TwoShot}, {"two_shot", AllreduceAlgo::TwoShot},
    {"two-shot", AllreduceAlgo::TwoShot}};
inline constexpr Spelling<CollAlgo> kCollAlgos[] = {
    {"auto", CollAlgo::Auto},          {"ll", CollAlgo::LL},
    {"ll128", CollAlgo::LL128},        {"push", CollAlgo::Push},
    {"direct", CollAlgo::Push},        {"ce", CollAlgo::CopyEngine},
    {"copy_engine", CollAlgo::CopyEngine}, {"copyengine", CollAlgo::CopyEngine},
    {"zero_copy", CollAlgo::ZeroCopy}, {"zc", CollAlgo::ZeroCopy},
    {"zerocopy", CollAlgo::ZeroCopy},  {"two_hop", CollAlgo::TwoHop},
    {"twohop", CollAlgo::TwoHop},      {"two-hop", CollAlgo::TwoHop}};

}  // namespace peerlink::config
