// The knob registry: one row per variable (src/config/knobs.cpp), from which Options::from_env
// reads the environment, Options::validate checks every field, and docs/configuration.md is
// written (render_configuration_markdown, `make docs`; `make test-docs` fails when the committed
// file differs).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/test_hooks.h"
#include "peerlink/options.h"

namespace peerlink::config {

// Who a knob is for: User knobs are listed first in the docs, Tuning knobs under "Advanced", Test
// knobs (fault injection, coverage switches of the library's own tests) not at all.
enum class Audience { User, Tuning, Test };

// What a knob writes: the Options, and the test hooks that travel with them.
struct Settings {
  Options& options;
  detail::TestHooks& hooks;
};
struct ConstSettings {
  const Options& options;
  const detail::TestHooks& hooks;
};

// One row. The typed part (how text is parsed, what range is valid, how a value is shown) is the
// subclass made by the row's field descriptor (knobs.cpp); the rest is plain data.
class Knob {
 public:
  virtual ~Knob() = default;
  // Sets the field from the variable's text; InvalidArgument naming the variable and the text.
  virtual void parse(Settings& s, const char* text) const = 0;
  // From the NCCL alias, as NCCL reads its own variables: clamped into range, or ignored (false)
  // when the text is no value.
  virtual bool parse_lenient(Settings& s, const char* text) const = 0;
  // validate(): InvalidArgument naming Options::<field>, the value and the variable.
  virtual void check(const ConstSettings& s) const = 0;
  virtual std::string values() const = 0;                   // the accepted values, for the docs
  virtual std::string show(const ConstSettings& s) const = 0;  // the field's value, for the docs

  const char* var = nullptr;    // PEERLINK_* (or NCCL_DEBUG, which the NCCL library reads as NCCL does)
  const char* alias = nullptr;  // NCCL's variable for the same knob, read when `var` is unset
  const char* field = nullptr;  // member of Options (or of detail::TestHooks, audience Test)
  Audience audience = Audience::Tuning;
  const char* doc = nullptr;    // one line for docs/configuration.md
};

// Every knob, in docs order within each audience. Built once (the table is constant: it holds no
// value of any knob, so nothing configurable is cached).
const std::vector<std::unique_ptr<const Knob>>& knobs();

// docs/configuration.md as the registry says it.
std::string render_configuration_markdown();

}  // namespace peerlink::config
