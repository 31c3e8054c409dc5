// plait-run end to end, with launch_helper as the ranks: environment, exit
// codes and messages, prompt cleanup, --timeout, --tag-output, signal
// forwarding, PDEATHSIG and --bind-to.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core_binding.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every test launch is killed after this long, so a broken launcher fails
// the test instead of hanging it.
constexpr milliseconds kLaunchLimit{20000};

struct Launch {
  pid_t pid = -1;
  int outFd = -1;
  int errFd = -1;
  Clock::time_point start;
};

struct Finished {
  int exitCode = -1;  // 128 + signal if the launcher itself died by a signal
  std::string out;
  std::string err;
  milliseconds elapsed{0};
};

Launch startLauncher(const std::vector<std::string>& args) {
  int out[2], err[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(pipe2(err, O_CLOEXEC) == 0);
  std::vector<std::string> argvText{PLAIT_RUN_PATH};
  argvText.insert(argvText.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argvText) argv.push_back(a.data());
  argv.push_back(nullptr);
  Launch launch;
  launch.start = Clock::now();
  launch.pid = fork();
  REQUIRE(launch.pid >= 0);
  if (launch.pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(126);
  }
  close(out[1]);
  close(err[1]);
  launch.outFd = out[0];
  launch.errFd = err[0];
  return launch;
}

// Reads the launcher's output until it exits (killing it at kLaunchLimit).
Finished finish(Launch& launch) {
  Finished result;
  std::vector<pollfd> fds{{launch.outFd, POLLIN, 0}, {launch.errFd, POLLIN, 0}};
  std::string* sinks[] = {&result.out, &result.err};
  auto deadline = launch.start + kLaunchLimit;
  int open = 2;
  while (open > 0 && Clock::now() < deadline) {
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  if (open > 0) kill(launch.pid, SIGKILL);
  waitpid(launch.pid, &status, 0);
  for (const pollfd& p : fds)
    if (p.fd >= 0) close(p.fd);
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - launch.start);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Finished runLauncher(const std::vector<std::string>& args) {
  Launch launch = startLauncher(args);
  return finish(launch);
}

// launch_helper's arguments after plait-run's own.
std::vector<std::string> withHelper(std::vector<std::string> launcherArgs, const std::vector<std::string>& modes) {
  launcherArgs.push_back(PLAIT_LAUNCH_HELPER_PATH);
  launcherArgs.insert(launcherArgs.end(), modes.begin(), modes.end());
  return launcherArgs;
}

bool processGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

// Waits for launch_helper's pidfile mode to report `n` ranks; returns their pids.
std::vector<pid_t> waitForPidFiles(const std::filesystem::path& dir, int n) {
  std::vector<pid_t> pids;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    pids.clear();
    for (int r = 0; r < n; ++r) {
      std::ifstream in(dir / (std::to_string(r) + ".pid"));
      pid_t pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    if (static_cast<int>(pids.size()) == n) return pids;
    std::this_thread::sleep_for(milliseconds(10));
  }
  FAIL("ranks did not write their pid files");
  return pids;
}

bool allGoneWithin(const std::vector<pid_t>& pids, milliseconds limit) {
  auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    bool gone = true;
    for (pid_t pid : pids) gone = gone && processGone(pid);
    if (gone) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

std::filesystem::path makeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "plait-run-test-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

}  // namespace

TEST_CASE("every rank gets its launch variables", "[plait-run]") {
  Finished run = runLauncher(withHelper({"-n", "4", "--tag-output"}, {"env"}));
  INFO(run.err);
  REQUIRE(run.exitCode == 0);
  std::set<std::string> commIds;
  for (int r = 0; r < 4; ++r) {
    std::string tag = "[" + std::to_string(r) + "] ";
    CHECK_THAT(run.out, Catch::Contains(tag + "PLAIT_RANK=" + std::to_string(r) + "\n"));
    CHECK_THAT(run.out, Catch::Contains(tag + "PLAIT_NRANKS=4\n"));
    CHECK_THAT(run.out, Catch::Contains(tag + "PLAIT_LOCAL_RANK=" + std::to_string(r) + "\n"));
    CHECK_THAT(run.out, Catch::Contains(tag + "PLAIT_LOCAL_NRANKS=4\n"));
  }
  std::smatch match;
  std::regex commId(R"(NCCL_COMM_ID=(127\.0\.0\.1:[0-9]+)\n)");
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), commId); it != std::sregex_iterator(); ++it)
    commIds.insert((*it)[1]);
  CHECK(commIds.size() == 1);  // one address, the same for every rank
}

