// make_seeds — writes the binary seeds of the committed corpora (valid
// unique ids, hellos, replies, peer tables, message streams, plugin
// descriptions) from the real structs, so they stay valid when a struct
// changes: build fuzz_make_seeds and run it with tests/fuzz/corpus as its
// first argument (tests/topology/data the second). Text seeds (XML,
// environment values) are committed as written.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/socket.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"
#include "topology/graph_xml.h"
#include "topology/paths.h"
#include "topology/search.h"
#include "topology/system.h"
#include "topology/xml.h"

namespace {

using namespace plait;
using namespace plait::bootstrap_wire;

constexpr uint64_t kJobNonce = 0x0123456789abcdefULL;  // fuzz_bootstrap_wire.cc's job

std::string root;

void put(const std::string& file, const std::vector<uint8_t>& bytes) {
  const std::string path = root + "/" + file;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

PeerInfo peer(int rank, const char* addr) {
  PeerInfo p;
  p.rank = rank;
  p.hostHash = 0x1234 + static_cast<uint64_t>(rank);
  p.pid = 1000 + rank;
  std::snprintf(p.hostname, sizeof(p.hostname), "node%d", rank);
  p.cpus.set(rank);
  p.cpus.set(rank + 8);
  p.listenAddr = net::SocketAddress::parse(addr).value();
  return p;
}

void uniqueIds() {
  const char* addrs[] = {"127.0.0.1:29500", "[::1]:29500", "10.1.2.3:1"};
  int i = 0;
  for (const char* a : addrs) {
    for (bool hosted : {false, true}) {
      UniqueIdContents c;
      c.magic = kUniqueIdMagic;
      c.nonce = 0x1111 * static_cast<uint64_t>(i + 1);
      c.root = net::SocketAddress::parse(a).value();
      c.hostedByRank0 = hosted;
      ncclUniqueId id;
      encodeUniqueId(c, &id);
      put("unique_id/valid-" + std::to_string(i++), std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    }
  }
}

void bootstrapWire() {
  // 0: hellos to the root: a job of 2, then a duplicate and a mismatch.
  std::vector<uint8_t> hellos{0};
  for (int r : {0, 1, 1}) {
    RootHello h{};
    h.magic = kUniqueIdMagic;
    h.nonce = kJobNonce;
    h.rank = r;
    h.nranks = 2;
    h.timeoutMs = 300000;
    h.info = peer(r, "127.0.0.1:40000");
    append(hellos, h);
  }
  put("bootstrap_wire/root-hellos", hellos);
  // 1: the root's answers: a table of 3 (nranksByte 2), and an error.
  std::vector<uint8_t> table{1, 2};
  append(table, RootReply{0, 0});
  for (int r = 0; r < 3; ++r) append(table, peer(r, r == 1 ? "[::1]:40001" : "127.0.0.1:40002"));
  put("bootstrap_wire/root-table", table);
  std::vector<uint8_t> error{1, 0};
  const char text[] = "nranks mismatch";
  append(error, RootReply{static_cast<int32_t>(Code::kInvalidArgument), static_cast<uint32_t>(sizeof(text) - 1)});
  error.insert(error.end(), text, text + sizeof(text) - 1);
  put("bootstrap_wire/root-error", error);
  // 2: rank -> rank hellos of a job of 4.
  std::vector<uint8_t> peers{2, 3};
  for (int r : {0, 3, 4}) append(peers, PeerHello{kUniqueIdMagic, kJobNonce, r, 0});
  put("bootstrap_wire/peer-hellos", peers);
  // 3: waiting for an allgather chunk of 8 bytes, a user message arrives first.
  std::vector<uint8_t> stream{3};
  struct {
    uint32_t kind, tag, bytes;
    uint64_t unexpected;
  } want{1, 0, 8, 0};
  append(stream, want);
  append(stream, MessageHeader{0, 7, 4});
  stream.insert(stream.end(), {1, 2, 3, 4});
  append(stream, MessageHeader{1, 0, 8});
  put("bootstrap_wire/message-stream", stream);
}

// fuzz_graph_xml's machines, in its order: the graphs Plait searches for
// each, within one host and across hosts, as NCCL_GRAPH_FILE would hold them.
void graphs(const std::string& dataDir) {
  const char* files[] = {"dgx_a100.xml", "hgx_h100.xml", "dgx1_v100.xml", "pcie_4gpu_2socket.xml", "cpu_2socket.xml"};
  const int n = static_cast<int>(sizeof(files) / sizeof(files[0]));
  for (int i = 0; i < n; ++i) {
    auto sys = topo::buildSystem(topo::readXmlFile(dataDir + "/" + files[i]).value()).value();
    const topo::PathTable paths(sys, topo::PathOptions{});
    for (bool multiNode : {false, true}) {
      topo::SearchOptions options;
      options.useNet = multiNode;
      auto ring = topo::searchRingGraph(sys, paths, options);
      if (!ring.isOk() || ring->channels.empty()) continue;
      const std::string text = topo::writeXml(topo::graphsToXml(sys, {ring.value(), topo::treeGraphFromRing(ring.value())}));
      std::vector<uint8_t> bytes{static_cast<uint8_t>(i + (multiNode ? n : 0))};
      bytes.insert(bytes.end(), text.begin(), text.end());
      put(std::string("graph_xml/") + (multiNode ? "multinode-" : "") + files[i], bytes);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s tests/fuzz/corpus tests/topology/data\n", argv[0]);
    return 2;
  }
  root = argv[1];
  uniqueIds();
  bootstrapWire();
  graphs(argv[2]);
  return 0;
}
