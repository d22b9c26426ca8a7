// Iterative XML parser (explicit stack, bounded depth) so hostile input cannot overflow the stack.
#include "topology/xml_reader.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "common/format.h"
#include "common/log.h"

namespace peerlink::topology {

const std::string* XmlNode::attr(const std::string& key) const {
  for (const auto& kv : attrs)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}

  XmlParse run() {
    XmlParse r;
    if (t_.size() > kXmlMaxBytes) return fail(r, common::format("file larger than {} bytes", kXmlMaxBytes));
    if (t_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // UTF-8 byte order mark
    std::vector<XmlNode*> stack;
    bool have_root = false;
    while (true) {
      const size_t lt = t_.find('<', pos_);
      if (lt == std::string::npos) {
        if (!stack.empty())
          return fail(
              r, common::format("end of file inside <{}> opened on line {}", stack.back()->name, stack.back()->line));
        if (!have_root) return fail(r, "no element found");
        r.ok = true;
        return r;
      }
      if (stack.empty() && !blank(pos_, lt)) return fail(r, "text outside the document element");
      advance_to(lt);
      if (starts("<!--")) {
        const size_t end = t_.find("-->", pos_ + 4);
        if (end == std::string::npos) return fail(r, "unterminated comment");
        advance_to(end + 3);
      } else if (starts("<?")) {
        const size_t end = t_.find("?>", pos_ + 2);
        if (end == std::string::npos) return fail(r, "unterminated processing instruction");
        advance_to(end + 2);
      } else if (starts("<!")) {
        return fail(r, "DOCTYPE, CDATA and other declarations are not supported");
      } else if (starts("</")) {
        advance_to(pos_ + 2);
        std::string name = read_name();
        skip_space();
        if (name.empty() || pos_ >= t_.size() || t_[pos_] != '>') return fail(r, "malformed closing tag");
        if (stack.empty() || stack.back()->name != name)
          return fail(r, common::format("</{}> does not close {}", name,
                                        stack.empty() ? "anything" : "<" + stack.back()->name + ">"));
        stack.pop_back();
        advance_to(pos_ + 1);
      } else {
        if (stack.empty() && have_root) return fail(r, "second document element");
        if (static_cast<int>(stack.size()) >= kXmlMaxDepth)
          return fail(r, common::format("nesting deeper than {}", kXmlMaxDepth));
        XmlNode node;
        node.line = line_;
        advance_to(pos_ + 1);
        node.name = read_name();
        if (node.name.empty()) return fail(r, "'<' not followed by an element name");
        bool self_closing = false;
        std::string err;
        if (!read_attrs(&node, &self_closing, &err)) return fail(r, err);
        XmlNode* placed;
        if (stack.empty()) {
          r.root = std::move(node);
          placed = &r.root;
          have_root = true;
        } else {
          // Only the innermost open element grows, so pointers to its ancestors stay valid.
          stack.back()->children.push_back(std::move(node));
          placed = &stack.back()->children.back();
        }
        if (!self_closing) stack.push_back(placed);
      }
    }
  }

 private:
  XmlParse& fail(XmlParse& r, const std::string& msg) {
    r.ok = false;
    r.root = XmlNode{};
    r.error = common::format("line {}: {}", line_, msg);
    return r;
  }
  bool starts(const char* s) const { return t_.compare(pos_, std::strlen(s), s) == 0; }
  bool blank(size_t from, size_t to) const {
    for (size_t i = from; i < to; ++i)
      if (!std::isspace(static_cast<unsigned char>(t_[i]))) return false;
    return true;
  }
  void advance_to(size_t p) {
    for (; pos_ < p && pos_ < t_.size(); ++pos_)
      if (t_[pos_] == '\n') ++line_;
  }
  void skip_space() {
    while (pos_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[pos_]))) advance_to(pos_ + 1);
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':';
  }
  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < t_.size() && name_char(t_[pos_])) ++pos_;
    return t_.substr(start, pos_ - start);
  }
  bool read_attrs(XmlNode* node, bool* self_closing, std::string* err) {
    while (true) {
      skip_space();
      if (pos_ >= t_.size()) {
        *err = common::format("end of file inside tag <{}>", node->name);
        return false;
      }
      if (t_[pos_] == '>') {
        advance_to(pos_ + 1);
        return true;
      }
      if (starts("/>")) {
        advance_to(pos_ + 2);
        *self_closing = true;
        return true;
      }
      std::string key = read_name();
      if (key.empty()) {
        *err = common::format("unexpected '{}' in tag <{}>", t_[pos_], node->name);
        return false;
      }
      skip_space();
      if (pos_ >= t_.size() || t_[pos_] != '=') {
        *err = common::format("attribute {} has no value", key);
        return false;
      }
      advance_to(pos_ + 1);
      skip_space();
      if (pos_ >= t_.size() || (t_[pos_] != '"' && t_[pos_] != '\'')) {
        *err = common::format("value of attribute {} is not quoted", key);
        return false;
      }
      const char q = t_[pos_];
      const size_t end = t_.find(q, pos_ + 1);
      if (end == std::string::npos) {
        *err = common::format("unterminated value of attribute {}", key);
        return false;
      }
      std::string value;
      if (!unescape(t_.substr(pos_ + 1, end - pos_ - 1), &value)) {
        *err = common::format("bad entity in attribute {}", key);
        return false;
      }
      advance_to(end + 1);
      node->attrs.emplace_back(std::move(key), std::move(value));
    }
  }
  static bool unescape(const std::string& in, std::string* out) {
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '<') return false;
      if (in[i] != '&') {
        *out += in[i];
        continue;
      }
      const size_t semi = in.find(';', i);
      if (semi == std::string::npos || semi - i > 10) return false;
      const std::string ent = in.substr(i + 1, semi - i - 1);
      if (ent == "amp")
        *out += '&';
      else if (ent == "lt")
        *out += '<';
      else if (ent == "gt")
        *out += '>';
      else if (ent == "quot")
        *out += '"';
      else if (ent == "apos")
        *out += '\'';
      else if (ent.size() > 1 && ent[0] == '#') {
        char* end = nullptr;
        const bool hex = ent[1] == 'x' || ent[1] == 'X';
        const long v = std::strtol(ent.c_str() + (hex ? 2 : 1), &end, hex ? 16 : 10);
        if (!end || *end != '\0' || v <= 0 || v > 0x7F) return false;  // ASCII is all NCCL writes
        *out += static_cast<char>(v);
      } else {
        return false;
      }
      i = semi;
    }
    return true;
  }

  const std::string& t_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

XmlParse parse_xml(const std::string& text) { return Parser(text).run(); }

}  // namespace peerlink::topology
