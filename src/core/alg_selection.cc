// alg_selection.cc — see alg_selection.h.
#include "core/alg_selection.h"

#include <strings.h>

#include <array>
#include <string_view>

namespace plait {
namespace {

constexpr uint8_t kAllAlgos = kAlgoRing | kAlgoOneShot | kAlgoDirect | kAlgoSymmetric | kAlgoTree;

struct NamedAlgo {
  const char* name;
  uint8_t bits;  // 0: NCCL's, not run by Plait
};
constexpr std::array<NamedAlgo, 10> kAlgoNames{{{"ring", kAlgoRing},
                                                {"oneshot", kAlgoOneShot},
                                                {"direct", kAlgoDirect},
                                                {"symmetric", kAlgoSymmetric},
                                                {"tree", kAlgoTree},
                                                {"pat", 0},
                                                {"nvls", 0},
                                                {"nvlstree", 0},
                                                {"collnetdirect", 0},
                                                {"collnetchain", 0}}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsNoCase(std::string_view a, const char* b) {
  return a.size() == std::char_traits<char>::length(b) && strncasecmp(a.data(), b, a.size()) == 0;
}

// NCCL's names of the collectives in per-collective selections.
bool collMatches(std::string_view name, CollType coll) {
  switch (coll) {
    case CollType::kAllReduce: return equalsNoCase(name, "allreduce");
    case CollType::kBroadcast: return equalsNoCase(name, "broadcast");
    case CollType::kReduce: return equalsNoCase(name, "reduce");
    case CollType::kAllGather: return equalsNoCase(name, "allgather");
    case CollType::kReduceScatter: return equalsNoCase(name, "reducescatter");
    case CollType::kAlltoAll: return equalsNoCase(name, "alltoall");
    case CollType::kGather: return equalsNoCase(name, "gather");
    case CollType::kScatter: return equalsNoCase(name, "scatter");
    case CollType::kSend:
    case CollType::kRecv: return equalsNoCase(name, "sendrecv");
  }
  return false;
}

bool knownColl(std::string_view name) {
  for (const char* n : {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather",
                        "scatter", "sendrecv"})
    if (equalsNoCase(name, n)) return true;
  return false;
}

// "[^]name[,name...]" into the bits it allows.
Result<uint8_t> parseList(std::string_view list, const std::string& whole) {
  list = trim(list);
  const bool exclude = !list.empty() && list.front() == '^';
  if (exclude) list.remove_prefix(1);
  uint8_t named = 0;
  size_t count = 0;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (name.empty()) return invalidArgument("algSelection \"" + whole + "\" has an empty algorithm name");
    const NamedAlgo* found = nullptr;
    for (const NamedAlgo& a : kAlgoNames)
      if (equalsNoCase(name, a.name)) found = &a;
    if (found == nullptr)
      return invalidArgument("algSelection \"" + whole + "\" names an unknown algorithm \"" + std::string(name) +
                             "\" (Plait runs ring, oneshot, tree, direct, symmetric; NCCL also names pat, nvls, "
                             "nvlstree, collnetdirect, collnetchain)");
    named |= found->bits;
    ++count;
  }
  if (count == 0) return invalidArgument("algSelection \"" + whole + "\" lists no algorithm");
  return exclude ? static_cast<uint8_t>(kAllAlgos & ~named) : named;
}

}  // namespace

Result<AlgSelection> parseAlgSelection(const char* text, CollType coll) {
  AlgSelection out;
  if (text == nullptr || trim(text).empty()) return out;
  const std::string whole = text;
  std::string_view rest = whole;
  if (rest.find(':') == std::string_view::npos) {
    PLAIT_ASSIGN_OR_RETURN(out.algos, parseList(rest, whole));
    out.restricted = true;
    return out;
  }
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string_view part = trim(rest.substr(0, semi));
    rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
    if (part.empty()) continue;
    const size_t colon = part.find(':');
    if (colon == std::string_view::npos)
      return invalidArgument("algSelection \"" + whole + "\" mixes per-collective parts with \"" + std::string(part) +
                             "\" (write collective:algorithms for each part)");
    const std::string_view name = trim(part.substr(0, colon));
    if (!knownColl(name))
      return invalidArgument("algSelection \"" + whole + "\" names an unknown collective \"" + std::string(name) +
                             "\"");
    PLAIT_ASSIGN_OR_RETURN(uint8_t algos, parseList(part.substr(colon + 1), whole));
    if (!collMatches(name, coll)) continue;
    out.restricted = true;
    out.algos = algos;
  }
  return out;
}

std::string algoNames(uint8_t algos) {
  std::string out;
  for (const NamedAlgo& a : kAlgoNames)
    if (a.bits != 0 && (algos & a.bits) != 0) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out.empty() ? "none" : out;
}

}  // namespace plait
