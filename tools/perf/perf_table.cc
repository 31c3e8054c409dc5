// tools/perf/perf_table.cc — nccl-tests' table layout and the JSON file.
#include "perf_table.h"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>

namespace plait::perf {
namespace {

std::string normalise(std::string_view name) {
  std::string s;
  for (char c : name) {
    if (c != '_' && c != '-') s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string formatTime(double us) {
  char buf[32];
  if (us >= 10000.0) {
    std::snprintf(buf, sizeof buf, "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(buf, sizeof buf, "%7.1f", us);
  } else {
    std::snprintf(buf, sizeof buf, "%7.2f", us);
  }
  return buf;
}

std::string formatMeasurement(const Measurement& m) {
  char buf[96];
  if (!m.present) {
    std::snprintf(buf, sizeof buf, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return buf;
  }
  std::string wrong = m.wrong < 0 ? "N/A" : std::to_string(m.wrong);
  std::snprintf(buf, sizeof buf, "  %7s  %6.2f  %6.2f  %6s", formatTime(m.timeUs).c_str(), m.algBw, m.busBw,
                wrong.c_str());
  return buf;
}

nlohmann::json measurementJson(const Measurement& m) {
  if (!m.present) return nullptr;
  nlohmann::json j = {{"time_us", m.timeUs}, {"algbw_gbps", m.algBw}, {"busbw_gbps", m.busBw}};
  j["wrong"] = m.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.wrong);
  return j;
}

}  // namespace

double busFactorFor(std::string_view collective, int nranks) {
  std::string c = normalise(collective);
  double n = nranks;
  if (c == "allreduce") return nranks > 0 ? 2.0 * (n - 1) / n : 0;
  if (c == "allgather" || c == "reducescatter" || c == "alltoall" || c == "gather" || c == "scatter" ||
      c == "reducescatterblock") {
    return nranks > 0 ? (n - 1) / n : 0;
  }
  return 1.0;
}

Measurement makeMeasurement(size_t bytes, double timeUs, double busFactor, long long wrong) {
  Measurement m;
  m.present = true;
  m.timeUs = timeUs;
  m.algBw = timeUs > 0 ? static_cast<double>(bytes) / (timeUs * 1.0e3) : 0;
  m.busBw = m.algBw * busFactor;
  m.wrong = wrong;
  return m;
}

void printTableHeader(FILE* out) {
  std::fprintf(out, "#\n");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %31s  %31s\n", "", "", "", "", "", "out-of-place", "in-place");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
               "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "",
               "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(out);
}

std::string formatRow(const TableRow& row) {
  char head[128];
  std::snprintf(head, sizeof head, "%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, row.type.c_str(),
                row.redop.c_str(), row.root);
  return head + formatMeasurement(row.outOfPlace) + formatMeasurement(row.inPlace);
}

void printFooter(FILE* out, long long wrongTotal, double avgBusBw) {
  std::fprintf(out, "# Out of bounds values : %lld %s\n", wrongTotal, wrongTotal == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n", avgBusBw);
  std::fprintf(out, "#\n");
  std::fflush(out);
}

bool writeJsonReport(const std::string& path, const JsonReport& report) {
  nlohmann::json j;
  j["program"] = report.program;
  j["collective"] = report.collective;
  j["nranks"] = report.nranks;
  j["settings"] = report.settings;
  j["devices"] = report.devices;
  nlohmann::json rows = nlohmann::json::array();
  for (const TableRow& r : report.rows) {
    rows.push_back({{"size_bytes", r.bytes},
                    {"count", r.count},
                    {"type", r.type},
                    {"redop", r.redop},
                    {"root", r.root},
                    {"out_of_place", measurementJson(r.outOfPlace)},
                    {"in_place", measurementJson(r.inPlace)}});
  }
  j["results"] = rows;
  j["out_of_bounds"] = report.wrongTotal;
  j["avg_busbw_gbps"] = report.avgBusBw;
  std::ofstream file(path);
  if (!file) {
    std::fprintf(stderr, "# cannot write JSON output file '%s'\n", path.c_str());
    return false;
  }
  file << j.dump(2) << "\n";
  return static_cast<bool>(file);
}

}  // namespace plait::perf
