#include "core/symmetric.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "algorithms/device/symmetric_work.h"
#include "base/config.h"
#include "base/log.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kWinStride, "WIN_STRIDE", 0,
                "bytes between LSA ranks' copies of the device API's windows (a multiple of 4 GiB; 0: the "
                "device's memory rounded up to 4 GiB, as NCCL)");

constexpr size_t k4G = size_t(1) << 32;
constexpr size_t kResourceUnit = 128;  // resource handles count 128-byte units (nccl_device.h)

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// NCCL's reciprocal for its division by multiplication (ncclDevComm's _rcp32 fields).
uint32_t reciprocal32(uint32_t x) {
  const bool pow2 = x != 0 && (x & (x - 1)) == 0;
  return static_cast<uint32_t>(-1) / x + (pow2 ? 1u : 0u);
}

void copyText(char* out, size_t size, const std::string& text) {
  const size_t n = std::min(size - 1, text.size());
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

SymmetricSpace::SymmetricSpace(const SymmetricSetup& s)
    : rank_(s.rank),
      nranks_(s.nranks),
      lsaSize_(std::max(1, s.lsaSize)),
      lsaRank_(s.rank % std::max(1, s.lsaSize)),
      bootstrap_(s.bootstrap),
      memory_(s.memory),
      abortFlag_(s.abortFlag),
      timeoutMs_(s.timeoutMs) {}

Deadline SymmetricSpace::stepDeadline() const {
  return timeoutMs_ > 0 ? Deadline::afterMs(timeoutMs_) : Deadline::never();
}

Result<std::unique_ptr<SymmetricSpace>> SymmetricSpace::create(const SymmetricSetup& setup) {
  std::unique_ptr<SymmetricSpace> space(new SymmetricSpace(setup));
  SymmetricSpace& sp = *space;
  // Whether every rank can, the token of the fd sockets, and the stride.
  struct Hello {
    uint64_t token;
    uint64_t stride;
    int32_t pid;
    int32_t refused;
    char refusal[240];
  };
  std::vector<Hello> all(sp.nranks_);
  Hello& mine = all[sp.rank_];
  std::memset(&mine, 0, sizeof mine);
  mine.token = std::random_device{}() * 0x100000001ull ^ static_cast<uint64_t>(::getpid());
  mine.pid = ::getpid();
  std::string refusal = setup.refusal;
  int64_t stride = kWinStride.get();
  if (refusal.empty() && stride != 0 && (stride < 0 || stride % static_cast<int64_t>(k4G) != 0))
    refusal = "PLAIT_WIN_STRIDE=" + std::to_string(stride) + " is not a positive multiple of 4 GiB";
  if (refusal.empty()) {
    mine.stride = stride != 0 ? static_cast<uint64_t>(stride) : sp.memory_->deviceMemoryBytes();
  } else {
    mine.refused = 1;
    copyText(mine.refusal, sizeof mine.refusal, refusal);
  }
  PLAIT_RETURN_IF_ERROR(sp.bootstrap_->allGather(all.data(), sizeof(Hello), sp.stepDeadline()));
  for (int r = 0; r < sp.nranks_; ++r) {
    if (all[r].refused) {
      sp.refusal_ = (r == sp.rank_ ? std::string() : "rank " + std::to_string(r) + ": ") + all[r].refusal;
      return space;
    }
    sp.stride_ = std::max<size_t>(sp.stride_, all[r].stride);
  }
  sp.granularity_ = sp.memory_->granularity();
  // The LSA team's pids; other ranks cannot pass fds here.
  std::vector<int> pids(sp.nranks_, -1);
  const int first = sp.rank_ - sp.lsaRank_;
  for (int q = 0; q < sp.lsaSize_; ++q) pids[first + q] = all[first + q].pid;
  char token[40];
  std::snprintf(token, sizeof token, "%d-%016llx", all[0].pid, static_cast<unsigned long long>(all[0].token));
  Status st;
  if (auto box = fdpass::FdMailbox::open(token, sp.rank_, pids); box.isOk()) sp.mailbox_ = std::move(*box);
  else st = box.status();
  if (st.isOk()) {
    if (auto flat = sp.memory_->reserve(static_cast<size_t>(sp.lsaSize_) * sp.stride_); flat.isOk())
      sp.flat_ = static_cast<char*>(*flat);
    else st = flat.status();
  }
  PLAIT_RETURN_IF_ERROR(sp.agree(st, "setting up the device API's windows"));
  PLAIT_INFO(kInit, "rank %d: device API windows: %d LSA ranks, %zu GiB apart (address space at %p)", sp.rank_,
             sp.lsaSize_, sp.stride_ >> 30, static_cast<void*>(sp.flat_));
  return space;
}

SymmetricSpace::~SymmetricSpace() {
  for (auto& [window, record] : windows_) memory_->freeUpload(window);
  for (auto& [base, m] : memories_) unmapAll(&m);
  for (auto& [window, allocation] : devComms_) {
    if (Status s = memory_->release(allocation); !s.isOk())
      PLAIT_WARN(kAlloc, "rank %d: freeing a device communicator's resources: %s", rank_, s.message().c_str());
  }
  if (signals_.second != nullptr) {
    if (Status s = memory_->release(signals_.second); !s.isOk())
      PLAIT_WARN(kAlloc, "rank %d: freeing the symmetric collectives' signals: %s", rank_, s.message().c_str());
  }
  if (flat_ != nullptr) memory_->unreserve(flat_, static_cast<size_t>(lsaSize_) * stride_);
}

Status SymmetricSpace::agree(const Status& mine, const char* step) {
  struct Outcome {
    int32_t code;
    char why[292];
  };
  std::vector<Outcome> all(nranks_);
  all[rank_].code = static_cast<int32_t>(mine.code());
  copyText(all[rank_].why, sizeof all[rank_].why, mine.isOk() ? std::string() : mine.message());
  PLAIT_RETURN_IF_ERROR(bootstrap_->allGather(all.data(), sizeof(Outcome), stepDeadline()));
  if (!mine.isOk()) return mine;
  for (int r = 0; r < nranks_; ++r)
    if (all[r].code != 0)
      return Status(static_cast<Code>(all[r].code),
                    "rank " + std::to_string(r) + " failed " + step + ": " + all[r].why);
  return Status::ok();
}

size_t SymmetricSpace::firstFit(size_t bytes) const {
  size_t at = 0;
  for (const auto& [offset, extent] : used_) {
    if (offset >= at + bytes) break;
    at = std::max(at, offset + extent);
  }
  return at;
}

Status SymmetricSpace::mapTeam(const std::vector<DeviceRangeExport>& team, int ownFd, size_t offset, uint64_t tag,
                               Memory* memory) {
  const Deadline deadline = stepDeadline();
  const int first = rank_ - lsaRank_;
  for (int q = 0; q < lsaSize_; ++q) {
    if (q != lsaRank_) PLAIT_RETURN_IF_ERROR(mailbox_->send(first + q, tag, ownFd, deadline, abortFlag_));
  }
  for (int q = 0; q < lsaSize_; ++q) {
    int fd = ownFd;
    if (q != lsaRank_) {
      PLAIT_ASSIGN_OR_RETURN(fd, mailbox_->receive(first + q, tag, deadline, abortFlag_));
    }
    Result<DeviceMapping> m = memory_->map(team[q], fd, flat_ + static_cast<size_t>(q) * stride_ + offset);
    if (fd != ownFd) ::close(fd);
    if (!m.isOk())
      return Status(m.status().code(), "mapping rank " + std::to_string(first + q) + "'s window memory: " +
                                            m.status().message());
    memory->mappings.push_back(*m);
  }
  return Status::ok();
}

void SymmetricSpace::unmapAll(Memory* memory) {
  for (const DeviceMapping& m : memory->mappings) {
    if (Status s = memory_->unmap(m); !s.isOk())
      PLAIT_WARN(kAlloc, "rank %d: unmapping a peer's window memory: %s", rank_, s.message().c_str());
  }
  memory->mappings.clear();
}

Result<void*> SymmetricSpace::registerWindow(void* buff, size_t bytes, void* localHandle) {
  if (!refusal_.empty()) return invalidUsage(refusal_);
  int fd = -1;
  Result<DeviceRangeExport> exported = memory_->exportRange(buff, bytes, &fd);
  Status local = exported.status();
  if (local.isOk() && exported->kind != 1)
    local = invalidArgument("buff is not CUDA VMM memory (cudaMalloc'd?): a window the LSA team maps must come "
                            "from ncclMemAlloc (or cuMemCreate with POSIX fd handles)");
  // What every rank offers: its allocation, whether it is new to the space,
  // and where it would go.
  struct Offer {
    DeviceRangeExport range;
    uint64_t proposal;
    int32_t isNew;
    int32_t code;
    char why[200];
  };
  std::vector<Offer> all(nranks_);
  Offer& mine = all[rank_];
  std::memset(static_cast<void*>(&mine), 0, sizeof mine);
  const auto existing = local.isOk() ? memories_.find(exported->ownerBase) : memories_.end();
  if (local.isOk()) {
    mine.range = *exported;
    mine.isNew = existing == memories_.end();
    mine.proposal = mine.isNew ? firstFit(alignUp(exported->allocationSize, granularity_)) : existing->second.offset;
  }
  mine.code = static_cast<int32_t>(local.code());
  copyText(mine.why, sizeof mine.why, local.isOk() ? std::string() : local.message());
  Status st = bootstrap_->allGather(all.data(), sizeof(Offer), stepDeadline());
  auto closeFd = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
  };
  if (!st.isOk()) {
    closeFd();
    return st;
  }
  for (int r = 0; r < nranks_ && st.isOk(); ++r)
    if (all[r].code != 0)
      st = r == rank_ ? local
                      : Status(static_cast<Code>(all[r].code), "rank " + std::to_string(r) + ": " + all[r].why);
  if (!st.isOk()) {  // every rank saw the same failure: none goes on
    closeFd();
    return st;
  }
  // The LSA team must agree (its ranks check the same gathered offers; other
  // hosts' teams check theirs, so the outcome is agreed at the end).
  const int first = rank_ - lsaRank_;
  std::vector<DeviceRangeExport> team(lsaSize_);
  size_t extent = 0;
  for (int q = 0; q < lsaSize_; ++q) {
    const Offer& o = all[first + q];
    const Offer& o0 = all[first];
    team[q] = o.range;
    extent = std::max(extent, alignUp(o.range.allocationSize, granularity_));
    if (!st.isOk()) continue;
    if (o.isNew != o0.isNew || o.proposal != o0.proposal)
      st = invalidUsage("ranks " + std::to_string(first) + " and " + std::to_string(first + q) +
                        " are out of step registering windows (their allocations would go at offsets " +
                        std::to_string(o0.proposal) + " and " + std::to_string(o.proposal) +
                        "): register and deregister windows in the same order on every rank");
    else if (o.range.offset != o0.range.offset)
      st = invalidUsage("the window starts " + std::to_string(o0.range.offset) + " bytes into its allocation on rank " +
                        std::to_string(first) + " but " + std::to_string(o.range.offset) + " on rank " +
                        std::to_string(first + q) + ": it must start at the same offset on every rank");
  }
  const size_t offset = all[first].proposal;
  if (st.isOk() && mine.isNew && offset + extent > stride_)
    st = invalidUsage("the windows' allocations need " + std::to_string(offset + extent) +
                      " bytes of each rank's share of the address space, which is " + std::to_string(stride_) +
                      " (PLAIT_WIN_STRIDE)");
  local = st;
  Memory fresh;
  if (local.isOk() && mine.isNew) {
    fresh.offset = offset;
    fresh.extent = extent;
    local = mapTeam(team, fd, offset, tags_++, &fresh);
  }
  closeFd();
  auto window = std::make_unique<Window>();
  window->memory = exported->ownerBase;
  window->begin = reinterpret_cast<uintptr_t>(buff);
  window->bytes = bytes;
  window->flatOffset = offset + exported->offset;
  window->localHandle = localHandle;
  ncclWindow_vidmem& v = window->view;
  v.winHost = window.get();
  v.lsaFlatBase = flat_ + offset + exported->offset;
  v.lsaRank = lsaRank_;
  v.worldRank = rank_;
  v.stride4G = static_cast<uint32_t>(stride_ >> 32);
  void* device = nullptr;
  if (local.isOk()) {
    if (Result<void*> up = memory_->upload(&v, sizeof v); up.isOk()) device = *up;
    else local = up.status();
  }
  st = agree(local, "registering a window");
  if (!st.isOk()) {
    if (device != nullptr) memory_->freeUpload(device);
    unmapAll(&fresh);
    return st;
  }
  if (mine.isNew) {
    used_[offset] = extent;
    memories_[window->memory] = std::move(fresh);
  }
  ++memories_[window->memory].refs;
  byBegin_.emplace(window->begin, window.get());
  windows_.emplace(device, std::move(window));
  return device;
}