TEST_CASE("options stop at the program name", "[plait-run]") {
  Finished run = runLauncher({"-n", "1", "--", "sh", "-c", "echo \"[$0] [$1]\"", "-n", "--timeout"});
  CHECK(run.exitCode == 0);
  CHECK(run.out == "[-n] [--timeout]\n");
  Finished noProgram = runLauncher({"-n", "2"});
  CHECK(noProgram.exitCode != 0);
  CHECK_THAT(noProgram.err, Catch::Contains("no program"));
  CHECK(runLauncher({"sh", "-c", "true"}).exitCode != 0);  // -n is required
}

TEST_CASE("a failing rank is reported and the others are stopped", "[plait-run]") {
  SECTION("exit status") {
    Finished run = runLauncher(withHelper({"-n", "4"}, {"sleep", "sleep", "exit:3", "sleep"}));
    INFO(run.err);
    CHECK(run.exitCode == 3);
    CHECK_THAT(run.err, Catch::Matches("(.|\n)*plait-run: rank 2 \\(pid [0-9]+\\) exited with status 3\n(.|\n)*"));
    CHECK(run.elapsed < milliseconds(3000));
  }
  SECTION("signal") {
    Finished run = runLauncher(withHelper({"-n", "3"}, {"sleep", "segv", "sleep"}));
    INFO(run.err);
    CHECK(run.exitCode == 128 + SIGSEGV);
    CHECK_THAT(run.err, Catch::Contains("rank 1 (pid ") && Catch::Contains("killed by signal 11"));
    CHECK(run.elapsed < milliseconds(3000));
  }
  SECTION("ranks that ignore SIGTERM get SIGKILL after the grace period") {
    Finished run = runLauncher(withHelper({"-n", "3"}, {"stubborn", "lateexit:5", "stubborn"}));
    INFO(run.err);
    CHECK(run.exitCode == 5);
    CHECK_THAT(run.err, Catch::Contains("SIGKILL"));
    CHECK(run.elapsed >= milliseconds(2400));  // 500 ms before the failure, then the 2 s grace period
    CHECK(run.elapsed < milliseconds(5500));
  }
  SECTION("a program that cannot be executed") {
    Finished run = runLauncher({"-n", "2", "/nonexistent/program"});
    CHECK(run.exitCode == 127);
    CHECK_THAT(run.err, Catch::Contains("cannot execute '/nonexistent/program'"));
  }
  SECTION("all ranks succeed") {
    CHECK(runLauncher(withHelper({"-n", "3"}, {"exit:0"})).exitCode == 0);
  }
}

TEST_CASE("--timeout kills every rank", "[plait-run]") {
  Finished run = runLauncher(withHelper({"-n", "3", "--timeout", "0.5"}, {"sleep"}));
  INFO(run.err);
  CHECK(run.exitCode == 124);
  CHECK_THAT(run.err, Catch::Contains("timed out after 0.5 s"));
  CHECK(run.elapsed >= milliseconds(450));
  CHECK(run.elapsed < milliseconds(3000));
}

TEST_CASE("--tag-output keeps lines whole", "[plait-run]") {
  constexpr int kRanks = 4, kLines = 300;
  Finished run = runLauncher(withHelper({"-n", std::to_string(kRanks), "--tag-output"}, {"lines:300"}));
  INFO(run.err);
  REQUIRE(run.exitCode == 0);
  std::regex line(R"(\[([0-9]+)\] rank ([0-9]+) line ([0-9]+) ([a-z])+)");
  std::map<int, int> nextLine;
  std::istringstream in(run.out);
  std::string text;
  int total = 0;
  while (std::getline(in, text)) {
    std::smatch m;
    INFO(text.substr(0, 80));
    REQUIRE(std::regex_match(text, m, line));
    int tag = std::stoi(m[1]), rank = std::stoi(m[2]), index = std::stoi(m[3]);
    CHECK(tag == rank);
    CHECK(index == nextLine[rank]++);  // in order, none lost
    ++total;
  }
  CHECK(total == kRanks * kLines);
}

