// graph_xml.h — NCCL's graph XML (NCCL_GRAPH_DUMP_FILE / NCCL_GRAPH_FILE):
//
//   <graphs version="1">
//     <graph id="0" pattern="4" crossnic="0" nchannels="2" speedintra="40"
//            speedinter="40" latencyinter="0" typeintra="NVL" typeinter="PIX"
//            samechannels="0">
//       <channel><net dev="0"/><gpu dev="0"/>...<gpu dev="7"/><net dev="0"/></channel>
//     </graph>
//   </graphs>
//
// GPUs and NICs are named by their `dev` attributes in the topology, not by
// Plait's ordinals, so a file written by NCCL reads here and the other way.
#pragma once

#include <vector>

#include "plait/status.hpp"
#include "topology/search.h"
#include "topology/system.h"
#include "topology/xml.h"

namespace plait::topo {

XmlNode graphsToXml(const TopoSystem& system, const std::vector<NodeGraph>& graphs);

// Parses every <graph>; InvalidArgument when a <gpu dev> or <net dev> names
// no device of `system`, or an attribute is malformed. Channels are returned
// as written; validateGraph() checks them against the system.
Result<std::vector<NodeGraph>> graphsFromXml(const TopoSystem& system, const XmlNode& root);

}  // namespace plait::topo
