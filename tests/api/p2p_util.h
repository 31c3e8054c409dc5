// p2p_util.h — posting a list of sends and receives as one group.
#pragma once

#include <string>
#include <vector>

#include "coll_util.h"

namespace plait_test {

struct P2pOp {
  bool send;
  int peer;
  void* buf;
  size_t count;
};

inline CaseInfo p2pCase(const char* what, ncclDataType_t t, size_t count, int nranks, int rank) {
  CaseInfo c;
  c.coll = what;
  c.type = t;
  c.count = count;
  c.nranks = nranks;
  c.rank = rank;
  return c;
}

// Posts ops in order; no group is opened here (the caller's decides).
inline std::string postOps(ncclComm_t comm, ncclDataType_t t, const std::vector<P2pOp>& ops) {
  for (const P2pOp& op : ops) {
    const ncclResult_t r = op.send ? ncclSend(op.buf, op.count, t, op.peer, comm, nullptr)
                                   : ncclRecv(op.buf, op.count, t, op.peer, comm, nullptr);
    if (r != ncclSuccess)
      return std::string(op.send ? "ncclSend to " : "ncclRecv from ") + std::to_string(op.peer) +
             " failed: " + ncclGetLastError(comm);
  }
  return "";
}

// Posts ops in order inside one ncclGroupStart/End.
inline std::string postGroup(ncclComm_t comm, ncclDataType_t t, const std::vector<P2pOp>& ops) {
  if (ncclGroupStart() != ncclSuccess) return std::string("ncclGroupStart failed: ") + ncclGetLastError(comm);
  std::string err = postOps(comm, t, ops);
  const ncclResult_t end = ncclGroupEnd();  // always close the group, even after a failed post
  if (!err.empty()) return err;
  if (end != ncclSuccess) return std::string("ncclGroupEnd failed: ") + ncclGetLastError(comm);
  return "";
}

}  // namespace plait_test