Status SymmetricSpace::deregisterWindow(void* window, void** localHandle) {
  auto it = windows_.find(window);
  if (it == windows_.end()) return invalidArgument("win is not a window registered on this communicator");
  *localHandle = it->second->localHandle;
  const uintptr_t key = it->second->memory;
  for (auto b = byBegin_.lower_bound(it->second->begin); b != byBegin_.end() && b->first == it->second->begin; ++b)
    if (b->second == it->second.get()) {
      byBegin_.erase(b);
      break;
    }
  memory_->freeUpload(window);
  windows_.erase(it);
  auto m = memories_.find(key);
  if (m != memories_.end() && --m->second.refs == 0) {
    unmapAll(&m->second);
    used_.erase(m->second.offset);
    memories_.erase(m);
  }
  return Status::ok();
}

std::optional<size_t> SymmetricSpace::flatOffset(const void* ptr, size_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  // Windows may nest or repeat a range: any one that holds it all will do.
  for (auto it = byBegin_.upper_bound(p); it != byBegin_.begin();) {
    --it;
    const Window& w = *it->second;
    if (p - w.begin <= w.bytes && bytes <= w.bytes - (p - w.begin)) return w.flatOffset + (p - w.begin);
  }
  return std::nullopt;
}

Status SymmetricSpace::createSignals() {
  if (signalOffset_) return Status::ok();
  if (!refusal_.empty()) return invalidUsage(refusal_);
  const size_t bytes = alignUp(symmetricSignalBytes(lsaSize_), kResourceUnit);
  PLAIT_ASSIGN_OR_RETURN(signals_, internalWindow(bytes, "the symmetric collectives' signals"));
  signalOffset_ = windows_.at(signals_.first)->flatOffset;
  return Status::ok();
}

