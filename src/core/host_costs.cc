// host_costs.cc — see host_costs.h.
#include "core/host_costs.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace plait {
namespace {

constexpr size_t kMaxFileBytes = 64 << 10;

struct Field {
  const char* key;
  double HostCosts::*member;
  double low;  // exclusive unless lowInclusive
  bool lowInclusive;
  double high;   // inclusive
  double floor;  // what a fit below the range becomes
};

constexpr std::array<Field, 5> kFields{{
    {"call_us", &HostCosts::callUs, 0, true, 1e6, 0},
    {"hop_us", &HostCosts::hopUs, 0, false, 1e6, 0.01},
    {"ring_bytes_per_us", &HostCosts::ringBytesPerUs, 0, false, 1e9, 1},
    {"one_shot_us", &HostCosts::oneShotUs, 0, true, 1e6, 0},
    {"one_shot_bytes_per_us", &HostCosts::oneShotBytesPerUs, 0, false, 1e9, 1},
}};

bool inRange(const Field& f, double v) {
  return (f.lowInclusive ? v >= f.low : v > f.low) && v <= f.high;
}

std::string rangeText(const Field& f) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "%s%g, %g]", f.lowInclusive ? "[" : "(", f.low, f.high);
  return buf;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Weighted least squares of y = a + b x with weights 1/y^2. False when the
// x values do not determine a line (fewer than two distinct sizes).
bool fitLine(const std::vector<std::pair<double, double>>& xy, double* a, double* b) {
  double s = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    const double w = 1.0 / (y * y);
    s += w;
    sx += w * x;
    sxx += w * x * x;
    sy += w * y;
    sxy += w * x * y;
  }
  const double det = s * sxx - sx * sx;
  if (xy.size() < 2 || !(std::fabs(det) > 1e-12 * s * sxx)) return false;
  *a = (sxx * sy - sx * sxy) / det;
  *b = (s * sxy - sx * sy) / det;
  return true;
}

// Puts a fitted value into the field's range, saying so in *notes.
double clampFitted(const Field& f, double v, std::vector<std::string>* notes) {
  if (std::isfinite(v) && inRange(f, v)) return v;
  const double fixed = !std::isfinite(v) || v > f.high ? f.high : f.floor;
  if (notes != nullptr)
    notes->push_back(std::string(f.key) + " fitted as " + number(v) + ", outside " + rangeText(f) + ": set to " +
                     number(fixed));
  return fixed;
}

}  // namespace

Result<HostCosts> parseHostCosts(std::string_view text, const std::string& source) {
  HostCosts costs = kHostCosts;
  std::array<int, kFields.size()> seenAt{};
  int lineNo = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string line(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++lineNo;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key)) continue;  // blank or comment
    const std::string where = source + " line " + std::to_string(lineNo) + ": ";
    const auto field = std::find_if(kFields.begin(), kFields.end(), [&](const Field& f) { return key == f.key; });
    if (field == kFields.end())
      return invalidArgument(where + "unknown key \"" + key +
                             "\" (the keys are call_us, hop_us, ring_bytes_per_us, one_shot_us, "
                             "one_shot_bytes_per_us)");
    const size_t index = static_cast<size_t>(field - kFields.begin());
    if (seenAt[index] != 0)
      return invalidArgument(where + key + " given again (first on line " + std::to_string(seenAt[index]) + ")");
    if (!(words >> value)) return invalidArgument(where + key + " has no value");
    if (words >> extra) return invalidArgument(where + "unexpected \"" + extra + "\" after " + key + "'s value");
    errno = 0;
    char* parsedEnd = nullptr;
    const double v = std::strtod(value.c_str(), &parsedEnd);
    if (parsedEnd == value.c_str() || *parsedEnd != '\0' || errno == ERANGE || !std::isfinite(v))
      return invalidArgument(where + key + " \"" + value + "\" is not a finite number");
    if (!inRange(*field, v))
      return invalidArgument(where + key + " " + value + " is outside " + rangeText(*field));
    costs.*(field->member) = v;
    seenAt[index] = lineNo;
  }
  return costs;
}

