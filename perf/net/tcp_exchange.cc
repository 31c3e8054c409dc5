// perf/net/tcp_exchange.cc — the ceiling of a 2-rank AllReduce over TCP on
// this machine: two processes that each send S bytes to the other and
// receive S from it at once, over K connections, nothing else. With -F 1
// the bytes to send are written again before each exchange, as a
// collective's are (its reduction or its caller wrote them); with -F 0 they
// are not, as iperf3's are not (one buffer sent again and again). With -R 1
// each iteration is the least an AllReduce of S bytes of floats does at 2
// ranks: exchange the halves the other rank owns (S/2 each way), add the
// received half into one's own, exchange the sums (S/2 each way) — the same
// bytes on the wire, plus the one pass of arithmetic no AllReduce avoids.
//
//   tcp_exchange -r 0|1 -a ADDR -p PORT [-k streams] [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-F 0|1]
//                [-R 0|1]
//
// Rank 0 listens on ADDR:PORT, rank 1 connects (retrying for 30 s). Each
// connection carries S/K of each exchange both ways. Per size the row is S,
// the mean time of one exchange and busbw = S / time, which is a 2-rank
// AllReduce's busbw for the same S (nccl-tests: algbw * 2(n-1)/n).
// #wrong counts received bytes that differ from what the peer wrote.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Options {
  int rank = -1;
  std::string addr = "127.0.0.1";
  int port = 0;
  int streams = 2;  // Plait's default: 2 channels of one socket each
  size_t minBytes = 64 << 10, maxBytes = 256 << 20;
  double factor = 4;
  int iters = 20, warmup = 3;
  bool fresh = true;
  bool reduce = false;
};

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

bool parseArgs(int argc, char** argv, Options* o) {
  int c;
  while ((c = getopt(argc, argv, "r:a:p:k:b:e:f:n:w:F:R:")) != -1) {
    switch (c) {
      case 'r': o->rank = std::atoi(optarg); break;
      case 'a': o->addr = optarg; break;
      case 'p': o->port = std::atoi(optarg); break;
      case 'k': o->streams = std::atoi(optarg); break;
      case 'b': o->minBytes = parseBytes(optarg); break;
      case 'e': o->maxBytes = parseBytes(optarg); break;
      case 'f': o->factor = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::atoi(optarg); break;
      case 'w': o->warmup = std::atoi(optarg); break;
      case 'F': o->fresh = std::atoi(optarg) != 0; break;
      case 'R': o->reduce = std::atoi(optarg) != 0; break;
      default: return false;
    }
  }
  return (o->rank == 0 || o->rank == 1) && o->port > 0 && o->streams >= 1 && o->streams <= 64 &&
         o->minBytes >= static_cast<size_t>(o->streams) && o->minBytes <= o->maxBytes && o->factor > 1 &&
         o->iters >= 1 && o->warmup >= 0 && (!o->reduce || o->minBytes >= 8 * static_cast<size_t>(o->streams));
}

bool setup(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0 &&
         fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0;
}

// Rank 0 accepts `streams` connections, rank 1 makes them; -1 on failure.
std::vector<int> connectAll(const Options& o) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(o.port));
  if (inet_pton(AF_INET, o.addr.c_str(), &sa.sin_addr) != 1) return {};
  std::vector<int> fds;
  if (o.rank == 0) {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, o.streams) != 0) return {};
    for (int s = 0; s < o.streams; ++s) {
      const int fd = accept(l, nullptr, nullptr);
      if (fd < 0 || !setup(fd)) return {};
      fds.push_back(fd);
    }
    close(l);
    return fds;
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int s = 0; s < o.streams; ++s) {
    int fd = -1;
    while (true) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) break;
      close(fd);
      if (std::chrono::steady_clock::now() > until) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!setup(fd)) return {};
    fds.push_back(fd);
  }
  return fds;
}

