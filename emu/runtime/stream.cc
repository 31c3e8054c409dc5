// stream.cc — streams, events and host functions.
//
// A stream is an in-order queue served by its own worker thread. The legacy
// default stream (a null handle) is one per device, created on first use and
// kept for the life of the process. Simplification, documented in the
// README: the legacy stream does not implicitly synchronise with other
// blocking streams as CUDA's does; Plait never relies on that.
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "internal.h"

namespace plait_emu {

struct Stream {
  int device = 0;
  unsigned flags = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  bool stopping = false;
  int pins = 0;  // drainDevice calls holding it (guarded by gStreamsMu): not deleted until 0
  std::thread worker;
  // While capturing (cudaStreamBeginCapture), work goes here instead of the
  // queue; cudaStreamEndCapture turns it into a graph.
  std::unique_ptr<std::vector<std::function<void()>>> capture;

  void serve() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and nothing left
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      work();
      work = nullptr;
      lock.lock();
      ++completed;
      cv.notify_all();
    }
  }
};

namespace {

std::mutex gStreamsMu;
std::condition_variable gUnpinned;  // a stream's pins fell (with gStreamsMu)
std::set<Stream*>* gLiveStreams = new std::set<Stream*>();  // leaked: used until exit
std::set<Stream*>& liveStreams() { return *gLiveStreams; }
void liveStreamsAfterFork() { gLiveStreams = new std::set<Stream*>(); }

Stream* newStream(int device, unsigned flags) {
  auto* s = new Stream;
  s->device = device;
  s->flags = flags;
  s->worker = std::thread([s] { s->serve(); });
  std::lock_guard<std::mutex> lock(gStreamsMu);
  liveStreams().insert(s);
  return s;
}

std::mutex gLegacyMu;
std::map<int, Stream*>* gLegacy = new std::map<int, Stream*>();  // never destroyed: workers run until exit

Stream* legacyStream(int device) {
  std::lock_guard<std::mutex> lock(gLegacyMu);
  Stream*& s = (*gLegacy)[device];
  if (s == nullptr) {
    s = newStream(device, cudaStreamDefault);
    s->worker.detach();
  }
  return s;
}

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  unsigned flags = 0;
  uint64_t recorded = 0;  // records so far
  uint64_t reached = 0;   // records whose point in the stream has passed
  int64_t timeNs = 0;     // when the last one was reached
};

std::mutex gEventsMu;
std::set<Event*>& liveEvents() {
  static auto* events = new std::set<Event*>();
  return *events;
}

Event* toEvent(cudaEvent_t e) {
  auto* ev = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(gEventsMu);
  return liveEvents().count(ev) ? ev : nullptr;
}

// A forked child has none of the parent's worker threads: it starts with
// no streams (its first use makes a fresh legacy stream), and with fresh
// locks in case another thread held one at the fork. The parent's Stream
// objects are leaked in the child. Events keep working (they are memory).
void startAfreshInChild() {
  new (&gStreamsMu) std::mutex;
  new (&gUnpinned) std::condition_variable;
  new (&gLegacyMu) std::mutex;
  new (&gEventsMu) std::mutex;
  liveStreamsAfterFork();
  gLegacy = new std::map<int, Stream*>();
}

const bool gAtForkInstalled = [] { return ::pthread_atfork(nullptr, nullptr, startAfreshInChild) == 0; }();

}  // namespace

bool isStream(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) return true;
  std::lock_guard<std::mutex> lock(gStreamsMu);
  return liveStreams().count(reinterpret_cast<Stream*>(handle)) != 0;
}

Stream* resolveStream(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread)
    return legacyStream(currentDevice());
  return reinterpret_cast<Stream*>(handle);
}

void enqueue(Stream* s, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture) {
    s->capture->push_back(std::move(work));
    return;
  }
  s->queue.push_back(std::move(work));
  ++s->enqueued;
  s->cv.notify_all();
}

void drain(Stream* s) {
  std::unique_lock<std::mutex> lock(s->mu);
  const uint64_t target = s->enqueued;
  s->cv.wait(lock, [&] { return s->completed >= target; });
}

// The device's streams are pinned while drained: another thread may
// destroy one meanwhile (a rank freeing memory while its peer tears down).
void drainDevice(int device) {
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(gStreamsMu);
    for (Stream* s : liveStreams())
      if (s->device == device) {
        ++s->pins;
        streams.push_back(s);
      }
  }
  for (Stream* s : streams) drain(s);
  std::lock_guard<std::mutex> lock(gStreamsMu);
  for (Stream* s : streams) --s->pins;
  gUnpinned.notify_all();
}

bool isCapturing(Stream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->capture != nullptr;
}

}  // namespace plait_emu

