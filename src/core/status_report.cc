#include "core/status_report.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "base/config.h"
#include "base/log.h"
#include "core/comm.h"

namespace plait {

PLAIT_PARAM_INT(kStatusSignal, "STATUS_SIGNAL", 0,
                "signal number that makes the process log where each communicator is, at WARN "
                "(10: SIGUSR1 on Linux; 0: none, the signal keeps its own meaning)");

namespace {

std::mutex& registryMu() {
  static auto* mu = new std::mutex();  // never destroyed: the reporter thread may outlive statics
  return *mu;
}
std::set<const Communicator*>& registry() {
  static auto* comms = new std::set<const Communicator*>();
  return *comms;
}

int wakePipe[2] = {-1, -1};

void onSignal(int) {
  const int saved = errno;
  const char byte = 1;
  ssize_t w = write(wakePipe[1], &byte, 1);  // async-signal-safe; a full pipe already has a report pending
  (void)w;
  errno = saved;
}

void reporter() {
  for (;;) {
    char byte;
    const ssize_t got = read(wakePipe[0], &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    const std::string report = statusReportNow();
    PLAIT_WARN(kInit, "status (PLAIT_STATUS_SIGNAL):\n%s", report.c_str());
  }
}

// Installs the handler and starts the reporter, once per process.
void startOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int sig = static_cast<int>(kStatusSignal.get());
    if (sig <= 0) return;
    if (sig >= NSIG || sig == SIGKILL || sig == SIGSTOP) {
      PLAIT_WARN(kInit, "PLAIT_STATUS_SIGNAL=%d is not a signal a handler can take: no status reports", sig);
      return;
    }
    if (pipe2(wakePipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      PLAIT_WARN(kInit, "PLAIT_STATUS_SIGNAL: pipe failed (%s): no status reports", std::strerror(errno));
      return;
    }
    const int flags = fcntl(wakePipe[0], F_GETFL);
    fcntl(wakePipe[0], F_SETFL, flags & ~O_NONBLOCK);  // the reporter blocks; the handler never does
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = onSignal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, nullptr) != 0) {
      PLAIT_WARN(kInit, "PLAIT_STATUS_SIGNAL=%d: sigaction failed (%s)", sig, std::strerror(errno));
      return;
    }
    std::thread(reporter).detach();
    PLAIT_INFO(kInit, "signal %d logs where each communicator is (PLAIT_STATUS_SIGNAL)", sig);
  });
}

}  // namespace

void registerForStatusReports(const Communicator* comm) {
  if (kStatusSignal.get() <= 0) return;
  startOnce();
  std::lock_guard<std::mutex> lock(registryMu());
  registry().insert(comm);
}

void unregisterFromStatusReports(const Communicator* comm) {
  std::lock_guard<std::mutex> lock(registryMu());
  registry().erase(comm);
}

std::string statusReportNow() {
  std::lock_guard<std::mutex> lock(registryMu());  // held: no communicator goes while it is read
  std::string out;
  for (const Communicator* comm : registry()) out += (out.empty() ? "" : "\n") + comm->statusLine();
  return out.empty() ? "no live communicator" : out;
}

}  // namespace plait
