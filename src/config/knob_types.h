// The field descriptors of the knob registry: how a row's text is parsed, which values are valid and
// how a value is shown, by the type of the member it names. A row (knobs.cpp) makes one with a
// factory (integer, flag, switch_, choice, text) and a member pointer of Options or
// detail::TestHooks; the member pointer alone decides where the value goes.
#pragma once
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "common/format.h"
#include "config/knobs.h"
#include "config/spellings.h"
#include "peerlink/errors.h"

namespace peerlink::config {

// The member a pointer names, in the settings that own it.
template <class T>
T& at(Settings& s, T Options::*m) {
  return s.options.*m;
}
template <class T>
T& at(Settings& s, T detail::TestHooks::*m) {
  return s.hooks.*m;
}
template <class T>
const T& at(const ConstSettings& s, T Options::*m) {
  return s.options.*m;
}
template <class T>
const T& at(const ConstSettings& s, T detail::TestHooks::*m) {
  return s.hooks.*m;
}

template <class M>
struct MemberType;
template <class C, class T>
struct MemberType<T C::*> {
  using type = T;
};

// Integers as the registry compares them (size_t above LLONG_MAX is out of every range).
inline long long as_integer(int v) { return v; }
inline long long as_integer(size_t v) { return v > size_t(LLONG_MAX) ? LLONG_MAX : static_cast<long long>(v); }
inline long long as_integer(std::chrono::milliseconds v) { return v.count(); }
template <class T>
T from_integer(long long x) {
  return static_cast<T>(x);
}
template <>
inline std::chrono::milliseconds from_integer<std::chrono::milliseconds>(long long x) {
  return std::chrono::milliseconds(x);
}
inline std::string integer_text(int v) { return std::to_string(v); }
inline std::string integer_text(size_t v) { return std::to_string(v); }
inline std::string integer_text(std::chrono::milliseconds v) { return std::to_string(v.count()); }

// Whole decimal text, or false.
bool parse_decimal(const char* text, long long* out);
// 1 / true / yes / on, 0 / false / no / off (any case), or false.
bool parse_boolean(const char* text, bool* out);
// A bound as the docs write it: 2^N for large powers of two, else the number.
std::string bound_text(long long x);
// "`4194304` (4 MiB)" for byte counts that are whole KiB / MiB / GiB, else "`n`".
std::string bytes_text(size_t x);

// int, size_t and std::chrono::milliseconds members: decimal text in [lo, hi], optionally "0 or at
// least min" and "a multiple of k".
template <class M>
class IntKnob final : public Knob {
  using T = typename MemberType<M>::type;

 public:
  IntKnob(M m, const char* name, long long lo, long long hi) : m_(m), lo_(lo), hi_(hi) { field = name; }
  IntKnob zero_or_at_least(long long min) && { return std::move(*this).set(&IntKnob::nonzero_min_, min); }
  IntKnob multiple_of(long long k) && { return std::move(*this).set(&IntKnob::multiple_, k); }
  IntKnob zero_means(const char* what) && {
    zero_means_ = what;
    return std::move(*this);
  }

  void parse(Settings& s, const char* text) const override {
    long long x = 0;
    if (!parse_decimal(text, &x) || x < lo_ || x > hi_)
      throw InvalidArgument(common::format("{}='{}' is not an integer in [{}, {}]", var, text, lo_, hi_));
    std::string why = rule_broken(x);
    if (!why.empty()) throw InvalidArgument(common::format("{}='{}' {}", var, text, why));
    at(s, m_) = from_integer<T>(x);
  }
  bool parse_lenient(Settings& s, const char* text) const override {
    long long x = 0;
    if (!parse_decimal(text, &x)) return false;
    x = x < lo_ ? lo_ : x > hi_ ? hi_ : x;
    if (!rule_broken(x).empty()) return false;
    at(s, m_) = from_integer<T>(x);
    return true;
  }
  void check(const ConstSettings& s) const override {
    const T& v = at(s, m_);
    const long long x = as_integer(v);
    if (x < lo_ || x > hi_)
      throw InvalidArgument(
          common::format("Options::{} {} is outside [{}, {}] ({})", field, integer_text(v), lo_, hi_, var));
    std::string why = rule_broken(x);
    if (!why.empty()) throw InvalidArgument(common::format("Options::{} {} {} ({})", field, integer_text(v), why, var));
  }
  std::string values() const override {
    if (multiple_ > 0)
      return common::format("`0` or a multiple of {} up to `{}`", multiple_, bound_text(hi_));
    if (nonzero_min_ > 0) return common::format("`0` or `{}`–`{}`", nonzero_min_, bound_text(hi_));
    return common::format("`{}`–`{}`", bound_text(lo_), bound_text(hi_));
  }
  std::string show(const ConstSettings& s) const override {
    const T& v = at(s, m_);
    std::string out = shown(v);
    if (as_integer(v) == 0 && zero_means_) out += common::format(" ({})", zero_means_);
    return out;
  }

