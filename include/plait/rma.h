/* plait/rma.h — what Plait adds to NCCL 2.32's one-sided operations
 * (ncclPutSignal, ncclSignal, ncclWaitSignal in nccl.h), usable from C.
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

#ifdef __cplusplus
}
#endif

#endif /* PLAIT_RMA_H_ */
