/* plait/live_ranks.h — what a communicator in Plait's live-ranks mode
 * (PLAIT_LIVE_RANKS=1 on every rank) tells its user, usable from C.
 *
 * In that mode a collective that loses a rank (its process died, its
 * connection closed, or it stopped answering until the deadline) goes on over
 * the survivors and returns ncclSuccess; later collectives run over them
 * directly. Ranks keep their numbers. What each collective leaves over the
 * survivors, and the limits, are in the README ("When things go wrong").
 *
 * plaitCommLiveRanks: the live mask's version (*epoch, 0 until a rank is
 * lost; every survivor sees the same one) and, in live[0..nranks-1], 1 for
 * each rank still live. live may be NULL. Fails (ncclInvalidUsage) on a
 * communicator not in the mode.
 *
 * plaitCommLastCall: the report of this rank's last operation on comm:
 * the epoch it completed in, how many ranks' inputs its result holds, and
 * whether it lost a rank and ran again over the survivors. */
#ifndef PLAIT_LIVE_RANKS_H_
#define PLAIT_LIVE_RANKS_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  unsigned long long epoch;
  int contributors;
  int rerun;
} plaitLiveCallReport_t;

ncclResult_t plaitCommLiveRanks(ncclComm_t comm, unsigned long long* epoch, int* live);
ncclResult_t plaitCommLastCall(ncclComm_t comm, plaitLiveCallReport_t* report);

#ifdef __cplusplus
}
#endif

#endif /* PLAIT_LIVE_RANKS_H_ */
