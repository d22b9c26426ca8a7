// Options: every variable of the knob registry (knobs.cpp), read when a communicator is created,
// and the one validate(). This directory is the only part of the library that reads the
// environment (scripts/check_layers.sh checks that no getenv appears in src/ outside src/config/):
// a knob that is not a field of Options does not exist, and a value is checked in one place
// whether it came from the environment or from code.
#include <cstdlib>
#include <string>

#include "common/format.h"
#include "config/knobs.h"
#include "config/spellings.h"
#include "config/test_hooks.h"
#include "peerlink/errors.h"
#include "peerlink/options.h"

namespace peerlink {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace

const char* to_string(Completion c) {
  const char* n = config::spellings(config::kCompletions).name(c);
  return n ? n : "?";
}

const char* to_string(Path p) {
  const char* n = config::spellings(config::kPaths).name(p);
  return n ? n : "?";
}

const char* to_string(DescriptorPassing d) {
  const char* n = config::spellings(config::kFdPassings).name(d);
  return n ? n : "?";
}

const char* to_string(AllreduceAlgo a) {
  const char* n = config::spellings(config::kAllreduceAlgos).name(a);
  return n ? n : "?";
}

AllreduceAlgo parse_allreduce_algo(const std::string& s) {
  AllreduceAlgo a = AllreduceAlgo::Auto;
  const auto names = config::spellings(config::kAllreduceAlgos);
  if (s.empty() || names.find(s, &a)) return a;
  throw InvalidArgument(common::format("allreduce algorithm '{}' is not one of {}", s, names.names()));
}

const char* to_string(CollAlgo a) {
  const char* n = config::spellings(config::kCollAlgos).name(a);
  return n ? n : "?";
}

CollAlgo parse_coll_algo(const std::string& s) {
  CollAlgo a = CollAlgo::Auto;
  const auto names = config::spellings(config::kCollAlgos);
  if (s.empty() || names.find(s, &a)) return a;
  throw InvalidArgument(common::format("collective algorithm '{}' is not one of {}", s, names.names()));
}

// Each knob from its variable, else from NCCL's name for it (read as NCCL reads it), else its
// default; then validate(). Test switches travel in their own immutable block, made only when one
// is set.
Options Options::from_env() {
  Options o;
  detail::TestHooks hooks;
  config::Settings s{o, hooks};
  for (const auto& k : config::knobs()) {
    if (const char* v = env(k->var)) k->parse(s, v);
    else if (const char* a = k->alias ? env(k->alias) : nullptr) k->parse_lenient(s, a);
  }
  if (hooks.any()) detail::set_test_hooks(o, hooks);
  o.validate();
  return o;
}

void Options::validate() const {
  const config::ConstSettings s{*this, detail::test_hooks(*this)};
  for (const auto& k : config::knobs()) k->check(s);
}

}  // namespace peerlink
