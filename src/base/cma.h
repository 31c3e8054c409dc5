// cma.h — cross-memory attach: copying straight out of another process's
// memory (process_vm_readv), the single-copy path large point-to-point
// messages take between processes of one host.
//
// It needs ptrace-read permission over the peer (same user, and no Yama or
// container policy forbidding it), so communicators probe it once between
// every pair of local ranks (cmaProbeWord) and use it only if all succeed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace plait {

// Copies `bytes` from address `remote` of process `pid` to `dst`. Returns 0,
// or the errno of the failed system call (EFAULT for a short read that makes
// no progress). Arguments may come from a peer, so some are refused without
// any read: EINVAL for a pid that is not positive or is this process's own
// (reading oneself at a peer-chosen address is never wanted; ranks that are
// threads of one process do not use this path), EFAULT for an address in the
// first page or a range that wraps around.
int cmaRead(int pid, void* dst, uint64_t remote, size_t bytes);

// The other direction (process_vm_writev, the same permission): copies
// `bytes` from `src` to address `remote` of process `pid`; the same checks
// and results.
int cmaWrite(int pid, uint64_t remote, const void* src, size_t bytes);

// "" when `pid` names a process other than this one: the leader of its own
// thread group (/proc/<pid>/status's Tgid). Else why not. A peer reports its
// pid itself, and the kernel's cross-memory calls and /proc/<pid>/fd take a
// thread id too: a peer naming a thread of this process would have this
// process copy within its own memory at addresses the peer chooses. Checked
// once per peer when a communicator agrees on these paths.
std::string cmaPeerPidError(int pid);

// A word with a per-process random value, for peers to read in a probe.
const uint64_t* cmaProbeWord();

// "process_vm_readv from pid 123 failed: Operation not permitted" (with
// `write`: "process_vm_writev to pid 123 failed: ...").
std::string cmaErrorText(int pid, int err, bool write = false);

}  // namespace plait
