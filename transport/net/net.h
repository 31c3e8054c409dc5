// net.h — the network device interface: NCCL's net-plugin API, version 8
// (ncclNet_v8_t, NCCL 2.19 and later still load it), declared here under
// Plait names with the same C layout, so a libnccl-net.so built for NCCL can
// be loaded through it (NCCL_NET_PLUGIN, symbol "ncclNetPlugin_v8") and
// Plait's own transports (socket built in; UCX and InfiniBand verbs as
// modules, libplait-net-ucx.so / libplait-net-ib.so) are plugins too.
//
// The contract every implementation follows (as NCCL's):
// - Nothing blocks. listen() returns at once with a handle (at most
//   kNetHandleBytes) that travels out of band to the connecting side;
//   connect() and accept() return ncclSuccess with a null comm while the
//   connection is still being made, and are called again until non-null.
// - isend()/irecv() may return a null request when the transport cannot take
//   another operation now (call again later). test() reports completion and
//   the received size; a completed request is freed by the plugin.
// - Messages on one send/recv comm pair arrive in posting order; irecv's size
//   is the capacity, the message may be smaller (never larger: an error).
// - Every function returns 0 (ncclSuccess) or an ncclResult_t error code;
//   the text of an error goes to the logger given to init().
// - One thread at a time per comm; init() once per process.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// The NCCL plugin ABI, version 8 (field for field).
enum { kNetHandleBytes = 128 };             // NCCL_NET_HANDLE_MAXSIZE
enum { kNetPtrHost = 1, kNetPtrCuda = 2, kNetPtrDmaBuf = 4 };  // NCCL_PTR_*
enum PlaitNetDeviceType { kNetDeviceHost = 0, kNetDeviceUnpack = 1 };

// ncclDebugLogger_t: level is NCCL's (0 NONE, 1 VERSION, 2 WARN, 3 INFO, 4
// ABORT, 5 TRACE); flags a subsystem mask.
typedef void (*PlaitNetLogger)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

struct PlaitNetProperties {  // ncclNetProperties_v8_t
  char* name;          // for messages ("eth0", "mlx5_0")
  char* pciPath;       // sysfs path of the PCI device, or null
  uint64_t guid;       // distinguishes devices
  int ptrSupport;      // kNetPtr* bits
  int regIsGlobal;     // registrations are not tied to one comm
  int speed;           // Mbit/s
  int port;            // device port
  float latency;       // microseconds
  int maxComms;        // comms one device can have
  int maxRecvs;        // receives one irecv may group (Plait uses 1)
  int netDeviceType;   // PlaitNetDeviceType
  int netDeviceVersion;
};

struct PlaitNetDeviceHandle {  // ncclNetDeviceHandle_v8_t (device offload; Plait never asks for one)
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};

struct PlaitNetV8 {  // ncclNet_v8_t
  const char* name;
  int (*init)(PlaitNetLogger logger);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PlaitNetProperties* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(int dev, void* handle, void** sendComm, PlaitNetDeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, PlaitNetDeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
};

}  // extern "C"

// The symbol a plugin module exports (NCCL's name, so NCCL plugins load).
#define PLAIT_NET_PLUGIN_SYMBOL "ncclNetPlugin_v8"

// ncclResult_t values the plugins return (nccl.h is not included here so
// modules build without it).
namespace plait::netresult {
constexpr int kSuccess = 0, kSystemError = 2, kInternalError = 3, kInvalidArgument = 4, kInvalidUsage = 5,
              kRemoteError = 6;
}  // namespace plait::netresult
