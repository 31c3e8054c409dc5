#include "base/tls/tls.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "base/config.h"
#include "base/log.h"
#include "base/tls/openssl_api.h"

namespace plait::tls {

PLAIT_PARAM_SECRET(kEncryptionPsk, "ENCRYPTION_PSK",
                   "pre-shared key: when set (and the program does not call ncclSetEncryption), Plait's TCP "
                   "connections are TLS 1.3 sessions keyed by it");

namespace {

constexpr size_t kMaxPskBytes = 4096;
constexpr size_t kKeyBytes = 32;  // SHA-256
// Both sides present and expect this identity; the key does the authenticating.
constexpr unsigned char kIdentity[] = "plait-psk-v1";
constexpr size_t kIdentityBytes = sizeof kIdentity - 1;
// TLS_AES_128_GCM_SHA256 (RFC 8446 B.4): AES-NI makes it the cheapest suite.
constexpr unsigned char kCipherId[2] = {0x13, 0x01};
constexpr const char* kCipherName = "TLS_AES_128_GCM_SHA256";
constexpr const char* kKeyHint =
    "both sides must turn encryption on (ncclSetEncryption or NCCL_ENCRYPTION_PSK) with the same key";

const OpenSsl* gApi = nullptr;  // set before the first context exists; never changes after
thread_local int tLastErrno = 0;  // the OS error behind the last SSL_ERROR_SYSCALL

int bioWrite(OsslBio* b, const char* data, int len) {
  gApi->BIO_clear_flags(b, ossl::kBioFlagsRws | ossl::kBioFlagsShouldRetry);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(gApi->BIO_get_data(b)));
  for (;;) {
    ssize_t n = ::send(fd, data, static_cast<size_t>(len), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      gApi->BIO_set_flags(b, ossl::kBioFlagsWrite | ossl::kBioFlagsShouldRetry);
    } else {
      tLastErrno = errno;
    }
    return -1;
  }
}

int bioRead(OsslBio* b, char* data, int len) {
  gApi->BIO_clear_flags(b, ossl::kBioFlagsRws | ossl::kBioFlagsShouldRetry);
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(gApi->BIO_get_data(b)));
  for (;;) {
    ssize_t n = ::recv(fd, data, static_cast<size_t>(len), MSG_DONTWAIT);
    if (n >= 0) return static_cast<int>(n);  // 0: the peer closed
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      gApi->BIO_set_flags(b, ossl::kBioFlagsRead | ossl::kBioFlagsShouldRetry);
    } else {
      tLastErrno = errno;
    }
    return -1;
  }
}

long bioCtrl(OsslBio*, int cmd, long, void*) { return cmd == ossl::kBioCtrlFlush ? 1 : 0; }

// A BIO over a non-blocking socket that never raises SIGPIPE (OpenSSL's own
// socket BIO writes with write(2)).
const OsslBioMethod* bioMethod() {
  static const OsslBioMethod* method = [] {
    OsslBioMethod* m = gApi->BIO_meth_new(gApi->BIO_get_new_index() | ossl::kBioTypeSourceSink, "plait-socket");
    if (m != nullptr) {
      gApi->BIO_meth_set_write(m, bioWrite);
      gApi->BIO_meth_set_read(m, bioRead);
      gApi->BIO_meth_set_ctrl(m, bioCtrl);
    }
    return m;
  }();
  return method;
}

}  // namespace

