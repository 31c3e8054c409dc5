/* plait/rma.h — what Plait adds to NCCL 2.32's one-sided operations
 * (ncclPutSignal, ncclSignal, ncclWaitSignal in nccl.h), usable from C.
 *
 * plaitGet: reads count elements at peerWinOffset of peer's part of window
 * peerWin (this rank's handle of a window every rank registered) into
 * localbuff; the peer takes no part and no signal is raised. Stream NULL
 * blocks until the bytes are in localbuff; a Plait host stream queues it;
 * inside a group it runs at the group's end. A read the peer cannot serve
 * (no such window there, or the range outside its part) fails naming why.
 * Bytes a peer's puts write meanwhile may or may not be seen: order a read
 * after a write with a signal.
 *
 * plaitTestSignal: ncclWaitSignal that never blocks. *done = 1 when every
 * descriptor's opCnt signals arrived (they are then consumed, as a wait
 * consumes them); *done = 0 and nothing consumed otherwise. Fails
 * (ncclRemoteError) when one can never arrive, as the wait would.
 *
 * plaitWaitAnySignal: blocks until one descriptor's opCnt signals arrived
 * (beyond what earlier waits consumed), consumes those and stores its index
 * in *which; the first satisfied in array order wins. For a server that
 * serves whichever client signals next. Same checks, deadline and abort as
 * ncclWaitSignal; it fails only when no descriptor can be met any more
 * (every named peer's connection failed short of it). Blocking (host). */
#ifndef PLAIT_RMA_H_
#define PLAIT_RMA_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t plaitWaitAnySignal(int nDesc, const ncclWaitSignalDesc_t* signalDescs, int* which, ncclComm_t comm);
ncclResult_t plaitTestSignal(int nDesc, const ncclWaitSignalDesc_t* signalDescs, int* done, ncclComm_t comm);
ncclResult_t plaitGet(void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
                      size_t peerWinOffset, ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* PLAIT_RMA_H_ */
