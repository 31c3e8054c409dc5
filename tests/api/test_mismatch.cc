// Ranks that call different collectives, or the same one with different
// arguments, get ncclInvalidUsage naming both ranks instead of waiting for
// each other until PLAIT_TIMEOUT (src/core/op_board.h). Run with
// PLAIT_TIMEOUT=30 (see CMakeLists.txt): before the op board, every case here
// waited the whole timeout and failed with a time-out.
#include <catch2/catch.hpp>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace {

struct Outcome {
  ncclResult_t result = ncclSuccess;
  std::string message;
  ncclResult_t after = ncclSuccess;  // a matching AllReduce afterwards
};

// Runs `call(rank, comm)` on two ranks (threads), then a matching AllReduce.
template <class Call>
std::vector<Outcome> runPair(Call call) {
  std::vector<Outcome> out(2);
  auto failures = plait_test::runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    out[rank].result = call(rank, comm);
    out[rank].message = ncclGetLastError(comm);
    float x = 1;
    out[rank].after = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr);
    return "";
  });
  for (const auto& f : failures) FAIL(f);
  return out;
}

// An AlltoAll of `block` floats per rank and an in-place AllReduce of
// `sumCount` floats on two ranks, with inputs that say where each value
// came from.
struct AlltoAllAndSum {
  int rank;
  size_t block;
  std::vector<float> in, out, sum;
  AlltoAllAndSum(int r, size_t b, size_t sumCount) : rank(r), block(b), in(2 * b), out(2 * b, -1.0f), sum(sumCount) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(100 * rank + i % 50);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<float>(1000 * rank + i % 7);
  }
  ncclResult_t alltoall(ncclComm_t comm) {
    return ncclAlltoAll(in.data(), out.data(), block, ncclFloat, comm, nullptr);
  }
  ncclResult_t allreduce(ncclComm_t comm) {
    return ncclAllReduce(sum.data(), sum.data(), sum.size(), ncclFloat, ncclSum, comm, nullptr);
  }
  std::string check() const {
    for (size_t i = 0; i < out.size(); ++i) {  // block p of rank r's out is block r of rank p's in
      const size_t from = i / block, at = rank * block + i % block;
      if (out[i] != static_cast<float>(100 * from + at % 50))
        return "AlltoAll out[" + std::to_string(i) + "] = " + std::to_string(out[i]);
    }
    for (size_t i = 0; i < sum.size(); ++i)
      if (sum[i] != static_cast<float>(1000 + 2 * (i % 7)))
        return "AllReduce sum[" + std::to_string(i) + "] = " + std::to_string(sum[i]);
    return "";
  }
};

void requireNamedMismatch(const std::vector<Outcome>& out, const char* detail) {
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << out[r].message);
    CHECK(out[r].result == ncclInvalidUsage);
    CHECK(out[r].message.find("rank " + std::to_string(1 - r)) != std::string::npos);
    CHECK(out[r].message.find(detail) != std::string::npos);
    CHECK(out[r].after != ncclSuccess);  // the pipelines are torn: the communicator is broken
  }
}

}  // namespace

TEST_CASE("Counts on both sides of the direct-path threshold", "[mismatch]") {
  auto out = runPair([](int rank, ncclComm_t comm) {
    std::vector<float> buf(8192, 1.0f);                       // 32 KiB on rank 0
    const size_t count = rank == 0 ? buf.size() : 1024;       // 4 KiB on rank 1
    return ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr);
  });
  requireNamedMismatch(out, "count");
}

TEST_CASE("Different collectives at the same position", "[mismatch]") {
  auto out = runPair([](int rank, ncclComm_t comm) {
    std::vector<float> buf(1 << 16, 1.0f);
    if (rank == 0) return ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
    return ncclBroadcast(buf.data(), buf.data(), buf.size(), ncclFloat, 0, comm, nullptr);
  });
  requireNamedMismatch(out, "Broadcast");
}

// Detection needs a rank that waits: two "roots" of a Broadcast both only
// send and may finish (as with NCCL, the data is then wrong). Two roots of a
// Reduce both wait for the other's contribution.
TEST_CASE("Reduce to different roots", "[mismatch]") {
  auto out = runPair([](int rank, ncclComm_t comm) {
    std::vector<float> buf(1 << 16, 1.0f);
    return ncclReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, rank, comm, nullptr);
  });
  requireNamedMismatch(out, "root");
}

