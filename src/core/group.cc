#include "core/group.h"

#include <thread>

#include "base/no_throw.h"
#include "core/device_backend.h"

namespace plait::group {
namespace {

// What End sorts a group into: per communicator, its operations, its job
// and its result. Kept from one group to the next, so that End allocates and
// frees nothing: a worker reads its communicator's operations, and memory it
// read that the calling thread frees (the allocator writes into it) or fills
// again costs the caller a cache line's move back each time.
struct GroupParts {
  std::vector<ncclComm_t> comms;
  std::vector<std::vector<Task>> tasks;  // inner vectors keep their capacity
  std::vector<WorkerJob> jobs;
  std::vector<Status> results;
  bool inUse = false;  // a group ended from inside a part (nested) uses parts of its own
};

struct ThreadGroup {
  std::vector<PendingOp> ops;
  std::vector<PendingOp> spareOps;  // the last group's, emptied: ops' next storage
  std::vector<std::pair<const void*, std::function<Status()>>> setups;  // (communicator, call)
  Status firstError;
  GroupParts parts;
};

// The default TLS model (see base/log.cc): initial-exec saved a
// __tls_get_addr call per operation but made the library fail to load with
// dlopen() in processes such as Python with torch ("cannot allocate memory in
// static TLS block"). TLS descriptors (-mtls-dialect=gnu2) were tried: glibc
// before 2.40 (BZ #31372) clobbers vector registers in the descriptors'
// dynamic path, which a library loaded by dlopen takes, and clang 14 has no
// such flag.
thread_local ThreadGroup tls;
// The nesting depth apart from the rest: a constant-initialised int needs no
// thread-local constructor guard, and every operation asks for it
// (ncclGroupStart/End nesting; 0: no group open).
constinit thread_local int tlsDepth = 0;

}  // namespace

bool active() { return tlsDepth > 0; }
int depth() { return tlsDepth; }
void start() { ++tlsDepth; }
const std::vector<PendingOp>& pending() { return tls.ops; }

void enqueue(ncclComm_t comm, const Task& task) { tls.ops.push_back(PendingOp{comm, task}); }

void deferSetup(const void* comm, std::function<Status()> setup) {
  tls.setups.emplace_back(comm, std::move(setup));
}

namespace {
// One thread per communicator; a communicator's calls in call order, each
// after the previous one succeeded.
Status runSetups(std::vector<std::pair<const void*, std::function<Status()>>>& setups) {
  std::vector<const void*> comms;
  std::vector<std::vector<std::function<Status()>*>> calls;
  for (auto& [comm, fn] : setups) {
    size_t i = 0;
    while (i < comms.size() && comms[i] != comm) ++i;
    if (i == comms.size()) {
      comms.push_back(comm);
      calls.emplace_back();
    }
    calls[i].push_back(&fn);
  }
  const std::vector<Status> results = runConcurrently(comms.size(), [&](size_t i) {
    for (std::function<Status()>* fn : calls[i])
      if (Status s = (*fn)(); !s.isOk()) return s;
    return Status::ok();
  });
  for (auto& r : results)
    if (!r.isOk()) return r;
  return Status::ok();
}
}  // namespace

void recordError(const Status& status) {
  if (tls.firstError.isOk()) tls.firstError = status;
}

namespace {
// One communicator's part of a group, on whichever thread runs it: the data
// are the communicator, its operations, the caller's `run` and its device
// group scope.
Status runPart(const WorkerJob& job, size_t) {
  DeviceGroupScope::Adopt adopt(static_cast<DeviceGroupScope*>(job.data[3]));
  auto* tasks = static_cast<std::vector<Task>*>(job.data[1]);
  const auto run = reinterpret_cast<GroupRun>(job.data[2]);
  return noThrow([&] { return run(static_cast<ncclComm_t>(job.data[0]), *tasks); });
}

// Sorts `ops` by communicator, in order of first appearance, and runs each
// communicator's part at once (core/group.h).
Status runParts(GroupRun run, const std::vector<PendingOp>& ops, GroupParts& parts) {
  size_t n = 0;
  for (const PendingOp& op : ops) {
    size_t i = 0;
    while (i < n && parts.comms[i] != op.comm) ++i;
    if (i == n) {
      // tasks first: a bad_alloc between the two leaves comms the shorter,
      // which the next group's pushes mend.
      if (n == parts.tasks.size()) parts.tasks.emplace_back();
      if (n == parts.comms.size()) parts.comms.push_back(op.comm);
      parts.comms[n] = op.comm;
      parts.tasks[n].clear();
      ++n;
    }
    parts.tasks[i].push_back(op.task);
  }
  if (n == 0) return Status::ok();
  DeviceGroupScope* deviceGroup = DeviceGroupScope::current();  // the workers' launches join back at its end
  parts.jobs.resize(n);
  parts.results.assign(n, Status::ok());
  for (size_t i = 0; i < n; ++i)
    parts.jobs[i] = WorkerJob{&runPart, {parts.comms[i], &parts.tasks[i], reinterpret_cast<void*>(run), deviceGroup}};
  runOnWorkers(n, parts.jobs.data(), parts.results.data());
  for (size_t i = 0; i < n; ++i)
    if (!parts.results[i].isOk()) return parts.results[i];
  return Status::ok();
}

}  // namespace

Status end(GroupRun run) {
  if (tlsDepth == 0) return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart");
  if (--tlsDepth > 0) return Status::ok();
  std::vector<PendingOp> ops = std::move(tls.ops);
  tls.ops = std::move(tls.spareOps);  // empty, with the storage of the group before
  tls.ops.clear();
  auto setups = std::move(tls.setups);
  tls.setups.clear();
  Status first = std::move(tls.firstError);
  tls.firstError = Status();
  if (!setups.empty()) {
    Status s = runSetups(setups);
    if (first.isOk()) first = s;
  }
  Status result = first;  // NCCL launches nothing from a group with a bad call
  if (first.isOk()) {
    if (tls.parts.inUse) {
      GroupParts own;
      result = runParts(run, ops, own);
    } else {
      struct InUse {
        bool& flag;
        ~InUse() { flag = false; }
      } inUse{tls.parts.inUse = true};
      result = runParts(run, ops, tls.parts);
    }
  }
  ops.clear();
  if (tls.spareOps.capacity() < ops.capacity()) tls.spareOps = std::move(ops);
  return result;
}

}  // namespace plait::group
