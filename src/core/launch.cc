// launch.cc — rank, size and rendezvous from plait-run, mpirun, torchrun and
// Slurm (plait/launch.hpp). Everything here reads the environment; the only
// library entry point used is the public ncclGetUniqueId.
#include "plait/launch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "base/config.h"
#include "base/log.h"

// ncclGetUniqueId lives in the API layer, above this one. A weak reference
// keeps plait_core linkable on its own (its tests); in libplait/libnccl the
// strong definition is always present.
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) __attribute__((weak));

namespace plait {
namespace {

constexpr int kSlurmPortBase = 20000;
constexpr int kSlurmPortSpan = 10000;
constexpr size_t kMaxHosts = 1000000;
// A host name's longest (DNS's limit); hostlists expand to at most kMaxHosts of them,
// and to at most kMaxHostlistBytes of names (a real one: 100000 names of 20
// characters, 2 MB; a million names of DNS's longest would be 253 MB).
constexpr size_t kMaxHostNameBytes = 253;
constexpr size_t kMaxHostlistBytes = 16 << 20;
// An id file older than this process by more than this is a leftover.
constexpr int64_t kIdFileStaleSlackNs = 60LL * 1000 * 1000 * 1000;
constexpr auto kIdFilePollInterval = std::chrono::milliseconds(5);

const char* envOrNull(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

bool parseNonNegative(std::string_view text, int64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out >= 0;
}

// The integer in `name`; nullopt if unset. InvalidArgument if malformed.
Result<std::optional<int>> envInt(const char* name) {
  const char* text = envOrNull(name);
  if (text == nullptr) return std::optional<int>();
  int64_t value = 0;
  if (!parseNonNegative(text, &value) || value > INT32_MAX)
    return invalidArgument(std::string(name) + "='" + text + "' is not a non-negative integer");
  return std::optional<int>(static_cast<int>(value));
}

Result<int> requireEnvInt(const char* name, const char* because) {
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> value, envInt(name));
  if (!value) return invalidArgument(std::string(name) + " is not set (" + because + ")");
  return *value;
}

// The variable names one launcher uses.
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localSize;
};

constexpr LauncherVars kPlaitRun{"plait-run", "PLAIT_RANK", "PLAIT_NRANKS", "PLAIT_LOCAL_RANK",
                                 "PLAIT_LOCAL_NRANKS"};
constexpr LauncherVars kMpirun{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr LauncherVars kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};

Status checkConsistent(const LaunchInfo& info, const LauncherVars& vars) {
  auto fail = [&](const char* what, int value, const char* bound, int boundValue) {
    return invalidArgument(std::string(info.launcher) + " launch: " + what + "=" + std::to_string(value) +
                           " is out of range for " + bound + "=" + std::to_string(boundValue));
  };
  if (info.nranks < 1) return fail(vars.size, info.nranks, "at least", 1);
  if (info.rank >= info.nranks) return fail(vars.rank, info.rank, vars.size, info.nranks);
  if (info.localNranks < 1 || info.localNranks > info.nranks)
    return fail(vars.localSize, info.localNranks, vars.size, info.nranks);
  if (info.localRank >= info.localNranks) return fail(vars.localRank, info.localRank, vars.localSize, info.localNranks);
  return Status::ok();
}

// Reads a launcher whose four variables all follow the same pattern.
Result<std::optional<LaunchInfo>> readLauncher(const LauncherVars& vars) {
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> rank, envInt(vars.rank));
  if (!rank) return std::optional<LaunchInfo>();
  std::string because = std::string(vars.rank) + " is set";
  LaunchInfo info;
  info.launcher = vars.launcher;
  info.rank = *rank;
  PLAIT_ASSIGN_OR_RETURN(info.nranks, requireEnvInt(vars.size, because.c_str()));
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> localRank, envInt(vars.localRank));
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> localSize, envInt(vars.localSize));
  info.localRank = localRank.value_or(info.rank);
  info.localNranks = localSize.value_or(info.nranks);
  PLAIT_RETURN_IF_ERROR(checkConsistent(info, vars));
  return std::optional<LaunchInfo>(info);
}

// Slurm's local size: the tasks-per-node spec at this node's index.
Result<int> slurmLocalSize(int fallback) {
  const char* specName = envOrNull("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  if (const char* spec = envOrNull(specName)) {
    PLAIT_ASSIGN_OR_RETURN(std::optional<int> node, envInt("SLURM_NODEID"));
    auto tasks = launch_detail::tasksOnNode(spec, node.value_or(0));
    if (!tasks.isOk()) return invalidArgument(std::string(specName) + ": " + tasks.status().message());
    return tasks.value();
  }
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> perNode, envInt("SLURM_NTASKS_PER_NODE"));
  return perNode.value_or(fallback);
}

