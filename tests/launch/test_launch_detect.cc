// Launch detection from each launcher's variables, Slurm hostlists, and the
// comm-id address and file rendezvous logic behind launchUniqueId.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "plait/launch.hpp"

using plait::LaunchInfo;
namespace detail = plait::launch_detail;

namespace {

// Every variable detection or launchUniqueId reads.
const char* const kLaunchVariables[] = {
    "PLAIT_RANK", "PLAIT_NRANKS", "PLAIT_LOCAL_RANK", "PLAIT_LOCAL_NRANKS", "NCCL_COMM_ID", "PLAIT_COMM_ID",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID"};

// Clears every launch variable, sets `vars`, and restores the old values on
// destruction.
class ScopedLaunchEnv {
 public:
  explicit ScopedLaunchEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const char* name : kLaunchVariables) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  }
  ScopedLaunchEnv(const ScopedLaunchEnv&) = delete;
  ScopedLaunchEnv& operator=(const ScopedLaunchEnv&) = delete;
  ~ScopedLaunchEnv() {
    for (const char* name : kLaunchVariables) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

LaunchInfo detectOk() {
  auto info = plait::detectLaunch();
  INFO(info.status().toString());
  REQUIRE(info.isOk());
  return info.value();
}

std::string detectError() {
  auto info = plait::detectLaunch();
  REQUIRE_FALSE(info.isOk());
  CHECK(info.status().code() == plait::Code::kInvalidArgument);
  return info.status().message();
}

std::string envText(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

ncclUniqueId patternId(char seed) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(seed + i);
  return id;
}

std::string uniqueJobId() { return "test-" + std::to_string(getpid()) + "-" + std::to_string(rand()); }

}  // namespace

TEST_CASE("no launcher: rank 0 of 1", "[launch]") {
  ScopedLaunchEnv env({});
  LaunchInfo info = detectOk();
  CHECK(info.launcher == "none");
  CHECK(info.rank == 0);
  CHECK(info.nranks == 1);
  CHECK(info.localRank == 0);
  CHECK(info.localNranks == 1);
}

TEST_CASE("plait-run variables", "[launch]") {
  ScopedLaunchEnv env({{"PLAIT_RANK", "3"}, {"PLAIT_NRANKS", "4"}, {"PLAIT_LOCAL_RANK", "1"},
                       {"PLAIT_LOCAL_NRANKS", "2"}});
  LaunchInfo info = detectOk();
  CHECK(info.launcher == "plait-run");
  CHECK(info.rank == 3);
  CHECK(info.nranks == 4);
  CHECK(info.localRank == 1);
  CHECK(info.localNranks == 2);
}

TEST_CASE("Open MPI variables", "[launch]") {
  ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  LaunchInfo info = detectOk();
  CHECK(info.launcher == "mpirun");
  CHECK(info.rank == 5);
  CHECK(info.nranks == 8);
  CHECK(info.localRank == 1);
  CHECK(info.localNranks == 4);
}

TEST_CASE("torchrun variables", "[launch]") {
  ScopedLaunchEnv env({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}});
  LaunchInfo info = detectOk();
  CHECK(info.launcher == "torchrun");
  CHECK(info.rank == 2);
  CHECK(info.nranks == 3);
  CHECK(info.localRank == 0);
  CHECK(info.localNranks == 1);
}

TEST_CASE("Slurm variables", "[launch]") {
  SECTION("step tasks per node at this node's index") {
    ScopedLaunchEnv env({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "16"}, {"SLURM_STEP_NUM_TASKS", "5"},
                         {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}});
    LaunchInfo info = detectOk();
    CHECK(info.launcher == "slurm");
    CHECK(info.rank == 4);
    CHECK(info.nranks == 5);  // the step, not the allocation
    CHECK(info.localRank == 0);
    CHECK(info.localNranks == 1);
  }
  SECTION("SLURM_NTASKS and SLURM_NTASKS_PER_NODE") {
    ScopedLaunchEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                         {"SLURM_NTASKS_PER_NODE", "2"}});
    LaunchInfo info = detectOk();
    CHECK(info.nranks == 4);
    CHECK(info.localNranks == 2);
  }
}

