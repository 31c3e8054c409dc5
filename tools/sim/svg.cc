// svg.cc — see svg.h.
#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace plait::sim {
namespace {

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

std::string sizeLabel(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%g %s", bytes, units[u]);
  return buf;
}

// White -> orange -> dark red.
std::string heat(double v) {
  v = std::clamp(v, 0.0, 1.0);
  int r, g, b;
  if (v < 0.5) {
    const double t = v / 0.5;
    r = 255;
    g = static_cast<int>(255 - t * (255 - 165));
    b = static_cast<int>(255 - t * 255);
  } else {
    const double t = (v - 0.5) / 0.5;
    r = static_cast<int>(255 - t * (255 - 139));
    g = static_cast<int>(165 - t * 165);
    b = 0;
  }
  char buf[16];
  snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

}  // namespace

std::string sweepSvg(const std::string& title, const std::vector<SweepPoint>& points,
                     const std::vector<SweepPoint>& reference) {
  const double w = 760, h = 440, left = 70, right = 20, top = 40, bottom = 60;
  double lo = 1e300, hi = 0, top_bw = 1;
  for (const auto* set : {&points, &reference})
    for (const SweepPoint& p : *set) {
      lo = std::min(lo, std::log2(std::max(p.bytes, 1.0)));
      hi = std::max(hi, std::log2(std::max(p.bytes, 1.0)));
      top_bw = std::max(top_bw, p.busBw);
    }
  if (hi <= lo) hi = lo + 1;
  top_bw *= 1.1;
  auto x = [&](double bytes) { return left + (std::log2(std::max(bytes, 1.0)) - lo) / (hi - lo) * (w - left - right); };
  auto y = [&](double bw) { return h - bottom - bw / top_bw * (h - top - bottom); };
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                      w, h);
  s += fmt("<text x=\"%g\" y=\"22\" font-size=\"15\">", left) + escape(title) + "</text>\n";
  s += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", left, h - bottom, w - right, h - bottom);
  s += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"black\"/>\n", left, top, left, h - bottom);
  for (double e = std::ceil(lo / 2) * 2; e <= hi; e += 2) {
    const double px = x(std::exp2(e));
    s += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>\n", px, top, px, h - bottom);
    s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">", px, h - bottom + 16) + sizeLabel(std::exp2(e)) + "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double bw = top_bw * i / 5, py = y(bw);
    s += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#eee\"/>\n", left, py, w - right, py);
    s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.0f</text>\n", left - 6, py + 4, bw);
  }
  s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">message size</text>\n", (left + w - right) / 2, h - 20);
  s += fmt("<text x=\"16\" y=\"%g\" transform=\"rotate(-90 16 %g)\" text-anchor=\"middle\">bus bandwidth (GB/s)</text>\n",
           (top + h - bottom) / 2, (top + h - bottom) / 2);
  std::string path;
  for (const SweepPoint& p : points) path += fmt("%g,%g ", x(p.bytes), y(p.busBw));
  s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + path + "\"/>\n";
  std::string last;
  for (const SweepPoint& p : points) {
    s += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"3\" fill=\"#1f77b4\"/>\n", x(p.bytes), y(p.busBw));
    if (p.plan != last)
      s += fmt("<text x=\"%g\" y=\"%g\" font-size=\"10\" fill=\"#555\">", x(p.bytes) + 4, y(p.busBw) - 6) + escape(p.plan) +
           "</text>\n";
    last = p.plan;
  }
  for (const SweepPoint& p : reference) {
    const double px = x(p.bytes), py = y(p.busBw);
    s += fmt("<path d=\"M %g %g l 6 6 l -6 6 l -6 -6 z\" fill=\"#d62728\"/>\n", px, py - 6);
    s += fmt("<text x=\"%g\" y=\"%g\" font-size=\"10\" fill=\"#d62728\" text-anchor=\"end\">", px - 8, py + 18) +
         escape(p.plan) + "</text>\n";
  }
  s += fmt("<text x=\"%g\" y=\"%g\" font-size=\"11\" fill=\"#1f77b4\">plait-sim</text>\n", w - right - 150, top + 14);
  if (!reference.empty())
    s += fmt("<text x=\"%g\" y=\"%g\" font-size=\"11\" fill=\"#d62728\">published</text>\n", w - right - 80, top + 14);
  return s + "</svg>\n";
}