Result<std::optional<LaunchInfo>> readSlurm() {
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> rank, envInt("SLURM_PROCID"));
  if (!rank) return std::optional<LaunchInfo>();
  LaunchInfo info;
  info.launcher = "slurm";
  info.rank = *rank;
  // SLURM_NTASKS describes the allocation; the step (srun) may run fewer.
  const char* sizeName = envOrNull("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  PLAIT_ASSIGN_OR_RETURN(info.nranks, requireEnvInt(sizeName, "SLURM_PROCID is set"));
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> localRank, envInt("SLURM_LOCALID"));
  info.localRank = localRank.value_or(info.rank);
  PLAIT_ASSIGN_OR_RETURN(info.localNranks, slurmLocalSize(info.nranks));
  LauncherVars vars{"slurm", "SLURM_PROCID", sizeName, "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"};
  PLAIT_RETURN_IF_ERROR(checkConsistent(info, vars));
  return std::optional<LaunchInfo>(info);
}

Status statusFromNccl(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return Status::ok();
  return Status(static_cast<Code>(result), std::string(call) + " failed");
}

Result<ncclUniqueId> callGetUniqueId() {
  if (ncclGetUniqueId == nullptr)
    return invalidUsage("ncclGetUniqueId is not linked into this program (link libplait or libnccl)");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  PLAIT_RETURN_IF_ERROR(statusFromNccl(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return id;
}

bool commIdSet() { return envOrNull("NCCL_COMM_ID") != nullptr || envOrNull("PLAIT_COMM_ID") != nullptr; }

// Exports `address` as NCCL_COMM_ID (so rank 0's init hosts the root there)
// and returns the id ncclGetUniqueId encodes from it.
Result<ncclUniqueId> uniqueIdAt(const std::string& address, const char* origin) {
  if (!commIdSet()) {
    if (setenv("NCCL_COMM_ID", address.c_str(), 0) != 0) return systemError("setenv NCCL_COMM_ID");
    config::resetAll();  // the registry may have cached an unset COMM_ID
    PLAIT_INFO(kInit | ::plait::log::kEnv, "launch: NCCL_COMM_ID=%s from %s", address.c_str(), origin);
  }
  return callGetUniqueId();
}

Result<ncclUniqueId> torchrunUniqueId() {
  const char* addr = envOrNull("MASTER_ADDR");
  if (addr == nullptr) return invalidArgument("MASTER_ADDR is not set (torchrun launch without NCCL_COMM_ID)");
  PLAIT_ASSIGN_OR_RETURN(int port, requireEnvInt("MASTER_PORT", "torchrun launch without NCCL_COMM_ID"));
  if (port < 1 || port >= 65535)
    return invalidArgument("MASTER_PORT=" + std::to_string(port) + " leaves no port above it for the comm id");
  return uniqueIdAt(launch_detail::formatCommId(addr, port + 1), "MASTER_ADDR:MASTER_PORT+1");
}

Result<ncclUniqueId> slurmUniqueId() {
  const char* listName = envOrNull("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const char* list = envOrNull(listName);
  if (list == nullptr) return invalidArgument("SLURM_STEP_NODELIST is not set (Slurm launch without NCCL_COMM_ID)");
  auto hosts = launch_detail::expandHostlist(list);
  if (!hosts.isOk()) return invalidArgument(std::string(listName) + ": " + hosts.status().message());
  if (hosts->empty()) return invalidArgument(std::string(listName) + " is empty");
  PLAIT_ASSIGN_OR_RETURN(int job, requireEnvInt("SLURM_JOB_ID", "Slurm launch without NCCL_COMM_ID"));
  PLAIT_ASSIGN_OR_RETURN(std::optional<int> step, envInt("SLURM_STEP_ID"));
  int port = launch_detail::slurmCommPort(static_cast<uint64_t>(job), static_cast<uint64_t>(step.value_or(0)));
  return uniqueIdAt(launch_detail::formatCommId(hosts->front(), port), listName);
}

// Wall-clock time at which this process started, from /proc (0 if unknown).
int64_t processStartUnixNs() {
  std::ifstream statFile("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(statFile)), std::istreambuf_iterator<char>());
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  // Fields after "(comm)" start at field 3; starttime is field 22.
  std::string rest = stat.substr(paren + 2);
  unsigned long long ticks = 0;
  size_t pos = 0;
  for (int field = 3; field < 22 && pos != std::string::npos; ++field) pos = rest.find(' ', pos + 1);
  if (pos == std::string::npos || std::sscanf(rest.c_str() + pos, " %llu", &ticks) != 1) return 0;
  timespec boot{}, now{};
  clock_gettime(CLOCK_BOOTTIME, &boot);
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t sinceBootNs = static_cast<int64_t>(ticks) * (1000000000LL / sysconf(_SC_CLK_TCK));
  int64_t uptimeNs = boot.tv_sec * 1000000000LL + boot.tv_nsec;
  return now.tv_sec * 1000000000LL + now.tv_nsec - uptimeNs + sinceBootNs;
}

// Rank 0 removes its id files when its process exits normally: a rank that
// finished never leaves peers still waiting for the file (they joined its
// communicator). A crash leaves the file; readers skip it as stale. Only the
// process that wrote a file removes it: a child forked later (a data loader,
// a helper) inherits the atexit handler, and its exit must not pull the id
// from under ranks that are still joining.
void removeAtExit(const std::string& path) {
  struct Owned {
    std::string path;
    pid_t owner;
  };
  static std::mutex mu;
  static auto* paths = new std::vector<Owned>();  // leaked: used by the atexit handler
  std::lock_guard<std::mutex> lock(mu);
  if (paths->empty())
    std::atexit([] {
      std::lock_guard<std::mutex> exitLock(mu);
      for (const Owned& p : *paths)
        if (p.owner == ::getpid()) ::unlink(p.path.c_str());
    });
  paths->push_back(Owned{path, ::getpid()});
}

Result<ncclUniqueId> mpirunFileUniqueId(const LaunchInfo& info, Deadline deadline) {
  const char* jobName = envOrNull("OMPI_MCA_ess_base_jobid") ? "OMPI_MCA_ess_base_jobid" : "PMIX_NAMESPACE";
  const char* job = envOrNull(jobName);
  if (job == nullptr)
    return invalidArgument(
        "mpirun launch without NCCL_COMM_ID needs OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE to name the id file; "
        "export NCCL_COMM_ID=<host of rank 0>:<port> instead");
  std::string path = launch_detail::idFilePath(job);
  if (info.rank == 0) {
    PLAIT_ASSIGN_OR_RETURN(ncclUniqueId id, callGetUniqueId());
    PLAIT_RETURN_IF_ERROR(launch_detail::publishIdFile(path, id));
    removeAtExit(path);
    return id;
  }
  int64_t startNs = processStartUnixNs();
  return launch_detail::awaitIdFile(path, startNs > 0 ? startNs - kIdFileStaleSlackNs : 0, deadline);
}

}  // namespace

Result<LaunchInfo> detectLaunch() {
  for (const LauncherVars* vars : {&kPlaitRun, &kMpirun, &kTorchrun}) {
    PLAIT_ASSIGN_OR_RETURN(std::optional<LaunchInfo> info, readLauncher(*vars));
    if (info) return *info;
  }
  PLAIT_ASSIGN_OR_RETURN(std::optional<LaunchInfo> slurm, readSlurm());
  if (slurm) return *slurm;
  return LaunchInfo{};
}

Result<ncclUniqueId> launchUniqueId(const LaunchInfo& info, Deadline deadline) {
  if (commIdSet() || info.launcher == "none") return callGetUniqueId();
  // Without NCCL_COMM_ID every plait-run rank would make its own root and wait forever.
  if (info.launcher == "plait-run")
    return invalidArgument("NCCL_COMM_ID is not set (plait-run sets it for every rank; was it unset?)");
  if (info.launcher == "torchrun") return torchrunUniqueId();
  if (info.launcher == "slurm") return slurmUniqueId();
  if (info.launcher == "mpirun") return mpirunFileUniqueId(info, deadline);
  return invalidArgument("unknown launcher '" + info.launcher + "'");
}

}  // namespace plait

// ---- launch_detail ---------------------------------------------------------------

namespace plait::launch_detail {
namespace {

// Splits at commas that are not inside brackets.
std::vector<std::string_view> splitTopLevel(std::string_view text) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  return parts;
}

// Appends the values of one bracket body ("01-04,07") to `values`, keeping
// the lower bound's zero padding. Every range is checked, and the whole
// bracket counted, before anything is expanded: "[0-999999,0-999999,...]" is
// refused without building a million names first.
Status expandRanges(std::string_view body, std::vector<std::string>* values) {
  struct Range {
    int64_t low, high;
    size_t width;  // the lower bound's digits, zero padding included
  };
  std::vector<Range> ranges;
  size_t total = 0;
  for (std::string_view part : splitTopLevel(body)) {
    size_t dash = part.find('-');
    std::string_view lowText = part.substr(0, dash);
    std::string_view highText = dash == std::string_view::npos ? lowText : part.substr(dash + 1);
    int64_t low = 0, high = 0;
    if (!parseNonNegative(lowText, &low) || !parseNonNegative(highText, &high) || high < low ||
        lowText.size() > kMaxHostNameBytes)  // its zero padding is every value's width
      return invalidArgument("bad range '" + std::string(part) + "' in '[" + std::string(body) + "]'");
    if (static_cast<size_t>(high - low) >= kMaxHosts - total)
      return invalidArgument("'[" + std::string(body) + "]' names more than 1000000 hosts");
    total += static_cast<size_t>(high - low) + 1;
    ranges.push_back({low, high, lowText.size()});
  }
  for (const Range& r : ranges) {
    // Counted, not `v <= high; ++v`: high may be INT64_MAX (found by fuzz_env).
    for (int64_t i = 0; i <= r.high - r.low; ++i) {
      std::string digits = std::to_string(r.low + i);
      if (digits.size() < r.width) digits.insert(0, r.width - digits.size(), '0');
      values->push_back(std::move(digits));
    }
  }
  return Status::ok();
}

// Expands every bracket group of one name, left to right. Each bracket is
// expanded once and the names are counted (and their length bounded) before
// any is built: "n[0-4107][0-4107]" is refused without making the sixteen
// million names, and a product within bounds costs one string per name
// (tests/fuzz env: expanding the inner bracket again for each outer value
// took seconds under ASan for names the limit then refused).
Status expandName(std::string_view name, std::vector<std::string>* out, size_t* bytes) {
  struct Segment {
    std::string text;                 // literal text before the bracket
    std::vector<std::string> values;  // the bracket's values; empty after the last bracket
  };
  std::vector<Segment> segments;
  size_t count = 1, longest = 0;
  std::string_view rest = name;
  for (;;) {
    size_t open = rest.find('[');
    if (open == std::string_view::npos) {
      if (rest.find(']') != std::string_view::npos) return invalidArgument("unbalanced ']' in '" + std::string(rest) + "'");
      segments.push_back({std::string(rest), {}});
      longest += rest.size();
      break;
    }
    size_t close = rest.find(']', open);
    if (close == std::string_view::npos) return invalidArgument("unbalanced '[' in '" + std::string(rest) + "'");
    Segment segment{std::string(rest.substr(0, open)), {}};
    if (segment.text.find(']') != std::string::npos)
      return invalidArgument("unbalanced ']' in '" + std::string(rest) + "'");
    PLAIT_RETURN_IF_ERROR(expandRanges(rest.substr(open + 1, close - open - 1), &segment.values));
    size_t widest = 0;
    for (const std::string& v : segment.values) widest = std::max(widest, v.size());
    longest += segment.text.size() + widest;
    if (longest > kMaxHostNameBytes)
      return invalidArgument("a host name longer than " + std::to_string(kMaxHostNameBytes) + " characters");
    if (segment.values.size() > (kMaxHosts - out->size()) / count)
      return invalidArgument("'" + std::string(name) + "' names more than 1000000 hosts");
    count *= segment.values.size();
    segments.push_back(std::move(segment));
    rest = rest.substr(close + 1);
  }
  if (longest > kMaxHostNameBytes)
    return invalidArgument("a host name longer than " + std::to_string(kMaxHostNameBytes) + " characters");
  if (longest > 0 && count > (kMaxHostlistBytes - *bytes) / longest)
    return invalidArgument("'" + std::string(name) + "' expands to more than " + std::to_string(kMaxHostlistBytes >> 20) +
                           " MiB of host names");
  *bytes += count * longest;
  // An odometer over the brackets, the last one turning fastest.
  std::vector<size_t> at(segments.size(), 0);
  out->reserve(out->size() + count);
  for (size_t n = 0; n < count; ++n) {
    std::string host;
    host.reserve(longest);
    for (size_t s = 0; s < segments.size(); ++s) {
      host += segments[s].text;
      if (!segments[s].values.empty()) host += segments[s].values[at[s]];
    }
    out->push_back(std::move(host));
    for (size_t s = segments.size(); s-- > 0;) {
      if (segments[s].values.empty()) continue;
      if (++at[s] < segments[s].values.size()) break;
      at[s] = 0;
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<std::string>> expandHostlist(std::string_view hostlist) {
  std::vector<std::string> hosts;
  size_t bytes = 0;  // an upper bound: each name counted at its item's longest
  for (std::string_view item : splitTopLevel(hostlist)) {
    if (item.empty()) continue;
    Status status = expandName(item, &hosts, &bytes);
    if (!status.isOk()) return status.withContext("hostlist '" + std::string(hostlist) + "'");
  }
  return hosts;
}

Result<int> tasksOnNode(std::string_view spec, int nodeIndex) {
  int64_t node = 0;
  for (std::string_view item : splitTopLevel(spec)) {
    size_t paren = item.find('(');
    int64_t tasks = 0, repeat = 1;
    bool ok = parseNonNegative(item.substr(0, paren), &tasks);
    if (ok && paren != std::string_view::npos) {
      std::string_view times = item.substr(paren + 1);
      ok = times.size() >= 3 && times[0] == 'x' && times.back() == ')' &&
           parseNonNegative(times.substr(1, times.size() - 2), &repeat);
    }
    if (!ok || tasks > INT32_MAX) return invalidArgument("malformed tasks-per-node item '" + std::string(item) + "'");
    if (nodeIndex >= node && nodeIndex - node < repeat) return static_cast<int>(tasks);
    // Past every node an int can index: the rest cannot hold nodeIndex, and
    // adding a repeat of up to 2^63-1 must not overflow.
    if (repeat > INT32_MAX - node) break;
    node += repeat;
  }
  return invalidArgument("node index " + std::to_string(nodeIndex) + " is beyond '" + std::string(spec) + "'");
}

int slurmCommPort(uint64_t jobId, uint64_t stepId) {
  // A multiplicative mix so consecutive jobs and steps land far apart.
  uint64_t mixed = (jobId * 0x9E3779B97F4A7C15ull) ^ (stepId * 0xC2B2AE3D27D4EB4Full);
  mixed ^= mixed >> 29;
  return kSlurmPortBase + static_cast<int>(mixed % kSlurmPortSpan);
}

std::string formatCommId(std::string_view host, int port) {
  bool ipv6 = host.find(':') != std::string_view::npos && host.front() != '[';
  std::string text = ipv6 ? "[" + std::string(host) + "]" : std::string(host);
  return text + ":" + std::to_string(port);
}

std::string idFilePath(std::string_view jobId) {
  std::string safe(jobId);
  for (char& c : safe)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  return "/tmp/plait-" + safe + "-" + std::to_string(getuid()) + ".id";
}

Status publishIdFile(const std::string& path, const ncclUniqueId& id) {
  std::string temp = path + ".XXXXXX";
  int fd = mkstemp(temp.data());  // mode 0600, O_EXCL
  if (fd < 0) return systemError("creating a temporary file for " + path);
  bool written = ::write(fd, &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id));
  bool closed = ::close(fd) == 0;
  if (!written || !closed || ::rename(temp.c_str(), path.c_str()) != 0) {
    Status status = systemError("publishing the unique id in " + path);
    ::unlink(temp.c_str());
    return status;
  }
  return Status::ok();
}

namespace {

// The id in `path` if it is complete, ours and fresh; nullopt otherwise.
std::optional<ncclUniqueId> readFreshId(const std::string& path, int64_t notBeforeUnixNs) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  ncclUniqueId id;
  bool ok = fstat(fd, &st) == 0 && st.st_uid == getuid() && S_ISREG(st.st_mode) &&
            st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec >= notBeforeUnixNs &&
            ::read(fd, &id, sizeof(id)) == static_cast<ssize_t>(sizeof(id));
  ::close(fd);
  return ok ? std::optional<ncclUniqueId>(id) : std::nullopt;
}

}  // namespace

Result<ncclUniqueId> awaitIdFile(const std::string& path, int64_t notBeforeUnixNs, Deadline deadline) {
  while (true) {
    if (std::optional<ncclUniqueId> id = readFreshId(path, notBeforeUnixNs)) return *id;
    if (deadline.expired())
      return remoteError("timed out waiting for rank 0 to publish the unique id in " + path +
                         " (multi-host mpirun jobs need NCCL_COMM_ID=<host of rank 0>:<port>)");
    std::this_thread::sleep_for(kIdFilePollInterval);
  }
}

}  // namespace plait::launch_detail
