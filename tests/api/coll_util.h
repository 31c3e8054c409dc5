// coll_util.h — helpers shared by the collective and point-to-point tests:
// bit patterns for data-movement checks, guarded buffers, the sweep lists,
// and harnesses for ranks that drive more than one communicator.
//
// Like values.h, nothing here uses the library's own code: expected buffers
// are built from patterns that depend only on (seed, element index).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "nccl.h"
#include "values.h"

namespace plait_test {

inline constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                               ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                               ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
inline constexpr ncclRedOp_t kAllOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
inline const std::vector<size_t> kSweepCounts = {0, 1, 7, 1023, 4099, 70001};
inline constexpr int kSweepRanks[] = {1, 2, 3, 4, 5, 8};

inline const char* typeLabel(ncclDataType_t t) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",  "uint64",
                                      "float16", "float32", "float64", "bfloat16", "f8e4m3", "f8e5m2"};
  return t >= 0 && t < 12 ? names[t] : "?";
}

inline const char* opLabel(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < 5 ? names[op] : "user-op";
}

// Roots to try for nranks ranks: first, middle and last (distinct).
inline std::vector<int> rootsFor(int nranks) {
  std::vector<int> roots = {0};
  if (nranks > 2) roots.push_back(nranks / 2);
  if (nranks > 1) roots.push_back(nranks - 1);
  return roots;
}

// A host buffer of `elems` elements followed by guard bytes; everything
// starts as the sentinel byte. Checks that nothing was written past the end
// or, where nothing may be written at all, that the bytes are unchanged.
// While a RegisteredBuffers scope is open on a thread, the Guarded buffers
// that thread makes are ncclMemAlloc'd and registered with its communicator
// (ncclCommRegister), so the same checks run on the direct path.
inline thread_local ncclComm_t tlsRegisterWith = nullptr;
class RegisteredBuffers {
 public:
  explicit RegisteredBuffers(ncclComm_t comm) : previous_(tlsRegisterWith) { tlsRegisterWith = comm; }
  ~RegisteredBuffers() { tlsRegisterWith = previous_; }
  RegisteredBuffers(const RegisteredBuffers&) = delete;
  RegisteredBuffers& operator=(const RegisteredBuffers&) = delete;

 private:
  ncclComm_t previous_;
};

class Guarded {
 public:
  static constexpr unsigned char kSentinel = 0x5a;
  static constexpr unsigned char kGuard = 0x77;
  static constexpr size_t kGuardBytes = 64;