std::string fabricHeatmapSvg(const std::string& title, const ClusterModel& model, const std::vector<HeatPanel>& panels,
                             const std::string& legend, double scale, int maxHosts) {
  const Fabric& f = model.fabric();
  const int hosts = f.hosts(), rails = std::max(f.rails(), 1), groups = f.leafGroups();
  const int perRow = hosts > maxHosts ? std::max(1, f.spec().hostsPerLeaf) : 1;
  const int hostRows = (hosts + perRow - 1) / perRow;
  const int rows = hostRows + groups;
  // cell[panel][row][rail]
  std::vector<std::vector<std::vector<double>>> cell(
      panels.size(), std::vector<std::vector<double>>(rows, std::vector<double>(rails, 0.0)));
  double top = scale;
  for (size_t p = 0; p < panels.size(); ++p) {
    const std::vector<double>& v = panels[p].perLink;
    for (int hst = 0; hst < hosts; ++hst)
      for (int k = 0; k < rails; ++k)
        for (bool up : {true, false}) {
          const int l = f.nicLink(hst, k, up);
          if (l >= 0) cell[p][hst / perRow][k] = std::max(cell[p][hst / perRow][k], v[l]);
        }
    for (int g = 0; g < groups; ++g)
      for (int k = 0; k < rails; ++k)
        for (bool up : {true, false}) {
          for (int sp = 0; sp < f.spineLinksPerLeaf(); ++sp) {
            const int l = f.leafLink(k, g, up, sp);
            if (l >= 0) cell[p][hostRows + g][k] = std::max(cell[p][hostRows + g][k], v[l]);
          }
        }
    if (scale <= 0)
      for (const auto& row : cell[p])
        for (double x : row) top = std::max(top, x);
  }
  const double cw = 12, ch = std::max(4.0, std::min(12.0, 560.0 / rows)), left = 100, head = 70, gap = 24;
  const double panelW = rails * cw;
  const double legendX = left + panels.size() * (panelW + gap) + 10;
  const double w = std::max(legendX + 200, 640.0), h = head + rows * ch + (groups > 0 ? ch : 0) + 50;
  std::string s = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                      "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                      w, h);
  s += "<text x=\"10\" y=\"20\" font-size=\"14\">" + escape(title) + "</text>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const double x0 = left + p * (panelW + gap);
    s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\" font-size=\"12\">", x0 + panelW / 2, head - 26) +
         escape(panels[p].label) + "</text>\n";
    s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\" font-size=\"9\">rails 0..%g</text>\n", x0 + panelW / 2,
             head - 8, rails - 1);
    double y = head;
    for (int r = 0; r < rows; ++r) {
      if (r == hostRows && groups > 0) y += ch;  // a gap before the leaves
      for (int k = 0; k < rails; ++k)
        s += fmt("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" stroke=\"#ccc\" stroke-width=\"0.2\" fill=\"",
                 x0 + k * cw, y, cw, ch) + heat(top > 0 ? cell[p][r][k] / top : 0) + "\"/>\n";
      y += ch;
    }
  }
  double y = head;
  for (int r = 0; r < rows; ++r) {
    if (r == hostRows && groups > 0) y += ch;
    const bool leaf = r >= hostRows;
    const std::string label = leaf ? "leaf " + std::to_string(r - hostRows) + " spine"
                                   : (perRow > 1 ? "hosts " + std::to_string(r * perRow) + "+" : "host " + std::to_string(r));
    if (leaf || ch >= 8 || r % 8 == 0)
      s += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"end\" font-size=\"%g\">", left - 6, y + ch - 1, std::min(10.0, ch + 1)) +
           label + "</text>\n";
    y += ch;
  }
  for (int i = 0; i <= 10; ++i)
    s += fmt("<rect x=\"%g\" y=\"%g\" width=\"16\" height=\"14\" fill=\"", legendX, head + (10 - i) * 14) +
         heat(i / 10.0) + "\"/>\n";
  s += fmt("<text x=\"%g\" y=\"%g\">%.3g</text>\n", legendX + 22, head + 10, top);
  s += fmt("<text x=\"%g\" y=\"%g\">0</text>\n", legendX + 22, head + 150);
  s += fmt("<text x=\"%g\" y=\"%g\">", legendX, head + 175) + escape(legend) + "</text>\n";
  return s + "</svg>\n";
}

}  // namespace plait::sim