 private:
  IntKnob set(long long IntKnob::*rule, long long v) && {
    this->*rule = v;
    return std::move(*this);
  }
  // What x breaks beyond the range ("" = nothing).
  std::string rule_broken(long long x) const {
    if (nonzero_min_ > 0 && x != 0 && x < nonzero_min_)
      return common::format("is below {} (0 = default)", nonzero_min_);
    if (multiple_ > 0 && x % multiple_ != 0) return common::format("is not a multiple of {} (0 = default)", multiple_);
    return "";
  }
  static std::string shown(size_t v) { return bytes_text(v); }
  static std::string shown(int v) { return common::format("`{}`", v); }
  static std::string shown(std::chrono::milliseconds v) { return common::format("`{}` ms", v.count()); }

  M m_;
  long long lo_, hi_;
  long long nonzero_min_ = 0;
  long long multiple_ = 0;
  const char* zero_means_ = nullptr;
};

// bool members: 1 / 0 (true / false, yes / no, on / off).
template <class M>
class FlagKnob final : public Knob {
 public:
  FlagKnob(M m, const char* name) : m_(m) { field = name; }
  void parse(Settings& s, const char* text) const override {
    bool b = false;
    if (!parse_boolean(text, &b))
      throw InvalidArgument(common::format("{}='{}' is not a boolean (use 1 or 0)", var, text));
    at(s, m_) = b;
  }
  bool parse_lenient(Settings& s, const char* text) const override {
    long long x = 0;
    bool b = false;
    if (parse_decimal(text, &x)) b = x != 0;  // NCCL's integers: any other than 0 is on
    else if (!parse_boolean(text, &b)) return false;
    at(s, m_) = b;
    return true;
  }
  void check(const ConstSettings&) const override {}
  std::string values() const override { return "`0`, `1`"; }
  std::string show(const ConstSettings& s) const override { return at(s, m_) ? "`1`" : "`0`"; }

 private:
  M m_;
};

// int members set by a boolean text (0 / 1), whose other values mean "decide" (-1: by the device).
template <class M>
class SwitchKnob final : public Knob {
 public:
  SwitchKnob(M m, const char* name, int lo, int hi, const char* unset_means)
      : m_(m), lo_(lo), hi_(hi), unset_means_(unset_means) {
    field = name;
  }
  void parse(Settings& s, const char* text) const override {
    bool b = false;
    if (!parse_boolean(text, &b))
      throw InvalidArgument(common::format("{}='{}' is not a boolean (use 1 or 0)", var, text));
    at(s, m_) = b ? 1 : 0;
  }
  bool parse_lenient(Settings& s, const char* text) const override {
    bool b = false;
    if (!parse_boolean(text, &b)) return false;
    at(s, m_) = b ? 1 : 0;
    return true;
  }
  void check(const ConstSettings& s) const override {
    const int v = at(s, m_);
    if (v < lo_ || v > hi_)
      throw InvalidArgument(common::format("Options::{} {} is outside [{}, {}] ({})", field, v, lo_, hi_, var));
  }
  std::string values() const override { return "`0`, `1`"; }
  std::string show(const ConstSettings& s) const override {
    const int v = at(s, m_);
    return v < 0 && unset_means_ ? common::format("`{}` ({})", v, unset_means_) : common::format("`{}`", v);
  }

 private:
  M m_;
  int lo_, hi_;
  const char* unset_means_;
};

// Enum members: one of the names of a spelling table (any case), optionally refusing one value
// (a choice that exists for other rows of the same enum only).
template <class M>
class ChoiceKnob final : public Knob {
  using E = typename MemberType<M>::type;

