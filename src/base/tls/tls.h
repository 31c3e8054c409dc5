// tls.h — TLS 1.3 with a pre-shared key over Plait's TCP sockets
// (ncclSetEncryption, NCCL 2.32).
//
// Encryption is a process-wide setting: ncclSetEncryption(PSK) (or the
// environment, PLAIT_ENCRYPTION_PSK / NCCL_ENCRYPTION_PSK, when the program
// never calls it) makes every TCP connection Plait opens from then on — the
// bootstrap's and the socket transport's — a TLS 1.3 session authenticated
// by the key: external PSK with an ephemeral (EC)DHE exchange (psk_dhe_ke),
// cipher TLS_AES_128_GCM_SHA256, no certificates, no session tickets. A peer
// holding another key, or none, fails the handshake; both sides' errors say
// so. Connections opened before the call keep what they had; since a
// communicator opens some connections lazily (bootstrap peers, split
// children), set it before creating communicators, the same on every rank.
// Other transports
// (shared memory, CUDA IPC, UCX, verbs) are outside this boundary, as in NCCL.
//
// The TLS library is OpenSSL 3, loaded at run time (openssl_api.h).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "plait/status.hpp"

namespace plait::tls {

class Context;
struct OsslSsl;

// Turns encryption on with `psk` (any bytes, 1 to 4096 of them; the TLS key
// is SHA-256 of a Plait label and the PSK, so both sides need the same
// text). Fails with kSystemError when OpenSSL 3 cannot be loaded and
// kInvalidArgument for an empty or oversized key; the setting is unchanged
// then.
Status enablePsk(std::string_view psk);
// Turns encryption off for connections opened from now on.
void disable();
// The setting new connections use: null when encryption is off. The first
// call with nothing set reads PLAIT_ENCRYPTION_PSK / NCCL_ENCRYPTION_PSK; a
// key there that cannot be used (no OpenSSL) is an error for every
// connection, never a fallback to plaintext.
Result<std::shared_ptr<const Context>> current();

class Session;
// A session over the connected socket `fd` when encryption is on now; null
// when it is off. What base/socket.h and the socket transport call.
Result<std::unique_ptr<Session>> openIfEnabled(int fd, const std::string& peer, bool server);

// Process-wide counters, for tests and logs.
struct Counters {
  std::atomic<uint64_t> sessions{0};     // TLS sessions created
  std::atomic<uint64_t> handshakes{0};   // completed handshakes
  std::atomic<uint64_t> sealedBytes{0};  // plaintext bytes sent encrypted
  std::atomic<uint64_t> openedBytes{0};  // plaintext bytes received decrypted
};
Counters& counters();

// One TLS session over a connected, non-blocking TCP socket it does not own.
// send/recv behave like ::send(MSG_NOSIGNAL | MSG_DONTWAIT) and ::recv on
// such a socket — bytes moved, 0 from recv when the peer closed, -1 with
// errno EAGAIN when it would block — so callers keep their loops; the
// handshake runs inside the first calls. A TLS failure is -1 with errno
// EPROTO and failure() saying what happened. Used by one thread at a time.
class Session {
 public:
  // `peer` names the other side in errors ("10.0.0.2:41000").
  static Result<std::unique_ptr<Session>> open(std::shared_ptr<const Context> ctx, int fd, std::string peer,
                                               bool server);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  ssize_t send(const void* data, size_t bytes);
  ssize_t sendv(const iovec* iov, int n);
  ssize_t recv(void* data, size_t bytes);
  ssize_t recvv(const iovec* iov, int n);

  // What the last EAGAIN waits for: POLLIN or POLLOUT (a send may wait for
  // the peer's handshake messages, a recv for room to answer them).
  short waitEvents() const { return wantEvents_; }
  // Why the last -1 with EPROTO happened, naming the peer.
  const std::string& failure() const { return failure_; }
  bool handshakeDone() const;

 private:
  Session() = default;
  ssize_t fail(int rc, bool sending);
  void noteProgress();

  OsslSsl* ssl_ = nullptr;
  std::shared_ptr<const Context> keep_;
  std::string peer_;
  std::string failure_;
  short wantEvents_ = 0;
  bool countedHandshake_ = false;
};

}  // namespace plait::tls
