// rank_launcher.cc — see rank_launcher.h.
#include "rank_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "line_tagger.h"

extern char** environ;

namespace plait::run {
namespace {

using Clock = std::chrono::steady_clock;

// Output still arriving after the last rank exited (from its children) is
// read for at most this long.
constexpr std::chrono::milliseconds kDrainTime{1000};
constexpr int kExitExecFailed = 127;  // like the shell's "command not found"

// The variables plait-run sets; inherited values are dropped.
constexpr const char* kRankVariables[] = {"PLAIT_RANK", "PLAIT_NRANKS", "PLAIT_LOCAL_RANK",
                                          "PLAIT_LOCAL_NRANKS", "NCCL_COMM_ID"};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int outFd = -1;  // read ends of the output pipes (--tag-output only)
  int errFd = -1;
  std::unique_ptr<LineTagger> out;
  std::unique_ptr<LineTagger> err;
};

std::vector<std::string> rankEnvironment(const LaunchOptions& options, int rank) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::string_view name = text.substr(0, text.find('='));
    bool overridden = std::any_of(std::begin(kRankVariables), std::end(kRankVariables),
                                  [&](const char* var) { return name == var; });
    if (!overridden) env.emplace_back(text);
  }
  env.push_back("PLAIT_RANK=" + std::to_string(rank));
  env.push_back("PLAIT_NRANKS=" + std::to_string(options.nranks));
  env.push_back("PLAIT_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("PLAIT_LOCAL_NRANKS=" + std::to_string(options.nranks));
  env.push_back("NCCL_COMM_ID=" + options.commId);
  if (std::getenv("PLAIT_COMM_SECRET") == nullptr && !options.commSecret.empty())
    env.push_back("PLAIT_COMM_SECRET=" + options.commSecret);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

const char* signalName(int sig) {
  const char* name = strsignal(sig);
  return name != nullptr ? name : "unknown signal";
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {}
  ~Supervisor();
  int run();

 private:
  bool setUpSignals();
  bool spawn(RankProcess& rank);
  [[noreturn]] void execRank(RankProcess& rank, const int outPipe[2], const int errPipe[2], pid_t launcher);
  void handleSignals();
  void reapChildren();
  void onRankExit(RankProcess& rank, int status);
  void onTerminationSignal(int sig);
  void terminateAll(const char* reason);
  void signalAll(int sig);
  int pollTimeoutMs() const;
  void checkDeadlines();
  void pumpOutput(const std::vector<pollfd>& fds);
  size_t openPipes() const;
  void closePipe(int* fd);

  const LaunchOptions& options_;
  std::vector<RankProcess> ranks_;
  int signalFd_ = -1;
  sigset_t savedMask_{};
  int running_ = 0;
  int exitCode_ = 0;  // of the first failure; 0 while there is none
  int forwarded_ = 0;  // the last signal forwarded from the user, 0 if none
  bool terminating_ = false;
  bool killed_ = false;
  std::optional<Clock::time_point> timeoutAt_, killAt_, drainAt_;
};

Supervisor::~Supervisor() {
  for (RankProcess& rank : ranks_) {
    closePipe(&rank.outFd);
    closePipe(&rank.errFd);
  }
  if (signalFd_ >= 0) ::close(signalFd_);
  sigprocmask(SIG_SETMASK, &savedMask_, nullptr);
}

bool Supervisor::setUpSignals() {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  if (sigprocmask(SIG_BLOCK, &mask, &savedMask_) != 0) return false;
  signalFd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  // A reader of our (tagged) output that goes away must not kill the launcher
  // and, through PDEATHSIG, the ranks.
  signal(SIGPIPE, SIG_IGN);
  return signalFd_ >= 0;
}

// In the child, between fork and exec: only plain system calls from here on.
void Supervisor::execRank(RankProcess& rank, const int outPipe[2], const int errPipe[2], pid_t launcher) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before prctl: then nobody would kill us.
  if (getppid() != launcher) _exit(kExitExecFailed);
  sigprocmask(SIG_SETMASK, &savedMask_, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (static_cast<size_t>(rank.rank) < options_.rankCpus.size()) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(options_.rankCpus[static_cast<size_t>(rank.rank)], &cpus);
    if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0)
      dprintf(STDERR_FILENO, "plait-run: rank %d: binding to CPU %d: %s (running unbound)\n", rank.rank,
              options_.rankCpus[static_cast<size_t>(rank.rank)], strerror(errno));
  }
  if (options_.tagOutput) {
    dup2(outPipe[1], STDOUT_FILENO);
    dup2(errPipe[1], STDERR_FILENO);
  }
  if (rank.rank != 0 || isatty(STDIN_FILENO)) {
    int devNull = ::open("/dev/null", O_RDONLY);
    if (devNull >= 0) dup2(devNull, STDIN_FILENO);
  }
  std::vector<std::string> env = rankEnvironment(options_, rank.rank);
  std::vector<std::string> args = options_.command;
  std::vector<char*> envp = pointers(env), argv = pointers(args);
  execvpe(argv[0], argv.data(), envp.data());
  dprintf(STDERR_FILENO, "plait-run: rank %d: cannot execute '%s': %s\n", rank.rank, argv[0], strerror(errno));
  _exit(kExitExecFailed);
}