// One exchange: part s of `out` goes on fds[s] while part s of `in` comes
// from it. False on a connection error.
bool exchange(const std::vector<int>& fds, const char* out, char* in, size_t bytes) {
  const size_t k = fds.size();
  std::vector<size_t> sent(k, 0), got(k, 0), part(k), at(k);
  for (size_t s = 0; s < k; ++s) {
    at[s] = bytes / k * s;
    part[s] = s + 1 == k ? bytes - at[s] : bytes / k;
  }
  std::vector<pollfd> pfd(k);
  while (true) {
    bool pending = false;
    for (size_t s = 0; s < k; ++s) {
      pfd[s].fd = fds[s];
      pfd[s].events = static_cast<short>((sent[s] < part[s] ? POLLOUT : 0) | (got[s] < part[s] ? POLLIN : 0));
      pending = pending || pfd[s].events != 0;
    }
    if (!pending) return true;
    if (poll(pfd.data(), k, 10000) <= 0) return false;
    for (size_t s = 0; s < k; ++s) {
      if ((pfd[s].revents & (POLLERR | POLLHUP)) != 0 && got[s] < part[s] && (pfd[s].revents & POLLIN) == 0)
        return false;
      if ((pfd[s].revents & POLLOUT) != 0) {
        const ssize_t n = send(fds[s], out + at[s] + sent[s], part[s] - sent[s], MSG_NOSIGNAL);
        if (n > 0) sent[s] += static_cast<size_t>(n);
        else if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      }
      if ((pfd[s].revents & POLLIN) != 0) {
        const ssize_t n = recv(fds[s], in + at[s] + got[s], part[s] - got[s], 0);
        if (n > 0) got[s] += static_cast<size_t>(n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
      }
    }
  }
}

// -R: one AllReduce (float sum) of `bytes` (a multiple of 8) in `data` at
// 2 ranks; `tmp` holds half of it. Rank 0 owns the first half, rank 1 the
// second: each sends the other's half of its input and receives the other
// input of its own half, adds, then sends its half's sums and receives the
// other half's. Nothing is copied but by the sockets.
bool allReduce(const std::vector<int>& fds, int rank, float* data, float* tmp, size_t bytes) {
  const size_t half = bytes / sizeof(float) / 2;
  float* mine = data + (rank == 0 ? 0 : half);
  float* theirs = data + (rank == 0 ? half : 0);
  const size_t phase = half * sizeof(float);
  if (!exchange(fds, reinterpret_cast<const char*>(theirs), reinterpret_cast<char*>(tmp), phase)) return false;
  for (size_t i = 0; i < half; ++i) mine[i] += tmp[i];
  return exchange(fds, reinterpret_cast<const char*>(mine), reinterpret_cast<char*>(theirs), phase);
}

struct Buffers {
  std::vector<char> out, in;     // the exchange
  std::vector<float> data, tmp;  // -R
};

// One size: warm-up and timed iterations; the mean time of one, and the
// received bytes that are not what the peer wrote (after the last one).

bool runSize(const Options& o, const std::vector<int>& fds, Buffers& b, size_t bytes, double* mean, size_t* wrong) {
  double seconds = 0;
  const size_t floats = bytes / sizeof(float);
  for (int it = -o.warmup; it < o.iters; ++it) {
    // Each side writes what it sends, so the peer's pattern is known.
    const char fill = static_cast<char>(o.rank * 64 + (it & 63));
    if (o.reduce) std::fill(b.data.begin(), b.data.begin() + static_cast<ptrdiff_t>(floats), float(o.rank + 1));
    else if (o.fresh || it == -o.warmup) std::memset(b.out.data(), fill, bytes);
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = o.reduce ? allReduce(fds, o.rank, b.data.data(), b.tmp.data(), bytes)
                             : exchange(fds, b.out.data(), b.in.data(), bytes);
    if (!ok) return false;
    if (it >= 0) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  *mean = seconds / o.iters;
  if (o.reduce) {  // 1 + 2 everywhere
    *wrong = static_cast<size_t>(std::count_if(b.data.begin(), b.data.begin() + static_cast<ptrdiff_t>(floats),
                                               [](float v) { return v != 3.0f; }));
    return true;
  }
  // The last exchange's bytes: the peer's fill of that iteration (or of its first one, not fresh).
  const int lastIt = o.fresh ? o.iters - 1 : -o.warmup;
  const char expect = static_cast<char>((1 - o.rank) * 64 + (lastIt & 63));
  *wrong = static_cast<size_t>(
      std::count_if(b.in.begin(), b.in.begin() + static_cast<ptrdiff_t>(bytes), [&](char c) { return c != expect; }));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseArgs(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s -r 0|1 -a ADDR -p PORT [-k streams] [-b min] [-e max] [-f factor] [-n iters] "
                 "[-w warmup] [-F 0|1] [-R 0|1]\n",
                 argv[0]);
    return 2;
  }
  const std::vector<int> fds = connectAll(o);
  if (fds.empty()) {
    std::fprintf(stderr, "tcp_exchange: connecting rank %d over %s:%d failed: %s\n", o.rank, o.addr.c_str(), o.port,
                 std::strerror(errno));
    return 1;
  }
  Buffers b;
  if (o.reduce) {
    b.data.resize(o.maxBytes / sizeof(float));
    b.tmp.resize(o.maxBytes / sizeof(float) / 2 + 1);
  } else {
    b.out.resize(o.maxBytes);
    b.in.resize(o.maxBytes);
  }
  std::printf("# tcp_exchange rank %d: %d streams, %s\n", o.rank, o.streams,
              o.reduce  ? "an AllReduce of floats (two half exchanges and one addition)"
              : o.fresh ? "fresh data (written before each exchange)"
                        : "the same buffer every time");
  std::printf("# %12s %12s %10s %8s\n", "size", "time(us)", "busbw", "#wrong");
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * o.factor))) {
    const size_t rounded = o.reduce ? bytes / 8 * 8 : bytes;
    double t = 0;
    size_t wrong = 0;
    if (!runSize(o, fds, b, rounded, &t, &wrong)) {
      std::fprintf(stderr, "tcp_exchange: %zu bytes failed: %s\n", rounded, std::strerror(errno));
      return 1;
    }
    std::printf("  %12zu %12.2f %10.3f %8zu\n", rounded, t * 1e6, static_cast<double>(rounded) / t / 1e9, wrong);
    std::fflush(stdout);
  }
  for (int fd : fds) close(fd);
  return 0;
}