TEST_CASE("launchers are tried in order", "[launch]") {
  ScopedLaunchEnv env({{"PLAIT_RANK", "1"}, {"PLAIT_NRANKS", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SLURM_PROCID", "0"},
                       {"SLURM_NTASKS", "1"}});
  CHECK(detectOk().launcher == "plait-run");
  unsetenv("PLAIT_RANK");
  CHECK(detectOk().launcher == "mpirun");
  unsetenv("OMPI_COMM_WORLD_RANK");
  CHECK(detectOk().launcher == "torchrun");
  unsetenv("RANK");
  CHECK(detectOk().launcher == "slurm");
}

TEST_CASE("local variables default to the global ones", "[launch]") {
  ScopedLaunchEnv env({{"PLAIT_RANK", "1"}, {"PLAIT_NRANKS", "2"}});
  LaunchInfo info = detectOk();
  CHECK(info.localRank == 1);
  CHECK(info.localNranks == 2);
}

TEST_CASE("errors name the variable", "[launch]") {
  SECTION("missing size") {
    ScopedLaunchEnv env({{"PLAIT_RANK", "0"}});
    CHECK_THAT(detectError(), Catch::Contains("PLAIT_NRANKS is not set"));
  }
  SECTION("malformed rank") {
    ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "x1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
    CHECK_THAT(detectError(), Catch::Contains("OMPI_COMM_WORLD_RANK='x1'"));
  }
  SECTION("negative size") {
    ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "-2"}});
    CHECK_THAT(detectError(), Catch::Contains("WORLD_SIZE='-2'"));
  }
  SECTION("rank beyond size") {
    ScopedLaunchEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    CHECK_THAT(detectError(), Catch::Contains("RANK=4") && Catch::Contains("WORLD_SIZE=4"));
  }
  SECTION("local rank beyond local size") {
    ScopedLaunchEnv env({{"PLAIT_RANK", "0"}, {"PLAIT_NRANKS", "4"}, {"PLAIT_LOCAL_RANK", "2"},
                         {"PLAIT_LOCAL_NRANKS", "2"}});
    CHECK_THAT(detectError(), Catch::Contains("PLAIT_LOCAL_RANK=2"));
  }
  SECTION("malformed Slurm tasks per node") {
    ScopedLaunchEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(y2)"}});
    CHECK_THAT(detectError(), Catch::Contains("SLURM_TASKS_PER_NODE"));
  }
}

TEST_CASE("Slurm hostlists expand", "[launch][hostlist]") {
  using V = std::vector<std::string>;
  auto expand = [](const char* list) {
    auto hosts = detail::expandHostlist(list);
    INFO(list << ": " << hosts.status().toString());
    REQUIRE(hosts.isOk());
    return hosts.value();
  };
  CHECK(expand("node[01-04,07],gpu3") == V{"node01", "node02", "node03", "node04", "node07", "gpu3"});
  CHECK(expand("a,b") == V{"a", "b"});
  CHECK(expand("single") == V{"single"});
  CHECK(expand("") == V{});
  CHECK(expand("r[1-2]n[8-10]") == V{"r1n8", "r1n9", "r1n10", "r2n8", "r2n9", "r2n10"});
  CHECK(expand("n[08-10]") == V{"n08", "n09", "n10"});
  CHECK(expand("n[9-11]-ib") == V{"n9-ib", "n10-ib", "n11-ib"});
  CHECK(expand("x[5]") == V{"x5"});
  for (const char* bad : {"node[1-", "node[3-1]", "node1]", "node[a-b]", "node[]", "node[1-2-3]"}) {
    auto hosts = detail::expandHostlist(bad);
    INFO(bad);
    CHECK_FALSE(hosts.isOk());
    CHECK_THAT(hosts.status().message(), Catch::Contains(bad));
  }
  CHECK_FALSE(detail::expandHostlist("n[0-9999999]").isOk());
  // Bounded as a whole (tests/fuzz env: 40 ranges of a million in one
  // bracket allocated 2 GiB): a bracket's ranges together, zero padding and
  // names each at most a DNS name long.
  std::string manyRanges = "n[0-999999";
  for (int i = 0; i < 40; ++i) manyRanges += ",0-999999";
  manyRanges += "]";
  CHECK_THAT(detail::expandHostlist(manyRanges).status().message(), Catch::Contains("more than 1000000 hosts"));
  CHECK(detail::expandHostlist("n[0-499999,500000-999999]").value().size() == 1000000);
  // Built by repeat() rather than std::string(n, c) + "...": GCC 12 warns
  // falsely (-Warray-bounds) about the concatenation's inlined memcpy.
  const auto repeat = [](size_t n, char c, std::string_view before, std::string_view after) {
    std::string text(before);
    text.append(n, c);
    text.append(after);
    return text;
  };
  CHECK_FALSE(detail::expandHostlist(repeat(300, '0', "n[", "-9]")).isOk());
  CHECK_THAT(detail::expandHostlist(repeat(300, 'h', "", "[1-2]")).status().message(), Catch::Contains("longer than"));
  CHECK(detail::expandHostlist(repeat(250, 'h', "", "[1-2]")).isOk());
  // Several brackets: their product is counted before a name is built
  // (tests/fuzz env found "[40-4107]...[70-4107]" taking seconds).
  CHECK_THAT(detail::expandHostlist("n[0-4107]x[0-4107]").status().message(), Catch::Contains("more than 1000000 hosts"));
  CHECK_THAT(detail::expandHostlist("a,n[0-999]x[0-999]").status().message(), Catch::Contains("more than 1000000 hosts"));
  CHECK(detail::expandHostlist("n[0-999]x[0-999]").value().size() == 1000000);
  CHECK(detail::expandHostlist("n[0-999]x[0-999]").value().back() == "n999x999");
  CHECK_THAT(detail::expandHostlist(repeat(200, 'h', "", "[1-2]") + repeat(60, 'h', "", "")).status().message(),
             Catch::Contains("longer than"));
  // And their text: a million names of 16 characters fit, of 40 do not.
  CHECK(detail::expandHostlist(repeat(10, 'h', "", "[0-999][0-999]")).isOk());
  CHECK_THAT(detail::expandHostlist(repeat(34, 'h', "", "[0-999][0-999]")).status().message(),
             Catch::Contains("MiB of host names"));
}