// Blocks of 1 MiB take the direct path (single copies after an agreement
// over the line FIFOs), of 4 KiB the point-to-point FIFOs, of 256 bytes the
// line FIFOs (PLAIT_P2P_LINE_MAX_BYTES); the grouped rank must take the same
// paths in the same order as the one calling one at a time (before, it ran
// them as one batch: 1 MiB waited out the timeout).
TEST_CASE("The same collectives grouped on one rank and not on the other still agree", "[mismatch]") {
  const size_t count = GENERATE(size_t{1} << 18, size_t{1024}, size_t{64});
  INFO(count * sizeof(float) << "-byte blocks");
  auto failures = plait_test::runThreads(2, [count](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> send(2 * count, 1.0f + rank), recv(2 * count, 0.0f), gathered(2 * count, 0.0f);
    ncclResult_t r;
    if (rank == 0) {
      ncclGroupStart();
      ncclAlltoAll(send.data(), recv.data(), count, ncclFloat, comm, nullptr);
      ncclGather(send.data(), gathered.data(), count, ncclFloat, 1, comm, nullptr);
      r = ncclGroupEnd();
    } else {
      r = ncclAlltoAll(send.data(), recv.data(), count, ncclFloat, comm, nullptr);
      if (r == ncclSuccess) r = ncclGather(send.data(), gathered.data(), count, ncclFloat, 1, comm, nullptr);
    }
    if (r != ncclSuccess) return std::string("AlltoAll and Gather: ") + ncclGetLastError(comm);
    if (recv[0] != 1.0f || recv[count] != 2.0f) return "AlltoAll moved the wrong data";
    if (rank == 1 && (gathered[0] != 1.0f || gathered[count] != 2.0f)) return "Gather moved the wrong data";
    std::vector<float> buf(8192, 1.0f);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("AllReduce: ") + ncclGetLastError(comm);
    return buf[0] == 2.0f && buf.back() == 2.0f ? "" : "AllReduce result";
  });
  for (const auto& f : failures) FAIL(f);
}

// A group mixing AlltoAll with other collectives, against a rank calling
// them one at a time in the same order. The grouped rank used to run the
// AllReduce first and the AlltoAll after it, both on the pair's line FIFO,
// so the other rank's AlltoAll took the AllReduce's message: wrong data when
// the sizes matched (the case here), a size error when not.
TEST_CASE("A group of AlltoAll and AllReduce against the same calls ungrouped", "[mismatch]") {
  const size_t count = GENERATE(size_t{16}, size_t{1} << 18);  // lines and one-shot; direct path and ring
  const bool alltoallFirst = GENERATE(true, false);
  INFO(count * sizeof(float) << "-byte blocks, " << (alltoallFirst ? "AlltoAll" : "AllReduce") << " first");
  auto failures = plait_test::runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    AlltoAllAndSum ops(rank, count, count);  // the AllReduce as big as a block
    auto alltoall = [&] { return ops.alltoall(comm); };
    auto allreduce = [&] { return ops.allreduce(comm); };
    ncclResult_t r;
    if (rank == 0) {
      ncclGroupStart();
      if (alltoallFirst) alltoall();
      allreduce();
      if (!alltoallFirst) alltoall();
      r = ncclGroupEnd();
    } else {
      r = alltoallFirst ? alltoall() : allreduce();
      if (r == ncclSuccess) r = alltoallFirst ? allreduce() : alltoall();
    }
    if (r != ncclSuccess) return std::string("AlltoAll and AllReduce: ") + ncclGetLastError(comm);
    return ops.check();
  });
  for (const auto& f : failures) FAIL(f);
}

