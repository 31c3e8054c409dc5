// xml.cc — XmlNode <-> text through pugixml.
#include "topology/xml.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include <pugixml.hpp>

namespace plait::topo {

const std::string* XmlNode::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string XmlNode::attrOr(std::string_view key, std::string_view fallback) const {
  const std::string* v = attr(key);
  return v ? *v : std::string(fallback);
}

int64_t XmlNode::intAttr(std::string_view key, int64_t fallback) const {
  const std::string* v = attr(key);
  if (!v || v->empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(v->c_str(), &end, 0);
  if (errno != 0 || end == v->c_str()) return fallback;
  return parsed;
}

double XmlNode::floatAttr(std::string_view key, double fallback) const {
  const std::string* v = attr(key);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  double parsed = std::strtod(v->c_str(), &end);
  return end == v->c_str() ? fallback : parsed;
}

namespace {

Status badNumber(const XmlNode& node, std::string_view key, const std::string& text, const std::string& want) {
  return invalidArgument("<" + node.name + " " + std::string(key) + "=\"" + text + "\">: expected " + want);
}

bool onlySpaceFrom(const char* p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  return *p == 0;
}

}  // namespace

Result<int64_t> XmlNode::intAttrIn(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const {
  const std::string* v = attr(key);
  if (!v || v->empty()) return fallback;
  const std::string want = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(v->c_str(), &end, 0);
  if (errno != 0 || end == v->c_str() || !onlySpaceFrom(end) || parsed < lo || parsed > hi)
    return badNumber(*this, key, *v, want);
  return static_cast<int64_t>(parsed);
}

Result<double> XmlNode::floatAttrIn(std::string_view key, double fallback, double lo, double hi) const {
  const std::string* v = attr(key);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  double parsed = std::strtod(v->c_str(), &end);
  if (errno != 0 || end == v->c_str() || !onlySpaceFrom(end) || !(parsed >= lo && parsed <= hi))
    return badNumber(*this, key, *v, "a number in " + std::to_string(lo) + ".." + std::to_string(hi));
  return parsed;
}

void XmlNode::setAttr(std::string_view key, std::string value) {
  for (auto& [k, v] : attrs) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(key), std::move(value));
}

void XmlNode::initAttr(std::string_view key, std::string value) {
  if (!hasAttr(key)) attrs.emplace_back(std::string(key), std::move(value));
}

const XmlNode* XmlNode::child(std::string_view childName) const {
  for (const XmlNode& c : children) {
    if (c.name == childName) return &c;
  }
  return nullptr;
}

XmlNode* XmlNode::child(std::string_view childName) {
  for (XmlNode& c : children) {
    if (c.name == childName) return &c;
  }
  return nullptr;
}

XmlNode& XmlNode::addChild(std::string childName) {
  children.emplace_back();
  children.back().name = std::move(childName);
  return children.back();
}

bool operator==(const XmlNode& a, const XmlNode& b) {
  return a.name == b.name && a.attrs == b.attrs && a.children == b.children;
}

namespace {

XmlNode fromPugi(const pugi::xml_node& in) {
  XmlNode out;
  out.name = in.name();
  for (const pugi::xml_attribute& a : in.attributes()) out.attrs.emplace_back(a.name(), a.value());
  for (const pugi::xml_node& c : in.children()) {
    if (c.type() == pugi::node_element) out.children.push_back(fromPugi(c));
  }
  return out;
}

void toPugi(const XmlNode& in, pugi::xml_node out) {
  for (const auto& [k, v] : in.attrs) out.append_attribute(k.c_str()).set_value(v.c_str());
  for (const XmlNode& c : in.children) toPugi(c, out.append_child(c.name.c_str()));
}

}  // namespace

Result<XmlNode> parseXml(std::string_view text) {
  pugi::xml_document doc;
  pugi::xml_parse_result parsed = doc.load_buffer(text.data(), text.size());
  if (!parsed) {
    return invalidArgument("malformed XML at offset " + std::to_string(parsed.offset) + ": " +
                           parsed.description());
  }
  pugi::xml_node root = doc.document_element();
  if (!root) return invalidArgument("XML document has no root element");
  // Depth first, without recursion: fromPugi recurses once per level.
  std::vector<std::pair<pugi::xml_node, int>> stack{{root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > kMaxXmlDepth)
      return invalidArgument("XML elements nested deeper than " + std::to_string(kMaxXmlDepth) + " levels (at <" +
                             std::string(node.name()) + ">)");
    for (pugi::xml_node c = node.first_child(); c; c = c.next_sibling())
      if (c.type() == pugi::node_element) stack.emplace_back(c, depth + 1);
  }
  return fromPugi(root);
}

Result<XmlNode> readXmlFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return systemError("cannot open XML file " + path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  Result<XmlNode> parsed = parseXml(buffer.str());
  if (!parsed) return Status(parsed.status()).withContext("reading " + path);
  return parsed;
}

std::string writeXml(const XmlNode& root) {
  pugi::xml_document doc;
  toPugi(root, doc.append_child(root.name.c_str()));
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_indent | pugi::format_no_declaration, pugi::encoding_utf8);
  return out.str();
}

Status writeXmlFile(const std::string& path, const XmlNode& root) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return systemError("cannot create XML file " + path);
  out << writeXml(root);
  out.close();
  if (!out) return systemError("cannot write XML file " + path);
  return Status::ok();
}

}  // namespace plait::topo
