// greeting_gate.h — accept connections and read each one's fixed-size
// greeting, many connections at once.
//
// A server that reads a new connection's first bytes before it accepts the
// next lets one silent client hold every real client back for the whole
// greeting timeout (a slow-loris: a hundred idle connections would stall a
// job's rendezvous past its deadline). The gate polls the listener and every
// connection whose greeting is still incomplete together; each connection has
// its own greeting deadline and is dropped when it passes, or when the peer
// closes, without delaying anyone else. Pending connections are bounded: when
// the bound is reached the oldest is dropped to make room.
//
// Used by one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"

namespace plait::net {

class GreetingGate {
 public:
  struct Greeted {
    Socket socket;
    std::vector<char> greeting;  // exactly greetingBytes
  };

  // `who` names the server in log lines ("bootstrap root", "rank 3").
  GreetingGate(std::string who, size_t greetingBytes, int64_t perConnectionMs, size_t maxPending = 1024);

  // Waits until some connection on `listener` has sent its whole greeting and
  // returns it (connections that complete together come back on successive
  // calls). Fails with kRemoteError at the deadline or when *abortFlag is set,
  // kSystemError if poll() itself fails.
  Result<Greeted> next(Socket& listener, Deadline deadline, const std::atomic<uint32_t>* abortFlag);

  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    Socket socket;
    std::vector<char> buffer;
    size_t received = 0;
    Deadline until = Deadline::afterMs(0);
  };

  void acceptAll(Socket& listener);
  void dropExpired();
  int pollTimeoutMs(Deadline deadline) const;

  std::string who_;
  size_t greetingBytes_;
  int64_t perConnectionMs_;
  size_t maxPending_;
  std::deque<Pending> pending_;
};

// A GreetingGate driven by a thread of its own, for a listener whose clients
// must not wait for its owner: with encryption on (base/tls/tls.h) a client's
// first send blocks until the server answers the TLS handshake, so a rank
// blocked elsewhere would stall every peer connecting to it. Greeted
// connections queue (bounded) until next() takes them. The thread owns the
// listener's accept side from construction until stop().
class GreetingThread {
 public:
  GreetingThread(std::string who, Socket& listener, size_t greetingBytes, int64_t perConnectionMs,
                 size_t maxQueued = 1024);
  ~GreetingThread() { stop(); }
  GreetingThread(const GreetingThread&) = delete;
  GreetingThread& operator=(const GreetingThread&) = delete;

  // As GreetingGate::next, from the queue.
  Result<GreetingGate::Greeted> next(Deadline deadline, const std::atomic<uint32_t>* abortFlag);
  // Ends the thread (within one poll slice) and waits for it. Idempotent;
  // any thread.
  void stop();

 private:
  void run();

  std::string who_;
  Socket& listener_;
  GreetingGate gate_;
  size_t maxQueued_;
  std::atomic<uint32_t> stop_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GreetingGate::Greeted> ready_;
  std::mutex joinMu_;
  std::thread thread_;
};

}  // namespace plait::net