Status checkHostCosts(const HostCosts& costs, const std::string& source) {
  for (const Field& f : kFields)
    if (!inRange(f, costs.*(f.member)))
      return invalidArgument(source + ": " + f.key + " " + number(costs.*(f.member)) + " is outside " + rangeText(f));
  return Status::ok();
}

std::string formatHostCosts(const HostCosts& costs, const std::vector<std::string>& comment) {
  std::string out;
  for (const std::string& c : comment) out += "# " + c + "\n";
  for (const Field& f : kFields) out += std::string(f.key) + " " + number(costs.*(f.member)) + "\n";
  return out;
}

Result<HostCosts> loadHostCosts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return systemError("cannot open the host cost calibration " + path);
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return systemError("cannot read the host cost calibration " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes)
    return invalidArgument("the host cost calibration " + path + " is larger than " +
                           std::to_string(kMaxFileBytes) + " bytes: not a calibration file");
  return parseHostCosts(text, path);
}

Result<HostCosts> hostCostsFromEnvironment(std::string* fromFile) {
  const char* path = std::getenv(kHostCostsVariable);
  if (fromFile != nullptr) fromFile->clear();
  if (path == nullptr || *path == '\0') return kHostCosts;
  auto costs = loadHostCosts(path);
  if (!costs.isOk()) return costs.takeStatus().withContext(kHostCostsVariable);
  if (fromFile != nullptr) *fromFile = path;
  return costs;
}

Result<HostCosts> fitHostCosts(const std::vector<CostSample>& samples, int nranks, std::vector<std::string>* notes) {
  if (nranks < 2) return invalidArgument("a host cost fit needs samples of 2 ranks or more, not " +
                                         std::to_string(nranks));
  std::array<std::vector<std::pair<double, double>>, 3> byKind;
  for (const CostSample& s : samples) {
    if (!(s.bytes >= 0) || !(s.us > 0) || !std::isfinite(s.bytes) || !std::isfinite(s.us))
      return invalidArgument("a cost sample of " + number(s.bytes) + " bytes in " + number(s.us) +
                             " us is not a measurement");
    byKind[s.kind].emplace_back(s.bytes, s.us);
  }
  const char* names[3] = {"ring AllReduce", "one-shot AllReduce", "ring AllGather"};
  std::array<double, 3> a{}, b{};
  for (int k = 0; k < 3; ++k)
    if (!fitLine(byKind[k], &a[k], &b[k]))
      return invalidArgument(std::string("a host cost fit needs ") + names[k] + " samples at two sizes or more (got " +
                             std::to_string(byKind[k].size()) + ")");
  // The rings' intercepts: call + 2(n-1) hop (AllReduce), call + (n-1) hop
  // (AllGather); two equations, two unknowns.
  const double n = nranks;
  HostCosts c = kHostCosts;
  const double hop = (a[CostSample::kRingAllReduce] - a[CostSample::kRingAllGather]) / (n - 1);
  c.hopUs = clampFitted(kFields[1], hop, notes);
  c.callUs = clampFitted(kFields[0], a[CostSample::kRingAllGather] - (n - 1) * c.hopUs, notes);
  c.oneShotUs = clampFitted(kFields[3], a[CostSample::kOneShotAllReduce], notes);
  // A slope of zero or less: faster than the samples can tell (the top of the range).
  auto rate = [](double bytesPerByte, double slope) { return slope > 0 ? bytesPerByte / slope : HUGE_VAL; };
  c.ringBytesPerUs = clampFitted(kFields[2], rate(ringBytesPerLink(CollType::kAllReduce, nranks),
                                                   b[CostSample::kRingAllReduce]), notes);
  c.oneShotBytesPerUs = clampFitted(kFields[4], rate(n, b[CostSample::kOneShotAllReduce]), notes);
  return c;
}

}  // namespace plait