// Sends and receives in a group with AlltoAll and AllReduce, against a rank
// calling the same operations one at a time in the same order: rank 1 sends
// one message to rank 0 (P), both run an AlltoAll (A) and an AllReduce (R),
// in three orders; the grouped rank is 0 or 1. The group's batch posts its
// sends before it runs the AllReduce, so the ungrouped rank's calls find
// them (P is 4 KiB: a send the FIFO holds). Before, with P and a 4 KiB
// AlltoAll on the same FIFO, the grouped rank ran the AlltoAll first when it
// ran collectives apart from the batch.
TEST_CASE("Sends and receives grouped with collectives against the same calls ungrouped", "[mismatch]") {
  const size_t a2a = GENERATE(size_t{16}, size_t{1024});    // AlltoAll block: line FIFO, point-to-point FIFO
  const size_t ar = GENERATE(size_t{16}, size_t{1} << 14);  // AllReduce: one-shot, ring
  const std::string order = GENERATE(std::string("PAR"), std::string("ARP"), std::string("RPA"));
  const int grouped = GENERATE(0, 1);
  INFO("AlltoAll blocks of " << a2a << " floats, AllReduce of " << ar << ", order " << order << ", rank " << grouped
                             << " grouped");
  const size_t msg = 1024;
  auto failures = plait_test::runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> p(msg);
    for (size_t i = 0; i < msg; ++i) p[i] = rank == 1 ? static_cast<float>(7 + i % 13) : -1.0f;
    AlltoAllAndSum ops(rank, a2a, ar);
    auto call = [&](char op) {
      if (op == 'P')
        return rank == 1 ? ncclSend(p.data(), msg, ncclFloat, 0, comm, nullptr)
                         : ncclRecv(p.data(), msg, ncclFloat, 1, comm, nullptr);
      return op == 'A' ? ops.alltoall(comm) : ops.allreduce(comm);
    };
    ncclResult_t r = ncclSuccess;
    if (rank == grouped) {
      ncclGroupStart();
      for (char op : order) call(op);
      r = ncclGroupEnd();
    } else {
      for (char op : order)
        if (r == ncclSuccess) r = call(op);
    }
    if (r != ncclSuccess) return std::string("rank ") + std::to_string(rank) + ": " + ncclGetLastError(comm);
    for (size_t i = 0; i < msg; ++i)
      if (p[i] != static_cast<float>(7 + i % 13)) return "Recv p[" + std::to_string(i) + "] = " + std::to_string(p[i]);
    return ops.check();
  });
  for (const auto& f : failures) FAIL(f);
}

// Run with PLAIT_TIMEOUT=2 (test_api_missing_rank): a rank that never calls
// the next collective cannot be told from a slow one, so the others wait out
// the timeout, but their error says where every rank of the host is.
TEST_CASE("A timeout says which rank never arrived and where it is", "[missing]") {
  std::atomic<int> failed{0};
  std::vector<std::string> messages(3);
  auto failures = plait_test::runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(256, 1.0f);
    if (ncclAllReduce(buf.data(), buf.data(), 256, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("AllReduce: ") + ncclGetLastError(comm);
    if (rank == 1) {  // skips the AllGather; stays until the others gave up
      while (failed.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return "";
    }
    std::vector<float> gathered(3 * 256);
    ncclResult_t r = ncclAllGather(buf.data(), gathered.data(), 256, ncclFloat, comm, nullptr);
    messages[rank] = ncclGetLastError(comm);
    failed.fetch_add(1);
    while (failed.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // no abort before both
    return r == ncclRemoteError ? "" : "AllGather without rank 1 returned " + std::to_string(r);
  });
  for (const auto& f : failures) FAIL(f);
  for (int rank : {0, 2}) {
    INFO("rank " << rank << ": " << messages[rank]);
    CHECK(messages[rank].find("timed out") != std::string::npos);
    CHECK(messages[rank].find("rank 1 (host ") != std::string::npos);
    CHECK(messages[rank].find("is at AllReduce #1 (count 256, float, sum)") != std::string::npos);
    const std::string waiting = rank == 0 ? "ranks 0 (this one), 2" : "ranks 0, 2 (this one)";
    CHECK(messages[rank].find(waiting + " are at AllGather #2 (count 256, float)") != std::string::npos);
  }
}

// Run with PLAIT_STATUS_SIGNAL=10 (SIGUSR1) and PLAIT_DEBUG_FILE (see
// CMakeLists.txt): the signal makes the process log where each communicator is.
TEST_CASE("PLAIT_STATUS_SIGNAL logs where every communicator is", "[status_signal]") {
  const char* file = std::getenv("PLAIT_DEBUG_FILE");
  REQUIRE(file != nullptr);
  std::remove(file);
  auto failures = plait_test::runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(4, 1.0f), gathered(8);
    if (ncclAllReduce(buf.data(), buf.data(), 4, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("AllReduce: ") + ncclGetLastError(comm);
    if (rank == 0) {  // rank 1 waits in the AllGather meanwhile
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the reporter thread logs
    }
    if (ncclAllGather(buf.data(), gathered.data(), 4, ncclFloat, comm, nullptr) != ncclSuccess)
      return std::string("AllGather: ") + ncclGetLastError(comm);
    return "";
  });
  for (const auto& f : failures) FAIL(f);
  std::ifstream in(file);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(log);
  CHECK(log.find("status (PLAIT_STATUS_SIGNAL)") != std::string::npos);
  CHECK(log.find("rank 0 of 2: idle after AllReduce #1 (count 4, float, sum)") != std::string::npos);
  CHECK(log.find("rank 1 of 2: in AllGather #2 (count 4, float) for ") != std::string::npos);
  CHECK(log.find("rank 0 (this one) is at AllReduce #1") != std::string::npos);
}