// The process's encryption setting: an SSL_CTX and the derived key.
class Context {
 public:
  Context(const OpenSsl& api, OsslCtx* ctx, const unsigned char* key) : api_(api), ctx_(ctx) {
    std::memcpy(key_, key, kKeyBytes);
  }
  ~Context() {
    api_.SSL_CTX_free(ctx_);
    std::fill(std::begin(key_), std::end(key_), 0);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const OpenSsl& api() const { return api_; }
  OsslCtx* raw() const { return ctx_; }

  // A resumption-style session carrying the external PSK (what TLS 1.3 PSK
  // callbacks hand OpenSSL; it takes ownership).
  OsslSession* pskSession(OsslSsl* ssl) const {
    const OsslCipher* cipher = api_.SSL_CIPHER_find(ssl, kCipherId);
    OsslSession* s = cipher ? api_.SSL_SESSION_new() : nullptr;
    if (s == nullptr) return nullptr;
    if (api_.SSL_SESSION_set1_master_key(s, key_, kKeyBytes) != 1 || api_.SSL_SESSION_set_cipher(s, cipher) != 1 ||
        api_.SSL_SESSION_set_protocol_version(s, ossl::kTls13Version) != 1) {
      api_.SSL_SESSION_free(s);
      return nullptr;
    }
    return s;
  }

  static const Context* of(OsslSsl* ssl) {
    return static_cast<const Context*>(gApi->SSL_CTX_get_ex_data(gApi->SSL_get_SSL_CTX(ssl), 0));
  }

 private:
  const OpenSsl& api_;
  OsslCtx* ctx_;
  unsigned char key_[kKeyBytes];
};

namespace {

int useSession(OsslSsl* ssl, const OsslMd*, const unsigned char** id, size_t* idLen, OsslSession** sess) {
  *sess = Context::of(ssl)->pskSession(ssl);
  if (*sess == nullptr) return 0;
  *id = kIdentity;
  *idLen = kIdentityBytes;
  return 1;
}

int findSession(OsslSsl* ssl, const unsigned char* id, size_t idLen, OsslSession** sess) {
  *sess = nullptr;
  if (idLen != kIdentityBytes || std::memcmp(id, kIdentity, kIdentityBytes) != 0) return 1;  // not ours: no PSK
  *sess = Context::of(ssl)->pskSession(ssl);
  return *sess != nullptr ? 1 : 0;
}

Result<std::shared_ptr<const Context>> makeContext(std::string_view psk) {
  if (psk.empty()) return invalidArgument("the encryption key (psk) is empty");
  if (psk.size() > kMaxPskBytes)
    return invalidArgument("the encryption key (psk) has " + std::to_string(psk.size()) + " bytes, more than " +
                           std::to_string(kMaxPskBytes));
  std::string why;
  const OpenSsl* api = openSsl(&why);
  if (api == nullptr) return Status(Code::kSystemError, "encryption needs TLS: " + why);
  gApi = api;
  // Key = SHA-256(label || psk): fixed length whatever the text, and tied to
  // Plait's use so the same passphrase elsewhere yields another key.
  std::string material = "plait tls psk v1:" + std::string(psk);
  unsigned char key[kKeyBytes];
  unsigned int keyLen = 0;
  const bool digested = api->EVP_Digest(material.data(), material.size(), key, &keyLen, api->EVP_sha256(), nullptr) == 1;
  std::fill(material.begin(), material.end(), '\0');
  if (!digested || keyLen != kKeyBytes) return internalError(takeErrors(*api, "SHA-256 of the encryption key failed"));
  OsslCtx* ctx = api->SSL_CTX_new(api->TLS_method());
  if (ctx == nullptr || bioMethod() == nullptr)
    return internalError(takeErrors(*api, "creating the TLS context failed"));
  auto context = std::make_shared<const Context>(*api, ctx, key);
  std::fill(std::begin(key), std::end(key), 0);
  bool ok = api->SSL_CTX_ctrl(ctx, ossl::kCtrlSetMinProto, ossl::kTls13Version, nullptr) == 1 &&
            api->SSL_CTX_ctrl(ctx, ossl::kCtrlSetMaxProto, ossl::kTls13Version, nullptr) == 1 &&
            api->SSL_CTX_set_ciphersuites(ctx, kCipherName) == 1 && api->SSL_CTX_set_num_tickets(ctx, 0) == 1 &&
            api->SSL_CTX_set_ex_data(ctx, 0, const_cast<Context*>(context.get())) == 1;
  if (!ok) return internalError(takeErrors(*api, "configuring the TLS context failed"));
  api->SSL_CTX_set_options(ctx, ossl::kOpIgnoreUnexpectedEof | ossl::kOpNoTicket);
  api->SSL_CTX_ctrl(ctx, ossl::kCtrlMode, ossl::kModePartialWrite | ossl::kModeMovingBuffer, nullptr);
  api->SSL_CTX_set_psk_use_session_callback(ctx, useSession);
  api->SSL_CTX_set_psk_find_session_callback(ctx, findSession);
  return context;
}

std::mutex gMu;
std::shared_ptr<const Context> gCurrent;
bool gSettled = false;  // set by the API or by the first current() (environment)
std::string gBroken;    // the environment's key could not be used: no connection may open

// A process that forks while another of its threads holds gMu (the
// bootstrap root's thread asks current() for every connection it accepts)
// would give the child a mutex locked forever: a rank forked after
// ncclGetUniqueId hung in its first connection (test_shm_kill_init, about 1
// run in 10). fork() takes gMu first, so the child's copy is unlocked.
const int kForkSafe = pthread_atfork([] { gMu.lock(); }, [] { gMu.unlock(); }, [] { gMu.unlock(); });

}  // namespace

Status enablePsk(std::string_view psk) {
  PLAIT_ASSIGN_OR_RETURN(std::shared_ptr<const Context> ctx, makeContext(psk));
  std::lock_guard<std::mutex> lock(gMu);
  gCurrent = std::move(ctx);
  gSettled = true;
  gBroken.clear();
  PLAIT_INFO(kNet, "encryption on: TLS 1.3, pre-shared key, %s, for TCP connections opened from now on", kCipherName);
  return Status::ok();
}

void disable() {
  std::lock_guard<std::mutex> lock(gMu);
  gCurrent.reset();
  gSettled = true;
  gBroken.clear();
}

Result<std::shared_ptr<const Context>> current() {
  std::lock_guard<std::mutex> lock(gMu);
  if (!gSettled) {
    gSettled = true;
    const std::string& psk = kEncryptionPsk.get();
    if (!psk.empty()) {
      auto ctx = makeContext(psk);
      if (ctx.isOk()) {
        gCurrent = std::move(ctx.value());
        PLAIT_INFO(kNet, "encryption on (NCCL_ENCRYPTION_PSK): TLS 1.3, pre-shared key, %s", kCipherName);
      } else {
        // Falling back to plaintext would betray the user: connections fail instead.
        gBroken = "NCCL_ENCRYPTION_PSK is set but cannot be used: " + ctx.status().message();
        PLAIT_WARN(kNet, "%s", gBroken.c_str());
      }
    }
  }
  if (!gBroken.empty()) return Status(Code::kSystemError, gBroken);
  return gCurrent;
}

Result<std::unique_ptr<Session>> openIfEnabled(int fd, const std::string& peer, bool server) {
  PLAIT_ASSIGN_OR_RETURN(std::shared_ptr<const Context> ctx, current());
  if (ctx == nullptr) return std::unique_ptr<Session>();
  return Session::open(std::move(ctx), fd, peer, server);
}

Counters& counters() {
  static Counters c;
  return c;
}

// ---- Session ---------------------------------------------------------------------

Result<std::unique_ptr<Session>> Session::open(std::shared_ptr<const Context> ctx, int fd, std::string peer,
                                               bool server) {
  const OpenSsl& api = ctx->api();
  std::unique_ptr<Session> s(new Session());
  s->keep_ = std::move(ctx);
  s->peer_ = std::move(peer);
  s->ssl_ = api.SSL_new(s->keep_->raw());
  OsslBio* bio = s->ssl_ ? api.BIO_new(bioMethod()) : nullptr;
  if (bio == nullptr) return internalError(takeErrors(api, "creating a TLS session for " + s->peer_ + " failed"));
  api.BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  api.BIO_set_init(bio, 1);
  api.SSL_set_bio(s->ssl_, bio, bio);  // one reference, owned by the SSL from now on
  if (server) api.SSL_set_accept_state(s->ssl_);
  else api.SSL_set_connect_state(s->ssl_);
  counters().sessions.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Session::~Session() {
  if (ssl_ == nullptr) return;
  const OpenSsl& api = keep_->api();
  // Best effort close_notify; a peer that is gone is not waited for.
  if (failure_.empty() && handshakeDone()) api.SSL_shutdown(ssl_);
  api.SSL_free(ssl_);
  api.ERR_clear_error();
}

bool Session::handshakeDone() const { return keep_->api().SSL_is_init_finished(ssl_) == 1; }

void Session::noteProgress() {
  if (!countedHandshake_ && handshakeDone()) {
    countedHandshake_ = true;
    counters().handshakes.fetch_add(1, std::memory_order_relaxed);
  }
}

ssize_t Session::fail(int rc, bool sending) {
  const OpenSsl& api = keep_->api();
  const bool inHandshake = !handshakeDone();
  const int e = api.SSL_get_error(ssl_, rc);
  if (e == ossl::kErrorWantRead || e == ossl::kErrorWantWrite) {
    wantEvents_ = e == ossl::kErrorWantRead ? POLLIN : POLLOUT;
    errno = EAGAIN;
    return -1;
  }
  int sysErr = 0;
  if (e == ossl::kErrorSyscall) std::swap(sysErr, tLastErrno);
  const bool closed = e == ossl::kErrorZeroReturn || (e == ossl::kErrorSyscall && sysErr == 0);
  if (closed && !inHandshake) {
    api.ERR_clear_error();
    if (!sending) return 0;
    errno = EPIPE;
    return -1;
  }
  if (sysErr != 0 && !inHandshake) {
    api.ERR_clear_error();
    errno = sysErr;
    return -1;
  }
  if (inHandshake) {
    std::string what = closed    ? "the peer closed the connection"
                       : sysErr ? std::string(std::strerror(sysErr))
                                : takeErrors(api, "TLS error " + std::to_string(e));
    failure_ = "TLS handshake with " + peer_ + " failed (" + what + "): " + kKeyHint;
  } else {
    failure_ = "TLS record from " + peer_ + " rejected (" + takeErrors(api, "TLS error " + std::to_string(e)) +
               "): the data was corrupted or forged on the way";
  }
  api.ERR_clear_error();
  errno = EPROTO;
  return -1;
}

ssize_t Session::send(const void* data, size_t bytes) {
  if (!failure_.empty()) { errno = EPROTO; return -1; }
  if (bytes == 0) return 0;
  const int n = static_cast<int>(std::min<size_t>(bytes, 1u << 30));
  const int rc = keep_->api().SSL_write(ssl_, data, n);
  if (rc <= 0) return fail(rc, true);
  counters().sealedBytes.fetch_add(static_cast<uint64_t>(rc), std::memory_order_relaxed);
  noteProgress();
  return rc;
}

ssize_t Session::recv(void* data, size_t bytes) {
  if (!failure_.empty()) { errno = EPROTO; return -1; }
  if (bytes == 0) return 0;
  const int n = static_cast<int>(std::min<size_t>(bytes, 1u << 30));
  const int rc = keep_->api().SSL_read(ssl_, data, n);
  if (rc <= 0) return fail(rc, false);
  counters().openedBytes.fetch_add(static_cast<uint64_t>(rc), std::memory_order_relaxed);
  noteProgress();
  return rc;
}

namespace {

// Moves the pieces of an iovec in order through `io` (send or recv), like
// sendmsg/recvmsg: what moved before a would-block or failure, else its result.
template <class Io>
ssize_t eachPiece(const iovec* iov, int n, Io io) {
  ssize_t total = 0;
  for (int i = 0; i < n; ++i) {
    size_t done = 0;
    while (done < iov[i].iov_len) {
      ssize_t rc = io(static_cast<char*>(iov[i].iov_base) + done, iov[i].iov_len - done);
      if (rc <= 0) return total > 0 ? total : rc;
      done += static_cast<size_t>(rc);
      total += rc;
    }
  }
  return total;
}

}  // namespace

ssize_t Session::sendv(const iovec* iov, int n) {
  return eachPiece(iov, n, [this](char* p, size_t bytes) { return send(p, bytes); });
}

ssize_t Session::recvv(const iovec* iov, int n) {
  return eachPiece(iov, n, [this](char* p, size_t bytes) { return recv(p, bytes); });
}

}  // namespace plait::tls
