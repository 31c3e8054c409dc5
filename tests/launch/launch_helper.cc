// launch_helper — a rank for plait-run's tests. Usage:
//   launch_helper MODE0 [MODE1 ...]
// Rank r (PLAIT_RANK) runs MODE_r, or the last mode given when r is beyond
// the list. Modes:
//   env          print the launch variables, one NAME=value line each, exit 0
//   exit:N       exit with status N
//   lateexit:N   exit with status N after 500 ms
//   segv         die by SIGSEGV (no core file)
//   sleep        sleep (at most 300 s, so a broken test cannot leak it forever)
//   stubborn     ignore SIGTERM, then sleep
//   lines:K      write K long lines to stdout, each in several small writes
//   pidfile:DIR  write DIR/<rank>.pid (atomically), then sleep
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

constexpr auto kMaxSleep = std::chrono::seconds(300);

void sleepLong() { std::this_thread::sleep_for(kMaxSleep); }

void printEnv() {
  for (const char* name : {"PLAIT_RANK", "PLAIT_NRANKS", "PLAIT_LOCAL_RANK", "PLAIT_LOCAL_NRANKS", "NCCL_COMM_ID"}) {
    const char* value = std::getenv(name);
    std::printf("%s=%s\n", name, value ? value : "(unset)");
  }
}

// Lines look like "rank R line I <payload>\n", written in pieces so that a
// launcher that forwarded partial reads untagged would split them.
void writeLines(int rank, int count) {
  std::string payload(3000, static_cast<char>('a' + rank % 26));
  for (int i = 0; i < count; ++i) {
    std::string line = "rank " + std::to_string(rank) + " line " + std::to_string(i) + " " + payload + "\n";
    for (size_t at = 0; at < line.size(); at += 700) {
      size_t n = std::min<size_t>(700, line.size() - at);
      if (write(STDOUT_FILENO, line.data() + at, n) != static_cast<ssize_t>(n)) std::exit(2);
      if (i % 16 == 0) std::this_thread::yield();
    }
  }
}

void writePidFile(const std::string& dir, int rank) {
  std::string path = dir + "/" + std::to_string(rank) + ".pid";
  std::string temp = path + ".tmp";
  FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) std::exit(2);
  std::fprintf(f, "%d\n", getpid());
  std::fclose(f);
  if (std::rename(temp.c_str(), path.c_str()) != 0) std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* rankText = std::getenv("PLAIT_RANK");
  int rank = rankText ? std::atoi(rankText) : 0;
  std::string mode = argv[std::min(1 + rank, argc - 1)];
  std::string arg = mode.find(':') == std::string::npos ? "" : mode.substr(mode.find(':') + 1);
  mode = mode.substr(0, mode.find(':'));
  if (mode == "env") {
    printEnv();
  } else if (mode == "exit") {
    return std::atoi(arg.c_str());
  } else if (mode == "lateexit") {  // gives the other ranks time to start (and install handlers) first
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return std::atoi(arg.c_str());
  } else if (mode == "segv") {
    rlimit noCore{0, 0};
    setrlimit(RLIMIT_CORE, &noCore);
    raise(SIGSEGV);
  } else if (mode == "sleep") {
    sleepLong();
  } else if (mode == "stubborn") {
    signal(SIGTERM, SIG_IGN);
    sleepLong();
  } else if (mode == "lines") {
    writeLines(rank, std::atoi(arg.c_str()));
  } else if (mode == "pidfile") {
    writePidFile(arg, rank);
    sleepLong();
  } else {
    std::fprintf(stderr, "launch_helper: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  return 0;
}
