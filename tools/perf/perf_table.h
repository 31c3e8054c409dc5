// tools/perf/perf_table.h — nccl-tests' result table, footer, bus-bandwidth
// formulas and JSON file, shared by Plait's *_perf tools and the peer
// benchmarks in perf/ (Open MPI, Gloo, memcpy) so every program prints the
// same format and perf/compare parses one format.
//
// Nothing here depends on the library: it is plain formatting.
#pragma once

#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace plait::perf {

// One half of a row (out-of-place or in-place).
struct Measurement {
  bool present = false;  // false: printed as N/A (the program has no such variant)
  double timeUs = 0;
  double algBw = 0;      // GB/s (1e9 bytes per second)
  double busBw = 0;
  long long wrong = -1;  // -1: not checked (N/A)
};

struct TableRow {
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  Measurement outOfPlace;
  Measurement inPlace;
};

// busbw / algbw for the named collective ("AllReduce", "all_reduce",
// "allreduce", ... case- and underscore-insensitive) on n ranks, as in
// nccl-tests: AllReduce 2(n-1)/n; AllGather, ReduceScatter, AlltoAll, Gather,
// Scatter (n-1)/n; Broadcast, Reduce, SendRecv and anything else 1.
double busFactorFor(std::string_view collective, int nranks);

// Fills algBw and busBw from bytes and timeUs.
Measurement makeMeasurement(size_t bytes, double timeUs, double busFactor, long long wrong);

// The three header lines of the table (column titles and units).
void printTableHeader(FILE* out);
// One row, without the trailing newline, exactly as nccl-tests lays it out.
std::string formatRow(const TableRow& row);
// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth    : X".
void printFooter(FILE* out, long long wrongTotal, double avgBusBw);

// The -J file: the run's settings, the per-rank device lines, every row and
// the footer values. Returns false (and prints why) when the file cannot be
// written.
struct JsonReport {
  std::string program;
  std::string collective;
  int nranks = 1;
  std::map<std::string, std::string> settings;
  std::vector<std::string> devices;
  std::vector<TableRow> rows;
  long long wrongTotal = 0;
  double avgBusBw = 0;
};
bool writeJsonReport(const std::string& path, const JsonReport& report);

}  // namespace plait::perf
