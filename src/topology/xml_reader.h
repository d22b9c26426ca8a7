// A small, strict-enough XML reader for NCCL topology files: elements, attributes (single or double
// quotes, the five predefined entities and numeric references), comments, processing instructions
// and text (ignored). No DTDs, namespaces or CDATA. Never throws; errors name the line.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace peerlink::topology {

struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::vector<XmlNode> children;
  int line = 0;
  // Attribute value, or nullptr when absent.
  const std::string* attr(const std::string& key) const;
};

struct XmlParse {
  bool ok = false;
  XmlNode root;       // the document element when ok
  std::string error;  // "line N: ..." when !ok
};

constexpr size_t kXmlMaxBytes = size_t(16) << 20;
constexpr int kXmlMaxDepth = 64;

XmlParse parse_xml(const std::string& text);

}  // namespace peerlink::topology