Result<std::pair<void*, void*>> SymmetricSpace::internalWindow(size_t bytes, const char* what) {
  void* allocation = nullptr;
  Status local;
  if (Result<void*> a = memory_->allocateZeroed(bytes); a.isOk()) allocation = *a;
  else local = a.status();
  PLAIT_RETURN_IF_ERROR(agree(local, (std::string("allocating ") + what).c_str()));
  Result<void*> window = registerWindow(allocation, bytes, nullptr);
  if (!window.isOk()) {
    (void)memory_->release(allocation);
    return window.status();
  }
  return std::make_pair(*window, allocation);
}

Status SymmetricSpace::createDevComm(const ncclDevCommRequirements& reqs, ncclDevComm* out) {
  if (!refusal_.empty()) return invalidUsage(refusal_);
  if (reqs.lsaBarrierCount < 0 || reqs.barrierCount < 0)
    return invalidArgument("reqs asks for " + std::to_string(std::min(reqs.lsaBarrierCount, reqs.barrierCount)) +
                           " barriers");
  // The LSA barriers first, then each requested buffer at a multiple of 128 bytes.
  const int nBarriers = std::max(reqs.lsaBarrierCount, reqs.barrierCount);
  size_t bytes = alignUp((3 + static_cast<size_t>(lsaSize_)) * static_cast<size_t>(nBarriers) * sizeof(uint32_t),
                         kResourceUnit);
  std::vector<std::pair<ncclDevResourceHandle_t*, size_t>> handles;
  int listed = 0;
  for (ncclDevResourceRequirements* r = reqs.resourceRequirementsList; r != nullptr; r = r->next) {
    if (++listed > 4096) return invalidArgument("reqs->resourceRequirementsList has a cycle (or over 4096 entries)");
    const size_t align = std::max(kResourceUnit, r->bufferAlign);
    if ((align & (align - 1)) != 0)
      return invalidArgument("a resource requirement's bufferAlign (" + std::to_string(r->bufferAlign) +
                             ") is not a power of two");
    // Sizes and alignments are the caller's: a sum that wraps would hand out
    // offsets past the end of a small allocation.
    constexpr size_t kMaxBytes = size_t{1} << 40;
    if (align > kMaxBytes || r->bufferSize > kMaxBytes || bytes > kMaxBytes)
      return invalidArgument("a resource requirement asks for bufferSize " + std::to_string(r->bufferSize) +
                             " at bufferAlign " + std::to_string(r->bufferAlign) + " (" + std::to_string(bytes) +
                             " bytes before it): over 1 TiB");
    bytes = alignUp(bytes, align);
    handles.emplace_back(r->outBufferHandle, bytes / kResourceUnit);
    bytes += r->bufferSize;
  }
  if (bytes > (size_t{1} << 41))
    return invalidArgument("the resource requirements ask for " + std::to_string(bytes) + " bytes: over 2 TiB");
  bytes = alignUp(std::max(bytes, kResourceUnit), kResourceUnit);
  PLAIT_ASSIGN_OR_RETURN(auto made, internalWindow(bytes, "a device communicator's resources"));
  void* window = made.first;
  devComms_[window] = made.second;
  for (auto& [handle, unit] : handles)
    if (handle != nullptr) *handle = static_cast<ncclDevResourceHandle_t>(unit);
  std::memset(static_cast<void*>(out), 0, sizeof *out);
  out->rank = rank_;
  out->nRanks = nranks_;
  out->nRanks_rcp32 = reciprocal32(static_cast<uint32_t>(nranks_));
  out->lsaRank = lsaRank_;
  out->lsaSize = lsaSize_;
  out->lsaSize_rcp32 = reciprocal32(static_cast<uint32_t>(lsaSize_));
  out->windowTable = nullptr;  // ncclFindWindow: not provided (see docs/ARCHITECTURE.md)
  out->resourceWindow = static_cast<ncclWindow_t>(window);
  out->resourceWindow_inlined = windows_.at(window)->view;
  out->lsaMultimem.mcBasePtr = nullptr;
  out->lsaBarrier.bufHandle = 0;
  out->lsaBarrier.nBarriers = nBarriers;
  return Status::ok();
}

Status SymmetricSpace::destroyDevComm(const ncclDevComm& devComm) {
  auto it = devComms_.find(devComm.resourceWindow);
  if (it == devComms_.end())
    return invalidArgument("devComm was not created by ncclDevCommCreate on this communicator (or was destroyed)");
  void* localHandle = nullptr;
  PLAIT_RETURN_IF_ERROR(deregisterWindow(it->first, &localHandle));
  const Status s = memory_->release(it->second);
  devComms_.erase(it);
  return s;
}

}  // namespace plait