bool Supervisor::spawn(RankProcess& rank) {
  int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
  if (options_.tagOutput && (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)) {
    std::fprintf(stderr, "plait-run: pipe: %s\n", strerror(errno));
    return false;
  }
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) execRank(rank, outPipe, errPipe, launcher);
  int forkErrno = errno;
  for (int fd : {outPipe[1], errPipe[1]})
    if (fd >= 0) ::close(fd);
  rank.outFd = outPipe[0];
  rank.errFd = errPipe[0];
  if (pid < 0) {
    std::fprintf(stderr, "plait-run: fork for rank %d: %s\n", rank.rank, strerror(forkErrno));
    return false;
  }
  setpgid(pid, pid);  // also here, so signalAll reaches the group before the child runs
  rank.pid = pid;
  rank.running = true;
  ++running_;
  if (options_.tagOutput) {
    for (int fd : {rank.outFd, rank.errFd}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    std::string prefix = "[" + std::to_string(rank.rank) + "] ";
    rank.out = std::make_unique<LineTagger>(prefix, STDOUT_FILENO);
    rank.err = std::make_unique<LineTagger>(prefix, STDERR_FILENO);
  }
  return true;
}

void Supervisor::handleSignals() {
  signalfd_siginfo info;
  while (::read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    if (info.ssi_signo == SIGCHLD) {
      reapChildren();
    } else {
      onTerminationSignal(static_cast<int>(info.ssi_signo));
    }
  }
}

void Supervisor::reapChildren() {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (RankProcess& rank : ranks_)
      if (rank.pid == pid && rank.running) onRankExit(rank, status);
  }
}

void Supervisor::onRankExit(RankProcess& rank, int status) {
  rank.running = false;
  --running_;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  // Deaths we caused while terminating are not news.
  bool expected = terminating_ && (sig == SIGTERM || sig == SIGKILL || (sig != 0 && sig == forwarded_));
  if (!expected && sig != 0) {
    std::fprintf(stderr, "plait-run: rank %d (pid %d) killed by signal %d (%s)\n", rank.rank, rank.pid, sig,
                 signalName(sig));
  } else if (!expected) {
    std::fprintf(stderr, "plait-run: rank %d (pid %d) exited with status %d\n", rank.rank, rank.pid, code);
  }
  if (exitCode_ == 0) exitCode_ = code;
  if (!terminating_) terminateAll("a rank failed");
}

void Supervisor::onTerminationSignal(int sig) {
  if (terminating_ || forwarded_ != 0) {
    if (running_ > 0)
      std::fprintf(stderr, "plait-run: signal %d again: killing %d ranks\n", sig, running_);
    signalAll(SIGKILL);
    killed_ = true;
    return;
  }
  forwarded_ = sig;
  std::fprintf(stderr, "plait-run: forwarding signal %d (%s) to %d ranks\n", sig, signalName(sig), running_);
  signalAll(sig);
}

