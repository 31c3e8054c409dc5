// log.h — NCCL_DEBUG-style logging.
//
// Levels (NCCL_DEBUG / PLAIT_DEBUG): NONE, VERSION, WARN, INFO, ABORT, TRACE;
// default WARN. Subsystems (NCCL_DEBUG_SUBSYS): a comma list of INIT, COLL,
// P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, PROXY, BOOTSTRAP, ALL; a
// leading ^ excludes the listed ones; default INIT,ENV (NCCL's choice).
// Output goes to stderr, or to NCCL_DEBUG_FILE where %h is the host name and
// %p the pid. Lines look like
//   host:pid:tid [rank] PLAIT INFO message
// The rank is this thread's current rank (set with ScopedLogRank), or blank.
// Thread-safe; a disabled level costs one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>

namespace plait::log {

enum class Level : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kShm = 1u << 3,
  kNet = 1u << 4,
  kGraph = 1u << 5,
  kTuning = 1u << 6,
  kEnv = 1u << 7,
  kAlloc = 1u << 8,
  kCall = 1u << 9,
  kProxy = 1u << 10,
  kBootstrap = 1u << 11,
  kAll = ~0u,
};

// The configured level (reads the environment on first use).
Level level();
namespace detail {
// The configured Level; -1 until read (log.cc). Hidden: libplait and
// libnccl.so.2 each hold one, and one process may load both; an exported
// variable would be interposed (the second library would see the first's
// level as read and never set up its own output).
extern std::atomic<int> gLevel __attribute__((visibility("hidden")));
bool enabledSlow(Level lvl, uint32_t subsys);
}  // namespace detail
// Inline: the hot paths ask on every call, and with the level read and
// below `lvl` (INFO off, the usual case) the answer is one compare.
inline bool enabled(Level lvl, uint32_t subsys) {
  const int configured = detail::gLevel.load(std::memory_order_relaxed);
  if (configured >= 0 && static_cast<int>(lvl) > configured) return false;
  return detail::enabledSlow(lvl, subsys);
}
// `file` may be null (a net plugin's logger call): printed as "?".
void write(Level lvl, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Re-reads NCCL_DEBUG* (ncclResetDebugInit, tests).
void reset();

// Sets the rank shown in this thread's log lines for a scope.
class ScopedLogRank {
 public:
  explicit ScopedLogRank(int rank);
  ~ScopedLogRank();

 private:
  int previous_;
};

}  // namespace plait::log

#define PLAIT_LOG_(lvl, subsys, ...)                                                     \
  do {                                                                                   \
    if (::plait::log::enabled(lvl, ::plait::log::subsys))                               \
      ::plait::log::write(lvl, ::plait::log::subsys, __FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)
#define PLAIT_WARN(subsys, ...) PLAIT_LOG_(::plait::log::Level::kWarn, subsys, __VA_ARGS__)
#define PLAIT_INFO(subsys, ...) PLAIT_LOG_(::plait::log::Level::kInfo, subsys, __VA_ARGS__)
#define PLAIT_TRACE(subsys, ...) PLAIT_LOG_(::plait::log::Level::kTrace, subsys, __VA_ARGS__)
