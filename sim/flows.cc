// flows.cc — see flows.h.
#include "sim/flows.h"

#include <algorithm>
#include <limits>

namespace plait::sim {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

void mergeUses(std::vector<FlowUse>* uses) {
  std::sort(uses->begin(), uses->end(), [](const FlowUse& a, const FlowUse& b) { return a.link < b.link; });
  size_t out = 0;
  for (size_t i = 0; i < uses->size(); ++i) {
    if (out > 0 && (*uses)[out - 1].link == (*uses)[i].link) {
      (*uses)[out - 1].weight += (*uses)[i].weight;
    } else {
      (*uses)[out++] = (*uses)[i];
    }
  }
  uses->resize(out);
}

std::vector<double> maxMinRates(const std::vector<double>& capacity, const std::vector<Flow>& flows) {
  std::vector<double> rate(flows.size(), 0.0);
  std::vector<double> left = capacity;             // capacity not yet handed out
  std::vector<double> weight(capacity.size(), 0);  // weights of the unfrozen flows through each link
  std::vector<int> used;                           // links some flow crosses
  std::vector<char> frozen(flows.size(), 0);
  size_t unfrozen = 0;
  for (size_t f = 0; f < flows.size(); ++f) {
    if (flows[f].uses.empty() && flows[f].ceilingGBs <= 0) {
      rate[f] = kInf;
      frozen[f] = 1;
      continue;
    }
    ++unfrozen;
    for (const FlowUse& u : flows[f].uses) {
      if (weight[u.link] == 0) used.push_back(u.link);
      weight[u.link] += u.weight;
    }
  }
  while (unfrozen > 0) {
    // The largest equal increase every unfrozen flow can take.
    double inc = kInf;
    for (int l : used)
      if (weight[l] > 0) inc = std::min(inc, left[l] / weight[l]);
    for (size_t f = 0; f < flows.size(); ++f)
      if (!frozen[f] && flows[f].ceilingGBs > 0) inc = std::min(inc, flows[f].ceilingGBs - rate[f]);
    inc = std::max(inc, 0.0);
    for (int l : used) left[l] -= inc * weight[l];
    for (size_t f = 0; f < flows.size(); ++f)
      if (!frozen[f]) rate[f] += inc;
    // Freeze the flows at a full link or at their ceiling. The increase
    // filled some link or ceiling, so a round freezes a flow; should rounding
    // leave every margin a hair above its threshold, the round freezes all.
    const size_t before = unfrozen;
    for (int pass = 0; pass < 2 && unfrozen == before; ++pass) {
      for (size_t f = 0; f < flows.size(); ++f) {
        if (frozen[f]) continue;
        bool stop = pass == 1 || (flows[f].ceilingGBs > 0 && rate[f] >= flows[f].ceilingGBs * (1 - 1e-12));
        for (const FlowUse& u : flows[f].uses) stop = stop || left[u.link] <= capacity[u.link] * 1e-12;
        if (!stop) continue;
        frozen[f] = 1;
        --unfrozen;
        for (const FlowUse& u : flows[f].uses) weight[u.link] -= u.weight;
      }
    }
    for (int l : used)
      if (weight[l] < 1e-12) weight[l] = 0;
  }
  return rate;
}

std::vector<double> simulateFlows(const std::vector<double>& capacity, const std::vector<TimedFlow>& flows) {
  const size_t n = flows.size();
  std::vector<double> finish(n, kInf), left(n);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    left[i] = flows[i].bytes;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return flows[a].startUs < flows[b].startUs; });
  std::vector<size_t> active;
  size_t next = 0;
  double now = n > 0 ? flows[order[0]].startUs : 0;
  while (next < n || !active.empty()) {
    while (next < n && flows[order[next]].startUs <= now) active.push_back(order[next++]);
    std::vector<Flow> current;
    current.reserve(active.size());
    for (size_t i : active) current.push_back(flows[i].flow);
    const std::vector<double> rate = maxMinRates(capacity, current);
    // The next event: a flow ends (bytes / (GB/s = 1e3 bytes per us)) or one starts.
    double step = next < n ? flows[order[next]].startUs - now : kInf;
    for (size_t k = 0; k < active.size(); ++k) step = std::min(step, left[active[k]] / (rate[k] * 1e3));
    if (step == kInf) break;  // flows that cannot move (a zero-capacity link)
    now += step;
    // Flows that end within a hair of this event end with it: symmetric
    // flows then finish in one event, not one event each.
    const double close = step * 1e-6;
    std::vector<size_t> still;
    for (size_t k = 0; k < active.size(); ++k) {
      const size_t i = active[k];
      left[i] -= rate[k] * 1e3 * step;
      if (left[i] <= flows[i].bytes * 1e-12 || left[i] <= rate[k] * 1e3 * close) {
        finish[i] = now;
      } else {
        still.push_back(i);
      }
    }
    active.swap(still);
  }
  return finish;
}

}  // namespace plait::sim