 public:
  ChoiceKnob(M m, const char* name, Spellings<E> names) : m_(m), names_(names) { field = name; }
  ChoiceKnob except(E v, const char* why) && {
    refused_ = true;
    refused_value_ = v;
    refused_why_ = why;
    return std::move(*this);
  }
  void parse(Settings& s, const char* text) const override {
    E v{};
    if (!names_.find(text, &v))
      throw InvalidArgument(common::format("{}='{}' is not one of {}", var, text, names_.names()));
    if (refused_ && v == refused_value_) throw InvalidArgument(common::format("{}='{}': {}", var, text, refused_why_));
    at(s, m_) = v;
  }
  bool parse_lenient(Settings& s, const char* text) const override {
    E v{};
    if (!names_.find(text, &v) || (refused_ && v == refused_value_)) return false;
    at(s, m_) = v;
    return true;
  }
  void check(const ConstSettings& s) const override {
    const E v = at(s, m_);
    const char* n = names_.name(v);
    if (!n)
      throw InvalidArgument(common::format("Options::{} {} is not one of {} ({})", field, static_cast<int>(v),
                                           names_.names(), var));
    if (refused_ && v == refused_value_)
      throw InvalidArgument(common::format("Options::{} {}: {} ({})", field, n, refused_why_, var));
  }
  std::string values() const override {
    std::string out;
    for (const auto& sp : names_) {
      if (names_.name(sp.value) != sp.name || (refused_ && sp.value == refused_value_)) continue;
      out += out.empty() ? "" : ", ";
      out += common::format("`{}`", sp.name);
    }
    return out;
  }
  std::string show(const ConstSettings& s) const override { return common::format("`{}`", names_.name(at(s, m_))); }

 private:
  M m_;
  Spellings<E> names_;
  bool refused_ = false;
  E refused_value_{};
  const char* refused_why_ = nullptr;
};

// std::string members, kept verbatim; `valid` (optional) refuses text the layer that reads the
// field could never interpret, so a typo fails when the communicator is created.
template <class M>
class TextKnob final : public Knob {
 public:
  TextKnob(M m, const char* name, const char* values_doc, bool (*valid)(const std::string&))
      : m_(m), values_doc_(values_doc), valid_(valid) {
    field = name;
  }
  void parse(Settings& s, const char* text) const override {
    if (valid_ && !valid_(text)) throw InvalidArgument(common::format("{}='{}' is not one of {}", var, text, values_doc_));
    at(s, m_) = text;
  }
  bool parse_lenient(Settings& s, const char* text) const override {
    if (valid_ && !valid_(text)) return false;
    at(s, m_) = text;
    return true;
  }
  void check(const ConstSettings& s) const override {
    const std::string& v = at(s, m_);
    if (!v.empty() && valid_ && !valid_(v))
      throw InvalidArgument(common::format("Options::{} '{}' is not one of {} ({})", field, v, values_doc_, var));
  }
  std::string values() const override { return values_doc_; }
  std::string show(const ConstSettings& s) const override {
    const std::string& v = at(s, m_);
    return v.empty() ? "(unset)" : common::format("`{}`", v);
  }

 private:
  M m_;
  const char* values_doc_;
  bool (*valid_)(const std::string&);
};

// The factories the rows use (the member pointer type picks the template).
template <class M>
IntKnob<M> integer(M m, const char* name, long long lo, long long hi) {
  return IntKnob<M>(m, name, lo, hi);
}
template <class M>
FlagKnob<M> flag(M m, const char* name) {
  return FlagKnob<M>(m, name);
}
template <class M>
SwitchKnob<M> switch_(M m, const char* name, int lo, int hi, const char* unset_means = nullptr) {
  return SwitchKnob<M>(m, name, lo, hi, unset_means);
}
template <class M, class E>
ChoiceKnob<M> choice(M m, const char* name, Spellings<E> names) {
  return ChoiceKnob<M>(m, name, names);
}
template <class M>
TextKnob<M> text(M m, const char* name, const char* values_doc, bool (*valid)(const std::string&) = nullptr) {
  return TextKnob<M>(m, name, values_doc, valid);
}

}  // namespace peerlink::config
