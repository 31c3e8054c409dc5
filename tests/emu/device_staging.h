// device_staging.h — runs the host collective test matrix (tests/api) again
// on CUDA device buffers, unchanged: this header is force-included
// (-include) into those test sources, and renames their calls of the five
// ring collectives, of group start/end and of ncclCommInitRank to the
// wrappers below.
//
// Send, Recv, AlltoAll, Gather and Scatter are wrapped the same way.
// Each wrapped collective copies the host buffers it is given into
// cudaMalloc'd device memory (same alignment modulo 64, plus 64 guard bytes
// of a known pattern), calls the real entry point on the device buffers on a
// CUDA stream (the thread's own stream or, every other call, CUDA's default
// stream NULL), waits for the stream, checks the device guard bytes and
// copies the output back. The tests' own checks — an independent reference,
// untouched bytes, host guard bytes — then judge the device path exactly as
// they judge the host path. Inside a group the copy-back waits for the
// outermost ncclGroupEnd. Calls given a Plait host stream, and every other
// API, pass through untouched.
//
// ncclCommInitRank first makes device `rank % device count` current, as a
// multi-GPU program does (each rank needs its own device).
#pragma once

#include <cuda_runtime_api.h>

#include "nccl.h"

namespace plait_device_staging {

ncclResult_t allReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t op,
                    int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t broadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t bcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t allGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t send(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                  cudaStream_t stream);
ncclResult_t recv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t alltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t gather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                    ncclComm_t comm, cudaStream_t stream);
ncclResult_t scatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                     ncclComm_t comm, cudaStream_t stream);
ncclResult_t groupStart();
ncclResult_t groupEnd();
ncclResult_t groupSimulateEnd(ncclSimInfo_t* info);
ncclResult_t commInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
// Staged operations whose device kernels ran (the test asserts the device
// path was taken, not just the host one).
unsigned long long stagedOperations();

}  // namespace plait_device_staging

// Tests that know the communicator's device differs here (the emulated
// runtime is loaded) test this.
#define PLAIT_DEVICE_STAGING 1

#define ncclAllReduce plait_device_staging::allReduce
#define ncclReduce plait_device_staging::reduce
#define ncclBroadcast plait_device_staging::broadcast
#define ncclBcast plait_device_staging::bcast
#define ncclReduceScatter plait_device_staging::reduceScatter
#define ncclAllGather plait_device_staging::allGather
#define ncclSend plait_device_staging::send
#define ncclRecv plait_device_staging::recv
#define ncclAlltoAll plait_device_staging::alltoAll
#define ncclGather plait_device_staging::gather
#define ncclScatter plait_device_staging::scatter
#define ncclGroupStart plait_device_staging::groupStart
#define ncclGroupEnd plait_device_staging::groupEnd
#define ncclGroupSimulateEnd plait_device_staging::groupSimulateEnd
#define ncclCommInitRank plait_device_staging::commInitRank
