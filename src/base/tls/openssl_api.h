// openssl_api.h — the few OpenSSL 3 functions Plait's TLS uses, found at run
// time.
//
// Plait does not link against OpenSSL: libnccl.so.2 must load on a machine
// without it, and encryption is off unless asked for (ncclSetEncryption).
// The first caller of openSsl() dlopens libssl.so.3 and libcrypto.so.3 and
// resolves every symbol below; a missing library or symbol is reported once,
// with dlerror()'s text, and encryption then stays unavailable.
//
// The types are opaque and the constants are OpenSSL 3.0's stable ABI values
// (ssl.h, bio.h, prov_ssl.h), so no OpenSSL headers are needed to build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace plait::tls {

struct OsslSsl;
struct OsslCtx;
struct OsslMethod;
struct OsslSession;
struct OsslCipher;
struct OsslMd;
struct OsslBio;
struct OsslBioMethod;

namespace ossl {
constexpr int kErrorSsl = 1;
constexpr int kErrorWantRead = 2;
constexpr int kErrorWantWrite = 3;
constexpr int kErrorSyscall = 5;
constexpr int kErrorZeroReturn = 6;
constexpr int kTls13Version = 0x0304;
constexpr int kCtrlMode = 33;
constexpr int kCtrlSetMinProto = 123;
constexpr int kCtrlSetMaxProto = 124;
constexpr long kModePartialWrite = 0x1;
constexpr long kModeMovingBuffer = 0x2;
constexpr uint64_t kOpIgnoreUnexpectedEof = uint64_t{1} << 7;
constexpr uint64_t kOpNoTicket = uint64_t{1} << 14;
constexpr int kBioFlagsRead = 0x01;
constexpr int kBioFlagsWrite = 0x02;
constexpr int kBioFlagsRws = 0x07;
constexpr int kBioFlagsShouldRetry = 0x08;
constexpr int kBioTypeSourceSink = 0x0400;
constexpr int kBioCtrlFlush = 11;
}  // namespace ossl

using PskUseSessionCb = int (*)(OsslSsl*, const OsslMd*, const unsigned char**, size_t*, OsslSession**);
using PskFindSessionCb = int (*)(OsslSsl*, const unsigned char*, size_t, OsslSession**);

struct OpenSsl {
  // libssl
  const OsslMethod* (*TLS_method)();
  OsslCtx* (*SSL_CTX_new)(const OsslMethod*);
  void (*SSL_CTX_free)(OsslCtx*);
  long (*SSL_CTX_ctrl)(OsslCtx*, int, long, void*);
  uint64_t (*SSL_CTX_set_options)(OsslCtx*, uint64_t);
  int (*SSL_CTX_set_ciphersuites)(OsslCtx*, const char*);
  int (*SSL_CTX_set_num_tickets)(OsslCtx*, size_t);
  void (*SSL_CTX_set_psk_use_session_callback)(OsslCtx*, PskUseSessionCb);
  void (*SSL_CTX_set_psk_find_session_callback)(OsslCtx*, PskFindSessionCb);
  int (*SSL_CTX_set_ex_data)(OsslCtx*, int, void*);
  void* (*SSL_CTX_get_ex_data)(const OsslCtx*, int);
  OsslSsl* (*SSL_new)(OsslCtx*);
  void (*SSL_free)(OsslSsl*);
  OsslCtx* (*SSL_get_SSL_CTX)(const OsslSsl*);
  void (*SSL_set_bio)(OsslSsl*, OsslBio*, OsslBio*);
  void (*SSL_set_connect_state)(OsslSsl*);
  void (*SSL_set_accept_state)(OsslSsl*);
  int (*SSL_read)(OsslSsl*, void*, int);
  int (*SSL_write)(OsslSsl*, const void*, int);
  int (*SSL_get_error)(const OsslSsl*, int);
  int (*SSL_pending)(const OsslSsl*);
  int (*SSL_shutdown)(OsslSsl*);
  int (*SSL_is_init_finished)(const OsslSsl*);
  OsslSession* (*SSL_SESSION_new)();
  void (*SSL_SESSION_free)(OsslSession*);
  int (*SSL_SESSION_set1_master_key)(OsslSession*, const unsigned char*, size_t);
  int (*SSL_SESSION_set_cipher)(OsslSession*, const OsslCipher*);
  int (*SSL_SESSION_set_protocol_version)(OsslSession*, int);
  const OsslCipher* (*SSL_CIPHER_find)(OsslSsl*, const unsigned char*);
  // libcrypto
  unsigned long (*ERR_get_error)();
  void (*ERR_error_string_n)(unsigned long, char*, size_t);
  void (*ERR_clear_error)();
  const OsslMd* (*EVP_sha256)();
  int (*EVP_Digest)(const void*, size_t, unsigned char*, unsigned int*, const OsslMd*, void*);
  int (*BIO_get_new_index)();
  OsslBioMethod* (*BIO_meth_new)(int, const char*);
  int (*BIO_meth_set_write)(OsslBioMethod*, int (*)(OsslBio*, const char*, int));
  int (*BIO_meth_set_read)(OsslBioMethod*, int (*)(OsslBio*, char*, int));
  int (*BIO_meth_set_ctrl)(OsslBioMethod*, long (*)(OsslBio*, int, long, void*));
  OsslBio* (*BIO_new)(const OsslBioMethod*);
  void (*BIO_set_data)(OsslBio*, void*);
  void* (*BIO_get_data)(OsslBio*);
  void (*BIO_set_init)(OsslBio*, int);
  void (*BIO_set_flags)(OsslBio*, int);
  void (*BIO_clear_flags)(OsslBio*, int);
};

// The loaded library, or null with *why saying what was missing.
const OpenSsl* openSsl(std::string* why);

// The queued OpenSSL errors as one line (and clears the queue); `fallback`
// when the queue is empty.
std::string takeErrors(const OpenSsl& api, const std::string& fallback);

}  // namespace plait::tls