TEST_CASE("Slurm tasks per node", "[launch]") {
  CHECK(detail::tasksOnNode("4", 0).value() == 4);
  CHECK(detail::tasksOnNode("2(x3),1", 0).value() == 2);
  CHECK(detail::tasksOnNode("2(x3),1", 2).value() == 2);
  CHECK(detail::tasksOnNode("2(x3),1", 3).value() == 1);
  CHECK_FALSE(detail::tasksOnNode("2(x3),1", 4).isOk());
  CHECK_FALSE(detail::tasksOnNode("2(3)", 0).isOk());
  CHECK_FALSE(detail::tasksOnNode("", 0).isOk());
  // Repeats up to 2^63-1 (signed overflow before; UB under UBSan).
  CHECK(detail::tasksOnNode("1(x1),3(x9223372036854775807)", 5).value() == 3);
  CHECK(detail::tasksOnNode("1(x9223372036854775807),2(x9223372036854775807)", 2147483647).value() == 1);
  CHECK_FALSE(detail::tasksOnNode("1(x2147483647),2(x9223372036854775807)", -1).isOk());
}

TEST_CASE("comm id addresses", "[launch]") {
  CHECK(detail::formatCommId("10.0.0.1", 29501) == "10.0.0.1:29501");
  CHECK(detail::formatCommId("node01", 1234) == "node01:1234");
  CHECK(detail::formatCommId("fe80::1", 80) == "[fe80::1]:80");
  CHECK(detail::formatCommId("[::1]", 80) == "[::1]:80");
  for (uint64_t job : {0ull, 1ull, 123456ull, 99999999ull}) {
    int port = detail::slurmCommPort(job, 0);
    CHECK(port >= 20000);
    CHECK(port < 30000);
    CHECK(port == detail::slurmCommPort(job, 0));
  }
  CHECK(detail::slurmCommPort(100, 0) != detail::slurmCommPort(101, 0));
  CHECK(detail::slurmCommPort(100, 0) != detail::slurmCommPort(100, 1));
  std::string path = detail::idFilePath("prterun-host-1@1/x");
  CHECK(path == "/tmp/plait-prterun-host-1_1_x-" + std::to_string(getuid()) + ".id");
}

TEST_CASE("torchrun and Slurm export the agreed NCCL_COMM_ID", "[launch]") {
  SECTION("torchrun: MASTER_PORT + 1") {
    ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    // The address is exported whether or not ncclGetUniqueId succeeds.
    if (!id.isOk()) CHECK(id.status().code() == plait::Code::kInvalidUsage);
    CHECK(envText("NCCL_COMM_ID") == "10.1.2.3:29501");
  }
  SECTION("torchrun: a set NCCL_COMM_ID wins") {
    ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"},
                         {"NCCL_COMM_ID", "10.9.9.9:7"}});
    (void)plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    CHECK(envText("NCCL_COMM_ID") == "10.9.9.9:7");
  }
  SECTION("torchrun: missing MASTER_ADDR") {
    ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    REQUIRE_FALSE(id.isOk());
    CHECK_THAT(id.status().message(), Catch::Contains("MASTER_ADDR"));
  }
  SECTION("torchrun: malformed MASTER_PORT") {
    ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    REQUIRE_FALSE(id.isOk());
    CHECK_THAT(id.status().message(), Catch::Contains("MASTER_PORT='http'"));
  }
  SECTION("Slurm: first host of the step") {
    ScopedLaunchEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "gpu[07-08],cpu1"},
                         {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    if (!id.isOk()) CHECK(id.status().code() == plait::Code::kInvalidUsage);
    CHECK(envText("NCCL_COMM_ID") == "gpu07:" + std::to_string(detail::slurmCommPort(4242, 3)));
  }
  SECTION("Slurm: missing SLURM_JOB_ID") {
    ScopedLaunchEnv env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "a"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    REQUIRE_FALSE(id.isOk());
    CHECK_THAT(id.status().message(), Catch::Contains("SLURM_JOB_ID"));
  }
  SECTION("plait-run without NCCL_COMM_ID") {
    ScopedLaunchEnv env({{"PLAIT_RANK", "1"}, {"PLAIT_NRANKS", "2"}});
    auto id = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(1000));
    REQUIRE_FALSE(id.isOk());
    CHECK_THAT(id.status().message(), Catch::Contains("NCCL_COMM_ID"));
  }
}