  Guarded() = default;
  // The data starts `shift` bytes past a 64-byte boundary (0: aligned like
  // a device allocation; a multiple of the element size otherwise).
  Guarded(size_t elems, ncclDataType_t t, size_t shift = 0) : bytes_(elems * sizeOf(t)) {
    const size_t total = bytes_ + kGuardBytes + 64 + shift;
    char* base = nullptr;
    if (tlsRegisterWith != nullptr) {
      void* p = nullptr;
      void* handle = nullptr;
      if (ncclMemAlloc(&p, total) == ncclSuccess) {
        if (ncclCommRegister(tlsRegisterWith, p, total, &handle) == ncclSuccess) {
          registered_ = std::shared_ptr<char>(static_cast<char*>(p), [comm = tlsRegisterWith, handle](char* q) {
            ncclCommDeregister(comm, handle);
            ncclMemFree(q);
          });
          base = registered_.get();
        } else {
          ncclMemFree(p);
        }
      }
    }
    if (base == nullptr) {  // plain memory (or registration failed: the direct-path counts will say so)
      mem_.assign(total, 0);
      base = mem_.data();
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(base);
    offset_ = (64 - a % 64) % 64 + shift;
    std::memset(data(), kSentinel, bytes_);
    std::memset(data() + bytes_, kGuard, kGuardBytes);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  Guarded(Guarded&&) = default;
  Guarded& operator=(Guarded&&) = default;
  char* data() { return base() + offset_; }
  const char* data() const { return base() + offset_; }
  size_t bytes() const { return bytes_; }
  bool guardIntact() const { return firstByteNot(data() + bytes_, kGuardBytes, kGuard) < 0; }
  // First byte in [from, to) that is not the sentinel, or -1.
  long long sentinelBroken(size_t from, size_t to) const {
    const long long b = to > from ? firstByteNot(data() + from, to - from, kSentinel) : -1;
    return b < 0 ? -1 : static_cast<long long>(from) + b;
  }

 private:
  char* base() const { return registered_ ? registered_.get() : const_cast<char*>(mem_.data()); }
  size_t bytes_ = 0;
  std::vector<char> mem_;
  std::shared_ptr<char> registered_;  // ncclMemAlloc'd and registered (RegisteredBuffers)
  size_t offset_ = 0;
};

// Describes one operation for failure messages.
struct CaseInfo {
  const char* coll = "";
  ncclDataType_t type = ncclInt8;
  int op = -1;  // -1: no reduction
  size_t count = 0;
  bool inPlace = false;
  int root = -1;
  int nranks = 0;
  int rank = 0;
  bool misaligned = false;  // buffers off 64-byte alignment, send and recv by different amounts

  size_t sendShift() const { return misaligned ? sizeOf(type) : 0; }
  size_t recvShift() const { return misaligned ? 3 * sizeOf(type) : 0; }

  std::string str() const {
    std::ostringstream os;
    os << coll << " nranks " << nranks << " rank " << rank << " type " << typeLabel(type);
    if (op >= 0) os << " op " << opLabel(static_cast<ncclRedOp_t>(op));
    os << " count " << count << (inPlace ? " in-place" : " out-of-place") << (misaligned ? " misaligned" : "");
    if (root >= 0) os << " root " << root;
    return os.str();
  }
};

// Collects the first wrong thing found about one operation's buffers.
class Checker {
 public:
  explicit Checker(const CaseInfo& c) : case_(c) {}
  const std::string& error() const { return error_; }

  // Elements [first, first+count) of buf must equal pattern `seed`.
  void pattern(const char* what, const void* buf, size_t first, size_t count, uint64_t seed) {
    if (!error_.empty()) return;
    const long long bad = patternMismatch(buf, first, count, case_.type, seed);
    if (bad < 0) return;
    uint64_t got = 0;
    std::memcpy(&got, static_cast<const char*>(buf) + (first + bad) * sizeOf(case_.type), sizeOf(case_.type));
    std::ostringstream os;
    os << case_.str() << ": " << what << " element " << first + bad << " is 0x" << std::hex << got << ", expected 0x"
       << patternBits(case_.type, seed, static_cast<size_t>(bad));
    error_ = os.str();
  }
  // Bytes [from, to) of buf must still hold the sentinel.
  void untouched(const char* what, const Guarded& buf, size_t from, size_t to) {
    if (!error_.empty()) return;
    const long long bad = buf.sentinelBroken(from, to);
    if (bad >= 0) error_ = case_.str() + ": " + what + " byte " + std::to_string(bad) + " was written";
  }
  void guard(const char* what, const Guarded& buf) {
    if (error_.empty() && !buf.guardIntact()) error_ = case_.str() + ": wrote past the end of " + what;
  }
  // Elements [first, first+count) of buf must hold the case's rank's inputs
  // for op, indices index0... of the reduced vector (values.h).
  void inputs(const char* what, const void* buf, size_t first, size_t count, ncclRedOp_t op, size_t index0) {
    if (!error_.empty()) return;
    const Mismatch m = firstInputMismatch(buf, first, count, case_.type, op, case_.rank, index0);
    if (m.index >= 0) value(what, first + static_cast<size_t>(m.index), m.got, m.want, 0);
  }
  // Elements [0, count) of buf must hold the reduction by op over the case's
  // ranks of indices index0... (values.h), within its tolerance.
  void reduced(const char* what, const void* buf, size_t count, ncclRedOp_t op, size_t index0) {
    if (!error_.empty()) return;
    const Mismatch m = firstReducedMismatch(buf, 0, count, case_.type, op, case_.nranks, index0);
    if (m.index >= 0)
      value(what, static_cast<size_t>(m.index), m.got, m.want, tolerance(case_.type, op, case_.nranks, m.want));
  }
  // A value check: got must be within tol of want.
  void value(const char* what, size_t index, double got, double want, double tol) {
    if (!error_.empty() || std::fabs(got - want) <= tol) return;
    std::ostringstream os;
    os << case_.str() << ": " << what << " element " << index << " is " << got << ", expected " << want;
    error_ = os.str();
  }

 private:
  const CaseInfo& case_;
  std::string error_;
};

inline std::string callFailed(const CaseInfo& c, const char* fn, ncclComm_t comm) {
  return c.str() + ": " + fn + " failed: " + ncclGetLastError(comm);
}

// One operation's outcome: a wrong result (the sweep goes on, so every rank
// keeps issuing the same calls) or a failed call (the sweep stops: the
// other ranks' calls fail too, or time out).
struct Outcome {
  std::string error;
  bool fatal = false;
};

inline Outcome failedCall(const CaseInfo& c, const char* fn, ncclComm_t comm) {
  return {callFailed(c, fn, comm), true};
}

// The first failure of a sequence of operations on one rank. add() answers
// whether the rank should go on: after a wrong result it must (its peers
// expect the next calls), after a failed call it stops.
struct FirstError {
  std::string first;
  bool stopped = false;
  bool add(const Outcome& o) {
    if (first.empty()) first = o.error;
    stopped = stopped || o.fatal;
    return !stopped;
  }
};

// What a sweep covers. variant 0 is out of place, 1 in place; a collective
// may define more (ncclBcast is variant 2 of Broadcast).
struct SweepSpec {
  const char* coll = "";
  bool rooted = false;
  bool reduction = false;
  std::vector<int> variants = {0, 1};
  std::vector<ncclDataType_t> types = sweepTypes();
  std::vector<ncclRedOp_t> ops{std::begin(kAllOps), std::end(kAllOps)};
  std::vector<size_t> counts = kSweepCounts;
  bool misaligned = false;
};

using CheckFn = std::function<Outcome(ncclComm_t, const CaseInfo&, int variant)>;

// Runs check for every type x op x count x variant x root of spec on this
// rank; returns the first error ("" if none).
inline std::string sweep(int rank, int nranks, ncclComm_t comm, const SweepSpec& spec, const CheckFn& check) {
  std::string first;
  const std::vector<ncclRedOp_t> noOp = {ncclSum};
  const std::vector<int> noRoot = {-1};
  const std::vector<int> roots = spec.rooted ? rootsFor(nranks) : noRoot;
  for (ncclDataType_t t : spec.types)
    for (ncclRedOp_t op : spec.reduction ? spec.ops : noOp)
      for (size_t count : spec.counts)
        for (int variant : spec.variants)
          for (int root : roots) {
            CaseInfo c;
            c.coll = spec.coll;
            c.type = t;
            c.op = spec.reduction ? op : -1;
            c.count = count;
            c.inPlace = variant != 0;
            c.root = root;
            c.nranks = nranks;
            c.rank = rank;
            c.misaligned = spec.misaligned;
            Outcome o = check(comm, c, variant);
            if (first.empty()) first = o.error;
            if (o.fatal) return first;
          }
  return first;
}

// Runs nranks threads, each owning rank r of `ncomms` communicators (each
// created from its own unique id) and running body(rank, comms).
inline std::vector<std::string> runThreadsMulti(
    int nranks, int ncomms, const std::function<std::string(int, const std::vector<ncclComm_t>&)>& body) {
  std::vector<ncclUniqueId> ids(ncomms);
  for (auto& id : ids)
    if (ncclGetUniqueId(&id) != ncclSuccess) return {std::string("ncclGetUniqueId: ") + ncclGetLastError(nullptr)};
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<ncclComm_t> comms;
      for (int c = 0; c < ncomms && errors[r].empty(); ++c) {
        ncclComm_t comm = nullptr;
        if (ncclCommInitRank(&comm, nranks, ids[c], r) != ncclSuccess)
          errors[r] = "init of comm " + std::to_string(c) + ": " + ncclGetLastError(nullptr);
        else
          comms.push_back(comm);
      }
      if (errors[r].empty()) errors[r] = body(r, comms);
      for (ncclComm_t comm : comms) ncclCommDestroy(comm);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (int r = 0; r < nranks; ++r)
    if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
  return failed;
}

// runProcesses with a body that returns a failure message: each rank prints
// its message to stderr and exits 1. Returns the failing ranks' exit codes
// as messages (the details are on stderr).
inline std::vector<std::string> runProcessesChecked(int nranks,
                                                    const std::function<std::string(int, ncclComm_t)>& body) {
  auto codes = runProcesses(nranks, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
      return 2;
    }
    std::string err = body(rank, comm);
    ncclCommDestroy(comm);
    if (err.empty()) return 0;
    std::fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
    return 1;
  });
  std::vector<std::string> failed;
  for (size_t r = 0; r < codes.size(); ++r)
    if (codes[r] != 0)
      failed.push_back("rank " + std::to_string(r) + " exited with " + std::to_string(codes[r]) +
                       " (message on stderr)");
  return failed;
}

}  // namespace plait_test
