#include "base/tls/openssl_api.h"

#include <dlfcn.h>

#include <mutex>

namespace plait::tls {
namespace {

struct Loaded {
  OpenSsl api{};
  bool ok = false;
  std::string why;
};

// Resolves `name` into *slot; false (with the reason in *why) if absent.
template <class Fn>
bool resolve(void* lib, const char* name, Fn* slot, std::string* why) {
  *slot = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (*slot != nullptr) return true;
  *why = std::string("OpenSSL has no ") + name;
  return false;
}

#define PLAIT_OSSL(lib, fn) resolve(lib, #fn, &api.fn, &l.why)

Loaded load() {
  Loaded l;
  // RTLD_LOCAL: Plait's copy never satisfies the application's own symbols.
  void* ssl = ::dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
  void* crypto = ssl ? ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (crypto == nullptr) {
    const char* e = ::dlerror();
    l.why = std::string("OpenSSL 3 could not be loaded (") + (e ? e : "libssl.so.3 / libcrypto.so.3 not found") +
            "); install Debian's libssl3";
    return l;
  }
  OpenSsl& api = l.api;
  l.ok = PLAIT_OSSL(ssl, TLS_method) && PLAIT_OSSL(ssl, SSL_CTX_new) && PLAIT_OSSL(ssl, SSL_CTX_free) &&
         PLAIT_OSSL(ssl, SSL_CTX_ctrl) && PLAIT_OSSL(ssl, SSL_CTX_set_options) &&
         PLAIT_OSSL(ssl, SSL_CTX_set_ciphersuites) && PLAIT_OSSL(ssl, SSL_CTX_set_num_tickets) &&
         PLAIT_OSSL(ssl, SSL_CTX_set_psk_use_session_callback) &&
         PLAIT_OSSL(ssl, SSL_CTX_set_psk_find_session_callback) && PLAIT_OSSL(ssl, SSL_CTX_set_ex_data) &&
         PLAIT_OSSL(ssl, SSL_CTX_get_ex_data) && PLAIT_OSSL(ssl, SSL_new) && PLAIT_OSSL(ssl, SSL_free) &&
         PLAIT_OSSL(ssl, SSL_get_SSL_CTX) && PLAIT_OSSL(ssl, SSL_set_bio) && PLAIT_OSSL(ssl, SSL_set_connect_state) &&
         PLAIT_OSSL(ssl, SSL_set_accept_state) && PLAIT_OSSL(ssl, SSL_read) && PLAIT_OSSL(ssl, SSL_write) &&
         PLAIT_OSSL(ssl, SSL_get_error) && PLAIT_OSSL(ssl, SSL_pending) && PLAIT_OSSL(ssl, SSL_shutdown) &&
         PLAIT_OSSL(ssl, SSL_is_init_finished) && PLAIT_OSSL(ssl, SSL_SESSION_new) &&
         PLAIT_OSSL(ssl, SSL_SESSION_free) && PLAIT_OSSL(ssl, SSL_SESSION_set1_master_key) &&
         PLAIT_OSSL(ssl, SSL_SESSION_set_cipher) && PLAIT_OSSL(ssl, SSL_SESSION_set_protocol_version) &&
         PLAIT_OSSL(ssl, SSL_CIPHER_find) && PLAIT_OSSL(crypto, ERR_get_error) &&
         PLAIT_OSSL(crypto, ERR_error_string_n) && PLAIT_OSSL(crypto, ERR_clear_error) &&
         PLAIT_OSSL(crypto, EVP_sha256) && PLAIT_OSSL(crypto, EVP_Digest) && PLAIT_OSSL(crypto, BIO_get_new_index) &&
         PLAIT_OSSL(crypto, BIO_meth_new) && PLAIT_OSSL(crypto, BIO_meth_set_write) &&
         PLAIT_OSSL(crypto, BIO_meth_set_read) && PLAIT_OSSL(crypto, BIO_meth_set_ctrl) &&
         PLAIT_OSSL(crypto, BIO_new) && PLAIT_OSSL(crypto, BIO_set_data) && PLAIT_OSSL(crypto, BIO_get_data) &&
         PLAIT_OSSL(crypto, BIO_set_init) && PLAIT_OSSL(crypto, BIO_set_flags) &&
         PLAIT_OSSL(crypto, BIO_clear_flags);
  // The libraries stay loaded for the life of the process: sessions may
  // outlive any one communicator.
  return l;
}

#undef PLAIT_OSSL

}  // namespace

const OpenSsl* openSsl(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

std::string takeErrors(const OpenSsl& api, const std::string& fallback) {
  std::string out;
  while (unsigned long e = api.ERR_get_error()) {
    char buf[256];
    api.ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? fallback : out;
}

}  // namespace plait::tls