TEST_CASE("id file rendezvous", "[launch][rendezvous]") {
  std::string path = detail::idFilePath(uniqueJobId());
  ncclUniqueId sent = patternId(7);
  SECTION("publish then read") {
    REQUIRE(detail::publishIdFile(path, sent).isOk());
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    auto got = detail::awaitIdFile(path, 0, plait::Deadline::afterMs(1000));
    REQUIRE(got.isOk());
    CHECK(std::memcmp(&got.value(), &sent, sizeof(sent)) == 0);
  }
  SECTION("a reader waits for a later writer") {
    bool published = false;  // Catch2 assertions stay on the test's thread
    std::thread writer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      published = detail::publishIdFile(path, sent).isOk();
    });
    auto got = detail::awaitIdFile(path, 0, plait::Deadline::afterMs(5000));
    writer.join();
    CHECK(published);
    REQUIRE(got.isOk());
    CHECK(std::memcmp(&got.value(), &sent, sizeof(sent)) == 0);
  }
  SECTION("a stale file is ignored until the deadline") {
    REQUIRE(detail::publishIdFile(path, sent).isOk());
    int64_t future = static_cast<int64_t>(time(nullptr) + 3600) * 1000000000LL;
    auto start = std::chrono::steady_clock::now();
    auto got = detail::awaitIdFile(path, future, plait::Deadline::afterMs(100));
    REQUIRE_FALSE(got.isOk());
    CHECK(got.status().code() == plait::Code::kRemoteError);
    CHECK_THAT(got.status().message(), Catch::Contains(path));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  }
  SECTION("nobody publishes") {
    auto got = detail::awaitIdFile(path, 0, plait::Deadline::afterMs(50));
    REQUIRE_FALSE(got.isOk());
    CHECK_THAT(got.status().message(), Catch::Contains("NCCL_COMM_ID"));
  }
  unlink(path.c_str());
}

TEST_CASE("mpirun without NCCL_COMM_ID: non-root ranks read rank 0's file", "[launch][rendezvous]") {
  std::string job = uniqueJobId();
  ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_NAMESPACE", job}});
  std::string path = detail::idFilePath(job);
  ncclUniqueId sent = patternId(42);
  REQUIRE(detail::publishIdFile(path, sent).isOk());
  auto got = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(2000));
  INFO(got.status().toString());
  REQUIRE(got.isOk());
  CHECK(std::memcmp(&got.value(), &sent, sizeof(sent)) == 0);
  unlink(path.c_str());

  unsetenv("PMIX_NAMESPACE");
  auto noJob = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(100));
  REQUIRE_FALSE(noJob.isOk());
  CHECK_THAT(noJob.status().message(), Catch::Contains("OMPI_MCA_ess_base_jobid"));
}

// plait_core reaches the API layer's ncclGetUniqueId through a weak
// reference; this unit test links no API layer, so it provides the id.
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  *uniqueId = patternId(7);
  return ncclSuccess;
}

TEST_CASE("mpirun without NCCL_COMM_ID: a child forked by rank 0 keeps its id file", "[launch][rendezvous]") {
  std::string job = uniqueJobId();
  ScopedLaunchEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_NAMESPACE", job}});
  std::string path = detail::idFilePath(job);
  auto published = plait::launchUniqueId(detectOk(), plait::Deadline::afterMs(2000));
  INFO(published.status().toString());
  REQUIRE(published.isOk());
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  pid_t child = fork();  // a data loader, say, that ends with exit(): atexit handlers run in it
  if (child == 0) exit(0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(stat(path.c_str(), &st) == 0);  // ranks still joining need it
  unlink(path.c_str());
}