using namespace plait_emu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0)
    return fail(cudaErrorInvalidValue);
  *stream = reinterpret_cast<cudaStream_t>(newStream(currentDevice(), flags));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  return cudaStreamCreateWithFlags(stream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto* s = reinterpret_cast<Stream*>(stream);
  {
    std::lock_guard<std::mutex> lock(gStreamsMu);
    if (stream == nullptr || liveStreams().erase(s) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  // CUDA lets work already enqueued finish; the handle is gone at once.
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stopping = true;
    s->cv.notify_all();
  }
  s->worker.join();
  {
    std::unique_lock<std::mutex> lock(gStreamsMu);
    gUnpinned.wait(lock, [&] { return s->pins == 0; });  // a drainDevice still holds it
  }
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (isCapturing(resolveStream(stream))) return fail(cudaErrorStreamCaptureUnsupported);
  drain(resolveStream(stream));
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  Stream* s = resolveStream(stream);
  if (isCapturing(s)) return fail(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->completed == s->enqueued ? cudaSuccess : cudaErrorNotReady;  // not-ready is not a sticky error
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (!isStream(stream) || flags == nullptr) return fail(cudaErrorInvalidValue);
  *flags = resolveStream(stream)->flags;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!isStream(stream) || fn == nullptr) return fail(cudaErrorInvalidValue);
  enqueue(resolveStream(stream), [fn, userData] { fn(userData); });
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  drain(resolveStream(nullptr));
  drainDevice(currentDevice());
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  auto* e = new Event;
  e->flags = flags;
  {
    std::lock_guard<std::mutex> lock(gEventsMu);
    liveEvents().insert(e);
  }
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Event* e = toEvent(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(gEventsMu);
    liveEvents().erase(e);
  }
  // Work already enqueued may still reach it: keep the memory (events are small).
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Event* e = toEvent(event);
  if (e == nullptr || !isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (isCapturing(resolveStream(stream))) return fail(cudaErrorStreamCaptureUnsupported);  // not emulated
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    generation = ++e->recorded;
  }
  enqueue(resolveStream(stream), [e, generation] {
    std::lock_guard<std::mutex> lock(e->mu);
    if (generation > e->reached) {
      e->reached = generation;
      e->timeNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();  // wall time, not the emulated device clock
    }
    e->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Event* e = toEvent(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(e->mu);
  return e->reached >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Event* e = toEvent(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock<std::mutex> lock(e->mu);
  const uint64_t target = e->recorded;
  e->cv.wait(lock, [&] { return e->reached >= target; });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Event* e = toEvent(event);
  if (e == nullptr || !isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (isCapturing(resolveStream(stream))) return fail(cudaErrorStreamCaptureUnsupported);  // not emulated
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = e->recorded;
  }
  enqueue(resolveStream(stream), [e, target] {
    std::unique_lock<std::mutex> lock(e->mu);
    e->cv.wait(lock, [&] { return e->reached >= target; });
  });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Event* a = toEvent(start);
  Event* b = toEvent(end);
  if (ms == nullptr || a == nullptr || b == nullptr) return fail(cudaErrorInvalidValue);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) return fail(cudaErrorNotReady);
  if (a == b) {
    *ms = 0;
    return cudaSuccess;
  }
  std::scoped_lock lock(a->mu, b->mu);
  *ms = static_cast<float>(b->timeNs - a->timeNs) / 1e6f;
  return cudaSuccess;
}

// ---- graphs: stream capture and replay -------------------------------------
// A graph is the captured work in capture order; replaying it enqueues the
// same work (kernel arguments as copied at capture) on the launch stream.
// Not emulated: events recorded or waited on during capture (an error),
// graphs built node by node, updates of an instantiated graph.

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode) {
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return fail(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  Stream* s = resolveStream(stream);
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture) return fail(cudaErrorIllegalState);
  s->capture = std::make_unique<std::vector<std::function<void()>>>();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!isStream(stream) || pGraph == nullptr) return fail(cudaErrorInvalidValue);
  Stream* s = resolveStream(stream);
  std::lock_guard<std::mutex> lock(s->mu);
  if (!s->capture) return fail(cudaErrorIllegalState);
  *pGraph = reinterpret_cast<cudaGraph_t>(s->capture.release());
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  if (!isStream(stream) || status == nullptr) return fail(cudaErrorInvalidValue);
  *status = isCapturing(resolveStream(stream)) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return fail(cudaErrorInvalidValue);
  auto* nodes = reinterpret_cast<std::vector<std::function<void()>>*>(graph);
  *exec = reinterpret_cast<cudaGraphExec_t>(new std::vector<std::function<void()>>(*nodes));
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  if (!isStream(stream)) return fail(cudaErrorInvalidResourceHandle);
  for (const auto& work : *reinterpret_cast<std::vector<std::function<void()>>*>(exec))
    enqueue(resolveStream(stream), work);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<std::vector<std::function<void()>>*>(exec);  // work already enqueued holds copies
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<std::vector<std::function<void()>>*>(graph);
  return cudaSuccess;
}

}  // extern "C"