TEST_CASE("signals to the launcher reach the ranks", "[plait-run]") {
  std::filesystem::path dir = makeTempDir();
  Launch launch = startLauncher(withHelper({"-n", "3"}, {"pidfile:" + dir.string()}));
  std::vector<pid_t> ranks = waitForPidFiles(dir, 3);
  kill(launch.pid, SIGTERM);
  Finished run = finish(launch);
  INFO(run.err);
  CHECK(run.exitCode == 128 + SIGTERM);
  CHECK_THAT(run.err, Catch::Contains("forwarding signal 15"));
  CHECK(allGoneWithin(ranks, milliseconds(1000)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("ranks die with a killed launcher (PDEATHSIG)", "[plait-run]") {
  std::filesystem::path dir = makeTempDir();
  Launch launch = startLauncher(withHelper({"-n", "3"}, {"pidfile:" + dir.string()}));
  std::vector<pid_t> ranks = waitForPidFiles(dir, 3);
  kill(launch.pid, SIGKILL);
  Finished run = finish(launch);
  CHECK(run.exitCode == 128 + SIGKILL);
  CHECK(allGoneWithin(ranks, milliseconds(1000)));
  for (pid_t pid : ranks)
    if (!processGone(pid)) kill(pid, SIGKILL);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--hosts accepts only this host for now", "[plait-run]") {
  CHECK(runLauncher({"-n", "2", "--hosts", "localhost,127.0.0.1:2", "true"}).exitCode == 0);
  Finished remote = runLauncher({"-n", "2", "--hosts", "localhost,node7", "true"});
  CHECK(remote.exitCode != 0);
  CHECK_THAT(remote.err, Catch::Contains("'node7'") && Catch::Contains("not supported yet"));
}

namespace {

// Each rank's "Cpus_allowed_list" from /proc/self/status, by rank.
std::map<int, std::string> allowedCpus(const std::vector<std::string>& launcherArgs) {
  std::vector<std::string> args = launcherArgs;
  args.insert(args.end(), {"--tag-output", "--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"});
  Finished run = runLauncher(args);
  INFO(run.err);
  REQUIRE(run.exitCode == 0);
  std::map<int, std::string> cpus;
  std::regex line(R"(\[([0-9]+)\] Cpus_allowed_list:\s*(\S+)\n)");
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), line); it != std::sregex_iterator(); ++it)
    cpus[std::stoi((*it)[1])] = (*it)[2];
  return cpus;
}

std::string ownAllowedCpus() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "";
}

}  // namespace

TEST_CASE("--bind-to core gives each rank a CPU of its own while there are enough", "[plait-run]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int ncpus = CPU_COUNT(&set);
  const int n = std::min(ncpus, 4);
  auto bound = allowedCpus({"-n", std::to_string(n)});  // the default
  REQUIRE(bound.size() == size_t(n));
  std::set<std::string> distinct;
  for (auto& [rank, cpus] : bound) {
    INFO("rank " << rank << ": " << cpus);
    CHECK(cpus.find_first_not_of("0123456789") == std::string::npos);  // one CPU
    REQUIRE_FALSE(cpus.empty());
    CHECK(CPU_ISSET(std::stoi(cpus), &set));
    distinct.insert(cpus);
  }
  CHECK(distinct.size() == size_t(n));
  // More ranks than CPUs, or --bind-to none: the launcher's own set.
  const std::string all = ownAllowedCpus();
  for (auto& [rank, cpus] : allowedCpus({"-n", std::to_string(ncpus + 1)})) CHECK(cpus == all);
  for (auto& [rank, cpus] : allowedCpus({"-n", "2", "--bind-to", "none"})) CHECK(cpus == all);
  Finished report = runLauncher({"-n", std::to_string(ncpus + 1), "--report-bindings", "true"});
  CHECK_THAT(report.err, Catch::Contains("not bound: " + std::to_string(ncpus + 1) + " ranks on " +
                                         std::to_string(ncpus) + " CPUs"));
  CHECK(runLauncher({"-n", "1", "--bind-to", "socket", "true"}).exitCode != 0);
}

TEST_CASE("binding order: one thread of every core first, package by package", "[plait-run]") {
  using plait::run::CpuInfo;
  // Two packages of two cores with two threads each, numbered as Linux
  // often does: the second threads after all the first ones.
  std::vector<CpuInfo> cpus{{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}, {4, 0, 0}, {5, 0, 1}, {6, 1, 0}, {7, 1, 1}};
  CHECK(plait::run::bindingOrder(cpus) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  // Siblings numbered next to each other: 0/1 share a core, 2/3 too.
  cpus = {{0, 0, 0}, {1, 0, 0}, {2, 0, 1}, {3, 0, 1}};
  CHECK(plait::run::bindingOrder(cpus) == std::vector<int>{0, 2, 1, 3});
  // A restricted affinity: only what is allowed, in the same order.
  cpus = {{3, 0, 1}, {1, 0, 0}};
  CHECK(plait::run::bindingOrder(cpus) == std::vector<int>{1, 3});
}
