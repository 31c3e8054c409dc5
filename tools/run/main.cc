// plait-run — starts N local ranks of a program with the environment Plait's
// launch detection reads (plait/launch.hpp), and supervises them.
//
//   plait-run -n N [--hosts h1,h2,...] [--timeout S] [--tag-output] [--] prog args...
//
// Options are parsed up to the program name; everything from there on is the
// rank's command line. Exit status: 0 if every rank exited 0, otherwise that of
// the first failure (see rank_launcher.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core_binding.h"
#include "rank_launcher.h"

namespace {

constexpr int kExitUsage = 2;

// A port on 127.0.0.1 reserved for the job's bootstrap root: bound (port 0,
// read back) with SO_REUSEADDR but not listening, and kept open while the
// ranks run. Rank 0's library binds it again as the bootstrap root, which
// Linux allows because both sockets set SO_REUSEADDR and neither listened
// yet; meanwhile the bound socket keeps the kernel from handing the port to
// another process's outgoing connection (ctest runs jobs in parallel and the
// port lies in the ephemeral range), which used to fail rank 0 with
// EADDRINUSE now and then.
struct ReservedPort {
  int fd = -1;
  int port = 0;
  ReservedPort() = default;
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  ~ReservedPort() {
    if (fd >= 0) close(fd);
  }
};

bool reservePort(ReservedPort& out) {
  out.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (out.fd < 0) return false;
  int one = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (setsockopt(out.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(out.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(out.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return false;
  out.port = ntohs(addr.sin_port);
  return true;
}

// 128 random bits as hex: the job's PLAIT_COMM_SECRET. The ranks mix it into
// the rendezvous nonce, so a process that can reach the NCCL_COMM_ID port
// but did not get the secret cannot join or disrupt the job.
std::optional<std::string> randomSecret() {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) return std::nullopt;
  std::string hex;
  for (unsigned char b : bytes) {
    constexpr char kDigits[] = "0123456789abcdef";
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

bool isThisHost(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return false;
  std::string self(name);
  return host == self || host == self.substr(0, self.find('.'));
}

// Checks --hosts: every entry ("host" or "host:slots") must be this host
// until multi-host launching exists. Returns false after printing why.
bool checkHosts(const std::string& hosts) {
  size_t start = 0;
  while (start <= hosts.size()) {
    size_t comma = hosts.find(',', start);
    std::string entry = hosts.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = entry.find(':');  // "host:slots"; an IPv6 address has several
    bool slots = colon != std::string::npos && entry.find(':', colon + 1) == std::string::npos;
    std::string host = slots ? entry.substr(0, colon) : entry;
    if (!host.empty() && !isThisHost(host)) {
      std::fprintf(stderr,
                   "plait-run: launching on host '%s' is not supported yet (multi-host launch over ssh); "
                   "start the ranks with mpirun or srun and set NCCL_COMM_ID=<host of rank 0>:<port>\n",
                   host.c_str());
      return false;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "plait-run: start N local ranks of a program for Plait (sets NCCL_COMM_ID, PLAIT_RANK, ...)\n"
      "usage: plait-run -n N [--hosts h1,h2,...] [--timeout S] [--tag-output] [--bind-to core|none] [--] prog args...",
      "plait-run"};
  app.prefix_command();  // stop at the program name: its flags are its own
  plait::run::LaunchOptions options;
  std::string hosts;
  double timeoutSeconds = 0;
  app.add_option("-n,--np", options.nranks, "number of ranks")->required()->check(CLI::Range(1, 4096));
  app.add_option("--hosts", hosts, "comma-separated hosts (only this host is supported yet)");
  app.add_option("--timeout", timeoutSeconds, "kill all ranks after this many seconds")
      ->check(CLI::PositiveNumber);
  app.add_flag("--tag-output", options.tagOutput, "prefix each output line with [rank]");
  std::string bindTo = "core";
  bool reportBindings = false;
  app.add_option("--bind-to", bindTo,
                 "core: each rank on a CPU of its own, distinct cores first (when there are enough CPUs); "
                 "none: wherever the scheduler puts it")
      ->check(CLI::IsMember({"core", "none"}));
  app.add_flag("--report-bindings", reportBindings, "say on stderr where each rank is bound");
  // CLI11 reports errors by exception; this is the only place they can arise.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : kExitUsage;
  }
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front() == "--") options.command.erase(options.command.begin());
  if (options.command.empty()) {
    std::fprintf(stderr, "plait-run: no program given\n%s", app.help().c_str());
    return plait::run::kExitLaunchFailed;
  }
  if (!hosts.empty() && !checkHosts(hosts)) return plait::run::kExitLaunchFailed;
  if (timeoutSeconds > 0)
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000 + 0.5));
  if (bindTo == "core") {
    std::string why;
    options.rankCpus = plait::run::planCoreBinding(options.nranks, &why);
    if (reportBindings) {
      std::fprintf(stderr, "plait-run: %s\n", why.c_str());
      for (size_t r = 0; r < options.rankCpus.size(); ++r)
        std::fprintf(stderr, "plait-run: rank %zu bound to CPU %d\n", r, options.rankCpus[r]);
    }
  } else if (reportBindings) {
    std::fprintf(stderr, "plait-run: not bound (--bind-to none)\n");
  }
  ReservedPort port;  // held until the ranks have exited
  if (!reservePort(port)) {
    std::fprintf(stderr, "plait-run: cannot reserve a TCP port on 127.0.0.1: %s\n", strerror(errno));
    return plait::run::kExitLaunchFailed;
  }
  options.commId = "127.0.0.1:" + std::to_string(port.port);
  std::optional<std::string> secret = randomSecret();
  if (!secret) {
    std::fprintf(stderr, "plait-run: cannot read random bytes for the job's secret: %s\n", strerror(errno));
    return plait::run::kExitLaunchFailed;
  }
  options.commSecret = *secret;
  return plait::run::runRanks(options);
}
