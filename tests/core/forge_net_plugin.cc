// A net plugin for test_forged_size_word: the built-in socket transport,
// except that every 8-byte send holding the size word of a 24-byte last step
// gets the single-copy flag (bit 62) set — what a hostile peer that alters
// only its own outgoing bytes can do. Only the forging rank loads it
// (NCCL_NET_PLUGIN=<path>); the wire format is the socket transport's.
#include <cstdint>

#include "transport/fifo.h"
#include "transport/net/net_plugin.h"

namespace {

int forgingIsend(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size == static_cast<int>(sizeof(uint64_t))) {
    auto* word = static_cast<uint64_t*>(data);
    if (*word == (24 | plait::kStepLast)) *word |= plait::kStepRendezvous;
  }
  return plait::socketNet()->isend(comm, data, size, tag, mhandle, request);
}

PlaitNetV8 forgingTable() {
  PlaitNetV8 t = *plait::socketNet();
  t.isend = forgingIsend;
  return t;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) PlaitNetV8 ncclNetPlugin_v8 = forgingTable();
}
