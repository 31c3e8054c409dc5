#include "core/group.h"

#include <thread>

#include "base/no_throw.h"
#include "core/device_backend.h"

namespace plait::group {
namespace {

struct ThreadGroup {
  std::vector<PendingOp> ops;
  std::vector<std::pair<const void*, std::function<Status()>>> setups;  // (communicator, call)
  Status firstError;
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

Status end(const std::function<Status(ncclComm_t, std::vector<Task>&)>& run) {
  if (tlsDepth == 0) return invalidUsage("ncclGroupEnd called without a matching ncclGroupStart");
  if (--tlsDepth > 0) return Status::ok();
  std::vector<PendingOp> ops = std::move(tls.ops);
  tls.ops.clear();
  auto setups = std::move(tls.setups);
  tls.setups.clear();
  Status first = std::move(tls.firstError);
  tls.firstError = Status();
  if (!setups.empty()) {
    Status s = runSetups(setups);
    if (first.isOk()) first = s;
  }
  if (!first.isOk()) return first;  // NCCL launches nothing from a group with a bad call

  // Per communicator, in order of first appearance.
  std::vector<ncclComm_t> comms;
  std::vector<std::vector<Task>> tasks;
  for (auto& op : ops) {
    size_t i = 0;
    while (i < comms.size() && comms[i] != op.comm) ++i;
    if (i == comms.size()) {
      comms.push_back(op.comm);
      tasks.emplace_back();
    }
    tasks[i].push_back(op.task);
  }
  if (comms.empty()) return Status::ok();
  DeviceGroupScope* deviceGroup = DeviceGroupScope::current();  // the workers' launches join back at its end
  const std::vector<Status> results = runConcurrently(comms.size(), [&](size_t i) {
    DeviceGroupScope::Adopt adopt(deviceGroup);
    return run(comms[i], tasks[i]);
  });
  for (auto& r : results)
    if (!r.isOk()) return r;
  return Status::ok();
}

}  // namespace plait::group
