// Settings that both ends of a message must share are agreed at init (rank 0's
// on every rank), so ranks started with different values still meet:
// PLAIT_P2P_LINE_MAX_BYTES decides whether an AlltoAll, Gather or Scatter
// block goes by a line FIFO or a point-to-point FIFO step, and a block sent
// one way and awaited the other would hang until the timeout or be taken
// for another message. Two processes, one with the line FIFOs off (0), the
// other with them up to the most a line message holds (3072), both ways
// round, blocks on both sides of every limit; results checked element by
// element against the pattern each rank sent.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "coll_util.h"
#include "direct_test_env.h"
#include "harness.h"

namespace {

uint8_t valueOf(int sender, int block, size_t i) { return static_cast<uint8_t>(sender * 37 + block * 11 + i * 3 + 1); }

// AlltoAll, Gather and Scatter (root 1) of `count` int8 elements per block;
// "" or what went wrong first.
std::string exchange(ncclComm_t comm, int rank, int n, size_t count) {
  std::vector<uint8_t> send(count * n), recv(count * n, 0);
  for (int b = 0; b < n; ++b)
    for (size_t i = 0; i < count; ++i) send[b * count + i] = valueOf(rank, b, i);
  auto fail = [&](const char* what) { return std::string(what) + " of " + std::to_string(count) + " bytes: "; };
  if (ncclAlltoAll(send.data(), recv.data(), count, ncclInt8, comm, nullptr) != ncclSuccess)
    return fail("AlltoAll") + ncclGetLastError(comm);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < count; ++i)
      if (recv[p * count + i] != valueOf(p, rank, i)) return fail("AlltoAll") + "wrong element from rank " + std::to_string(p);
  std::fill(recv.begin(), recv.end(), 0);
  // Gather to rank 1: each rank's block 0.
  if (ncclGather(send.data(), recv.data(), count, ncclInt8, 1, comm, nullptr) != ncclSuccess)
    return fail("Gather") + ncclGetLastError(comm);
  if (rank == 1)
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        if (recv[p * count + i] != valueOf(p, 0, i)) return fail("Gather") + "wrong element from rank " + std::to_string(p);
  std::fill(recv.begin(), recv.end(), 0);
  // Scatter from rank 1: block b of rank 1's buffer to rank b.
  if (ncclScatter(send.data(), recv.data(), count, ncclInt8, 1, comm, nullptr) != ncclSuccess)
    return fail("Scatter") + ncclGetLastError(comm);
  for (size_t i = 0; i < count; ++i)
    if (recv[i] != valueOf(1, rank, i)) return fail("Scatter") + "wrong element";
  return "";
}

}  // namespace

TEST_CASE("Ranks with different PLAIT_P2P_LINE_MAX_BYTES still exchange every block", "[process]") {
  for (const char* first : {"0", "3072"}) {
    const std::string firstValue = first;
    const auto codes = plait_test::runProcesses(2, [&](int rank, const ncclUniqueId& id) {
      setenv("PLAIT_P2P_LINE_MAX_BYTES", rank == 0 ? firstValue.c_str() : (firstValue == "0" ? "3072" : "0"), 1);
      setenv("PLAIT_TIMEOUT", "20", 1);  // a block awaited on the wrong FIFO fails in 20 s, not 30 min
      plait_test::resetLibrarySettings();  // rank 0 is this process: re-read the tunables
      ncclComm_t comm = nullptr;
      int code = 0;
      if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
        std::fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
        code = 2;
      } else {
        for (size_t count : {512, 1023, 1024, 1025, 2047, 2048, 2049, 3071, 3072, 3073}) {
          const std::string e = exchange(comm, rank, 2, count);
          if (!e.empty()) {
            std::fprintf(stderr, "rank %d (PLAIT_P2P_LINE_MAX_BYTES %s here): %s\n", rank,
                         std::getenv("PLAIT_P2P_LINE_MAX_BYTES"), e.c_str());
            code = 1;
            break;
          }
        }
        ncclCommDestroy(comm);
      }
      unsetenv("PLAIT_P2P_LINE_MAX_BYTES");
      unsetenv("PLAIT_TIMEOUT");
      plait_test::resetLibrarySettings();
      return code;
    });
    INFO("rank 0 with PLAIT_P2P_LINE_MAX_BYTES=" << first);
    for (int c : codes) CHECK(c == 0);
  }
}
