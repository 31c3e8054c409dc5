/* fake_resolver.c — getaddrinfo / freeaddrinfo for the fuzz targets.
 *
 * SocketAddress::parse (NCCL_COMM_ID, ids) hands names it cannot read as
 * numbers to getaddrinfo. A fuzzer must not send DNS queries (slow, flaky,
 * and nobody's business), so the executables define the resolver: two
 * names resolve, every other is unknown. Being in the executable, these
 * definitions win over libc's (and over ASan's interceptor, a weak alias).
 *   "v4.fuzz"  127.0.0.1
 *   "v6.fuzz"  ::1 then 127.0.0.2 (the caller prefers IPv4)
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static struct addrinfo* entry(int family, const char* text, struct addrinfo* next) {
  struct addrinfo* ai = calloc(1, sizeof(*ai));
  if (ai == NULL) return next;
  if (family == AF_INET) {
    struct sockaddr_in* sa = calloc(1, sizeof(*sa));
    sa->sin_family = AF_INET;
    inet_pton(AF_INET, text, &sa->sin_addr);
    ai->ai_addr = (struct sockaddr*)sa;
    ai->ai_addrlen = sizeof(*sa);
  } else {
    struct sockaddr_in6* sa = calloc(1, sizeof(*sa));
    sa->sin6_family = AF_INET6;
    inet_pton(AF_INET6, text, &sa->sin6_addr);
    ai->ai_addr = (struct sockaddr*)sa;
    ai->ai_addrlen = sizeof(*sa);
  }
  ai->ai_family = family;
  ai->ai_socktype = SOCK_STREAM;
  ai->ai_next = next;
  return ai;
}

int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints, struct addrinfo** res) {
  (void)service;
  (void)hints;
  *res = NULL;
  if (node == NULL) return EAI_NONAME;
  if (strcmp(node, "v4.fuzz") == 0) {
    *res = entry(AF_INET, "127.0.0.1", NULL);
  } else if (strcmp(node, "v6.fuzz") == 0) {
    *res = entry(AF_INET6, "::1", entry(AF_INET, "127.0.0.2", NULL));
  } else {
    return EAI_NONAME;
  }
  return *res == NULL ? EAI_MEMORY : 0;
}

void freeaddrinfo(struct addrinfo* ai) {
  while (ai != NULL) {
    struct addrinfo* next = ai->ai_next;
    free(ai->ai_addr);
    free(ai);
    ai = next;
  }
}
