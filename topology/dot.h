// dot.h — Graphviz pictures of a host: its nodes and links, with the rings of
// a graph drawn over them (one colour per channel).
#pragma once

#include <string>

#include "topology/search.h"
#include "topology/system.h"

namespace plait::topo {

struct DotOptions {
  int maxChannels = 8;  // channels drawn; more only clutter the picture
  std::string title;
};

// A `digraph` in DOT: links drawn once per node pair, labelled with type and
// bandwidth; ring hops as coloured arrows between GPUs (and NICs, for
// multi-node channels). `graph` may have no channels.
std::string toDot(const TopoSystem& system, const NodeGraph& graph, const DotOptions& options = {});

}  // namespace plait::topo
