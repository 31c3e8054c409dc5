// xml.h — a small, lossless in-memory XML tree for NCCL's topology and graph
// files, parsed and written with pugixml.
//
// The tree keeps every element and every attribute in document order, known
// or not, so a file read and written again says the same thing (NCCL's files
// carry attributes Plait does not model, and future NCCL versions add more).
// Comments, processing instructions and text content are not kept: NCCL's
// schema has none that carry meaning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plait/status.hpp"

namespace plait::topo {

struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  // document order
  std::vector<XmlNode> children;

  // The attribute's text, or nullptr when absent.
  const std::string* attr(std::string_view key) const;
  bool hasAttr(std::string_view key) const { return attr(key) != nullptr; }
  std::string attrOr(std::string_view key, std::string_view fallback) const;
  // Integer attribute ("12", "0x1f", "-1"); `fallback` when absent or malformed.
  int64_t intAttr(std::string_view key, int64_t fallback) const;
  double floatAttr(std::string_view key, double fallback) const;
  // For values that size or index something: the attribute as an integer in
  // [lo, hi] (`fallback` when absent or empty). InvalidArgument naming the
  // element, attribute and text when it is not a whole integer ("1e11",
  // "12abc"), overflows, or is out of range.
  Result<int64_t> intAttrIn(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const;
  // The same for real numbers (finite, in [lo, hi]).
  Result<double> floatAttrIn(std::string_view key, double fallback, double lo, double hi) const;
  // Replaces the value when present (keeping its position), appends otherwise.
  void setAttr(std::string_view key, std::string value);
  // Sets only when absent: how detection completes a user's file without
  // overriding what the user wrote.
  void initAttr(std::string_view key, std::string value);

  // First child with this element name, or nullptr.
  const XmlNode* child(std::string_view childName) const;
  XmlNode* child(std::string_view childName);
  XmlNode& addChild(std::string childName);
};

// Elements nested deeper than this are refused (NCCL's topology files are
// under 10 deep; conversion and destruction of the tree recurse per level).
inline constexpr int kMaxXmlDepth = 64;

// Parses a document; the result is its root element. InvalidArgument names
// the offset and pugixml's reason on malformed input, or the depth limit.
Result<XmlNode> parseXml(std::string_view text);
Result<XmlNode> readXmlFile(const std::string& path);
// Two-space indentation, no declaration, attributes in stored order (the
// layout NCCL's own dumps use).
std::string writeXml(const XmlNode& root);
Status writeXmlFile(const std::string& path, const XmlNode& root);

// Structural equality: names, attributes (order-sensitive) and children.
bool operator==(const XmlNode& a, const XmlNode& b);

}  // namespace plait::topo