void Supervisor::terminateAll(const char* reason) {
  terminating_ = true;
  if (running_ == 0) return;
  std::fprintf(stderr, "plait-run: %s: terminating %d running rank%s\n", reason, running_, running_ == 1 ? "" : "s");
  signalAll(SIGTERM);
  killAt_ = Clock::now() + options_.grace;
}

void Supervisor::signalAll(int sig) {
  for (RankProcess& rank : ranks_) {
    if (!rank.running) continue;
    if (kill(-rank.pid, sig) != 0) kill(rank.pid, sig);
  }
}

int Supervisor::pollTimeoutMs() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](const std::optional<Clock::time_point>& at) {
    if (at && (!next || *at < *next)) next = at;
  };
  if (!terminating_) consider(timeoutAt_);
  if (!killed_) consider(killAt_);
  consider(drainAt_);
  if (!next) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60000));
}

void Supervisor::checkDeadlines() {
  auto now = Clock::now();
  if (timeoutAt_ && !terminating_ && now >= *timeoutAt_) {
    std::fprintf(stderr, "plait-run: timed out after %.3g s\n", options_.timeout->count() / 1000.0);
    if (exitCode_ == 0) exitCode_ = kExitTimeout;
    terminateAll("timeout");
  }
  if (killAt_ && !killed_ && now >= *killAt_) {
    if (running_ > 0)
      std::fprintf(stderr, "plait-run: %d rank%s still running %lld ms after SIGTERM: sending SIGKILL\n", running_,
                   running_ == 1 ? "" : "s", static_cast<long long>(options_.grace.count()));
    signalAll(SIGKILL);
    killed_ = true;
  }
  if (running_ == 0 && !drainAt_) drainAt_ = now + kDrainTime;
  if (drainAt_ && now >= *drainAt_) {
    for (RankProcess& rank : ranks_) {
      closePipe(&rank.outFd);
      closePipe(&rank.errFd);
    }
  }
}

void Supervisor::closePipe(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

size_t Supervisor::openPipes() const {
  return std::count_if(ranks_.begin(), ranks_.end(), [](const RankProcess& r) { return r.outFd >= 0; }) +
         std::count_if(ranks_.begin(), ranks_.end(), [](const RankProcess& r) { return r.errFd >= 0; });
}

void Supervisor::pumpOutput(const std::vector<pollfd>& fds) {
  for (const pollfd& p : fds) {
    if (p.fd == signalFd_ || p.revents == 0) continue;
    for (RankProcess& rank : ranks_) {
      if (p.fd == rank.outFd && !rank.out->pump(p.fd)) closePipe(&rank.outFd);
      if (p.fd == rank.errFd && !rank.err->pump(p.fd)) closePipe(&rank.errFd);
    }
  }
}

int Supervisor::run() {
  if (!setUpSignals()) {
    std::fprintf(stderr, "plait-run: setting up signal handling: %s\n", strerror(errno));
    return kExitLaunchFailed;
  }
  if (options_.timeout) timeoutAt_ = Clock::now() + *options_.timeout;
  ranks_.resize(static_cast<size_t>(options_.nranks));
  for (int r = 0; r < options_.nranks; ++r) {
    ranks_[r].rank = r;
    if (!spawn(ranks_[r])) {
      exitCode_ = kExitLaunchFailed;
      terminateAll("launch failed");
      break;
    }
  }
  while (running_ > 0 || openPipes() > 0) {
    std::vector<pollfd> fds{{signalFd_, POLLIN, 0}};
    for (const RankProcess& rank : ranks_)
      for (int fd : {rank.outFd, rank.errFd})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    int ready = poll(fds.data(), fds.size(), pollTimeoutMs());
    if (ready < 0 && errno != EINTR) {
      std::fprintf(stderr, "plait-run: poll: %s\n", strerror(errno));
      signalAll(SIGKILL);
      return kExitLaunchFailed;
    }
    if (ready > 0 && fds[0].revents != 0) handleSignals();
    if (ready > 0) pumpOutput(fds);
    checkDeadlines();
  }
  for (RankProcess& rank : ranks_)
    if (rank.out) rank.out->flush(), rank.err->flush();
  return exitCode_;
}

}  // namespace

int runRanks(const LaunchOptions& options) {
  Supervisor supervisor(options);
  return supervisor.run();
}

}  // namespace plait::run
