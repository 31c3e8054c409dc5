#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/config.h"

namespace plait::log {
namespace {

PLAIT_PARAM_STRING(kDebug, "DEBUG", "WARN", "log level: NONE, VERSION, WARN, INFO, ABORT, TRACE");
PLAIT_PARAM_STRING(kDebugSubsys, "DEBUG_SUBSYS", "INIT,ENV",
                   "subsystems to log (INIT,COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,CALL,PROXY,BOOTSTRAP,ALL; ^ excludes)");
PLAIT_PARAM_STRING(kDebugFile, "DEBUG_FILE", "", "log file name; %h is the host name, %p the pid (default stderr)");

struct State {
  std::atomic<uint32_t> mask{0};
  std::mutex mu;
  FILE* out = nullptr;
  char host[64] = {0};
};

}  // namespace

std::atomic<int> detail::gLevel{-1};

namespace {

State& state() {
  static State s;
  return s;
}

// The default TLS model, not initial-exec: a library with static TLS cannot
// be dlopen()ed once a process's static TLS surplus is spent (torch's
// extensions, ctypes, frameworks that load libnccl.so.2 late).
thread_local int tlsRank = -1;

Level parseLevel(const std::string& s) {
  if (s == "NONE") return Level::kNone;
  if (s == "VERSION") return Level::kVersion;
  if (s == "WARN") return Level::kWarn;
  if (s == "INFO") return Level::kInfo;
  if (s == "ABORT") return Level::kAbort;
  if (s == "TRACE") return Level::kTrace;
  return Level::kWarn;
}

uint32_t parseSubsys(const std::string& text) {
  static const struct { const char* name; uint32_t bit; } kNames[] = {
      {"INIT", kInit}, {"COLL", kColl},   {"P2P", kP2p},     {"SHM", kShm},     {"NET", kNet},
      {"GRAPH", kGraph}, {"TUNING", kTuning}, {"ENV", kEnv}, {"ALLOC", kAlloc}, {"CALL", kCall},
      {"PROXY", kProxy}, {"BOOTSTRAP", kBootstrap}, {"ALL", kAll}};
  bool invert = !text.empty() && text[0] == '^';
  uint32_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string word = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (auto& n : kNames)
      if (strcasecmp(word.c_str(), n.name) == 0) mask |= n.bit;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

void init() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (detail::gLevel.load(std::memory_order_relaxed) >= 0) return;
  gethostname(s.host, sizeof(s.host) - 1);
  if (char* dot = std::strchr(s.host, '.')) *dot = 0;
  std::string file = kDebugFile.get();
  s.out = stderr;
  if (!file.empty()) {
    std::string name;
    for (size_t i = 0; i < file.size(); ++i) {
      if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'h') {
        name += s.host;
        ++i;
      } else if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'p') {
        name += std::to_string(getpid());
        ++i;
      } else {
        name += file[i];
      }
    }
    if (FILE* f = std::fopen(name.c_str(), "a")) s.out = f;
  }
  s.mask.store(parseSubsys(kDebugSubsys.get()), std::memory_order_relaxed);
  detail::gLevel.store(static_cast<int>(parseLevel(kDebug.get())), std::memory_order_release);
}

const char* levelName(Level lvl) {
  switch (lvl) {
    case Level::kVersion: return "VERSION";
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kAbort: return "ABORT";
    case Level::kTrace: return "TRACE";
    default: return "";
  }
}

}  // namespace

Level level() {
  int lvl = detail::gLevel.load(std::memory_order_acquire);
  if (lvl < 0) {
    init();
    lvl = detail::gLevel.load(std::memory_order_acquire);
  }
  return static_cast<Level>(lvl);
}

bool detail::enabledSlow(Level lvl, uint32_t subsys) {
  Level configured = level();
  if (static_cast<int>(lvl) > static_cast<int>(configured)) return false;
  // Warnings are shown whatever the subsystem mask says, as in NCCL.
  if (lvl <= Level::kWarn) return true;
  return (state().mask.load(std::memory_order_relaxed) & subsys) != 0;
}

void write(Level lvl, uint32_t /*subsys*/, const char* file, int line, const char* fmt, ...) {
  State& s = state();
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  char rank[16] = "";
  if (tlsRank >= 0) snprintf(rank, sizeof(rank), "%d", tlsRank);
  std::lock_guard<std::mutex> lock(s.mu);
  if (lvl == Level::kTrace) {
    // `file` may come from a net plugin's logger call (net_plugin.h's netLogger): null is "?".
    if (file == nullptr) file = "?";
    const char* base = std::strrchr(file, '/');
    fprintf(s.out, "%s:%d:%ld [%s] PLAIT %s %s:%d %s\n", s.host, getpid(), syscall(SYS_gettid), rank,
            levelName(lvl), base ? base + 1 : file, line, msg);
  } else {
    fprintf(s.out, "%s:%d:%ld [%s] PLAIT %s %s\n", s.host, getpid(), syscall(SYS_gettid), rank, levelName(lvl),
            msg);
  }
  fflush(s.out);
}

void reset() {
  State& s = state();
  kDebug.reset();
  kDebugSubsys.reset();
  kDebugFile.reset();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.out && s.out != stderr) std::fclose(s.out);
  s.out = nullptr;
  detail::gLevel.store(-1, std::memory_order_release);
}

ScopedLogRank::ScopedLogRank(int rank) : previous_(tlsRank) { tlsRank = rank; }
ScopedLogRank::~ScopedLogRank() { tlsRank = previous_; }

}  // namespace plait::log
