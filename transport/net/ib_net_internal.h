// ib_net_internal.h — what ib_net.cc (devices, connection setup) and
// ib_data.cc (registration, the data path) share inside the verbs module.
// UNVERIFIED ON HARDWARE (see ib_net.cc).
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/net/ib_logic.h"
#include "transport/net/net.h"

namespace plait::ib::mod {

namespace netr = plait::netresult;

extern PlaitNetLogger gLog;
#define IB_LOG(level, ...) \
  do {                     \
    if (plait::ib::mod::gLog) plait::ib::mod::gLog(level, 0x10, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define IB_WARN(...) IB_LOG(2, __VA_ARGS__)
#define IB_INFO(...) IB_LOG(3, __VA_ARGS__)

union Address {
  sockaddr sa;
  sockaddr_in v4;
  sockaddr_in6 v6;
};
std::string textOf(const Address& a);

struct Device {
  std::string name;  // "mlx5_0:1"
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  int port = 1;
  bool roce = false;
  int gidIndex = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
  int mtu = IBV_MTU_1024;
  int speedMbps = 0;
  std::mutex mu;  // guards cache
  std::unique_ptr<RegCache> cache;
  bool dmabuf = false;  // the kernel and HCA register dmabufs (GPUDirect RDMA)
};

extern std::vector<std::unique_ptr<Device>> gDevices;
extern IbOptions gOpt;

// One direction of a connection: QPs, their CQ, the FIFO. One thread at a
// time (net.h), so no lock.
struct Comm {
  Device* dev = nullptr;
  bool sending = false;
  Address peer{};
  int fd = -1;  // the setup socket
  ibv_cq* cq = nullptr;
  int nQps = 1;
  ibv_qp* qps[kMaxQps] = {};
  uint32_t psn[kMaxQps] = {};
  FifoSlot* fifo = nullptr;  // sender: written by the receiver; receiver: staging for those writes
  ibv_mr* fifoMr = nullptr;
  uint64_t remoteFifo = 0;   // receiver: the sender's FIFO
  uint32_t remoteRkey = 0;
  uint64_t seq = 0;          // messages (sender) / receives (receiver) posted
  uint64_t completed = 0;    // receiver: receives completed (bounds the FIFO)
  std::string failure;       // set once a completion failed
};

struct Request {
  Comm* comm;
  int events;    // completions still to come (one per QP)
  int size = 0;  // the message's size (receiver: from the immediate data)
  bool recv;
};

void destroyComm(Comm* c);

// ibv_reg_dmabuf_mr when this libibverbs has it (rdma-core 34 and later), else null.
using RegDmaBufMr = ibv_mr* (*)(ibv_pd*, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
RegDmaBufMr regDmaBufMr();

}  // namespace plait::ib::mod
