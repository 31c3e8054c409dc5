// Per-call algorithm selection strings (NCCL_ALGO's syntax) parsed for each
// collective: lists, exclusions, per-collective parts, NCCL's names that
// Plait never runs, and malformed strings.
#include <catch2/catch.hpp>

#include "core/alg_selection.h"
#include "core/tuner.h"

using namespace plait;

namespace {
AlgSelection parse(const char* text, CollType coll = CollType::kAllReduce) {
  auto r = parseAlgSelection(text, coll);
  INFO(r.status().toString());
  REQUIRE(r.isOk());
  return *r;
}
std::string error(const char* text, CollType coll = CollType::kAllReduce) {
  auto r = parseAlgSelection(text, coll);
  REQUIRE_FALSE(r.isOk());
  CHECK(r.status().code() == Code::kInvalidArgument);
  return r.status().message();
}
}  // namespace

TEST_CASE("algSelection: unrestricted, lists and exclusions", "[alg-selection]") {
  CHECK_FALSE(parse(nullptr).restricted);
  CHECK_FALSE(parse("").restricted);
  CHECK_FALSE(parse("  ").restricted);
  CHECK(parse("ring").algos == kAlgoRing);
  CHECK(parse("RING, OneShot").algos == (kAlgoRing | kAlgoOneShot));
  CHECK(parse("^ring").algos == (kAlgoOneShot | kAlgoDirect | kAlgoSymmetric | kAlgoTree));
  CHECK(parse("^tree").algos == (kAlgoRing | kAlgoOneShot | kAlgoDirect | kAlgoSymmetric));
  CHECK(parse("Tree").algos == kAlgoTree);  // Plait's log-depth schedules
  const AlgSelection nccls = parse("pat,nvls");  // NCCL's, none run by Plait
  CHECK(nccls.restricted);
  CHECK(nccls.algos == 0);
  CHECK(algoNames(kAlgoRing | kAlgoSymmetric) == "ring, symmetric");
  CHECK(algoNames(0) == "none");
}

TEST_CASE("algSelection: per-collective parts apply to their collective only", "[alg-selection]") {
  const char* text = "allreduce:oneshot;allgather:^direct; broadcast : ring";
  CHECK(parse(text, CollType::kAllReduce).algos == kAlgoOneShot);
  CHECK(parse(text, CollType::kAllGather).algos == (kAlgoRing | kAlgoOneShot | kAlgoSymmetric | kAlgoTree));
  CHECK(parse(text, CollType::kBroadcast).algos == kAlgoRing);
  CHECK_FALSE(parse(text, CollType::kReduceScatter).restricted);
  CHECK(parse("sendrecv:ring", CollType::kSend).restricted);
}

TEST_CASE("algSelection: malformed strings name what is wrong", "[alg-selection]") {
  CHECK_THAT(error("ring,bogus"), Catch::Contains("unknown algorithm \"bogus\""));
  CHECK_THAT(error("ring,,oneshot"), Catch::Contains("empty algorithm name"));
  CHECK_THAT(error("^"), Catch::Contains("lists no algorithm"));
  CHECK_THAT(error("allreduce:ring;oneshot"), Catch::Contains("mixes per-collective parts"));
  CHECK_THAT(error("reduction:ring"), Catch::Contains("unknown collective \"reduction\""));
  // A bad part is an error even when it names another collective.
  CHECK_THAT(error("allgather:bogus", CollType::kAllReduce), Catch::Contains("unknown algorithm"));
}

TEST_CASE("tuner: a call's selection and channel bounds", "[alg-selection][tuner]") {
  TunerInputs in;
  in.nranks = 4;
  in.nLocalRanks = 4;
  in.nChannels = 4;
  in.ringStepBytes = 128 << 10;
  in.meshStepBytes = 64 << 10;
  in.fullMesh = true;
  const Tuner tuner(in);
  Task t;
  t.coll = CollType::kAllReduce;
  const size_t small = 1024, big = size_t(8) << 20;
  CHECK(tuner.plan(t, small).algo == Algorithm::kOneShot);  // the cost model's choice
  CHECK(tuner.plan(t, big).nChannels == 4);
  t.algos = kAlgoRing;
  CHECK(tuner.plan(t, small).algo == Algorithm::kRing);
  t.algos = kAlgoOneShot;
  CHECK(tuner.plan(t, small).algo == Algorithm::kOneShot);
  CHECK(tuner.plan(t, big).refused);  // beyond the mesh: oneshot cannot run it
  t.forceAlgos = false;
  const Plan free = tuner.plan(t, big);
  CHECK_FALSE(free.refused);
  CHECK(free.algo == Algorithm::kRing);
  t.algos = 0;
  t.maxChannels = 1;
  CHECK(tuner.plan(t, big).nChannels == 1);
  t.maxChannels = 0;
  t.minChannels = 3;
  CHECK(tuner.plan(t, size_t(300) << 10).nChannels == 3);  // one channel by size alone
  t.minChannels = 9;
  CHECK(tuner.plan(t, big).nChannels == 4);  // never more than are connected
  CHECK(tuner.devicePlan(t, small, 16).nChannels == 9);
}

// The host's rings of ranks with a core each take 32 steps of 64 KiB while
// the device path's keep 8 of 128 KiB: each plan slices by its own FIFOs
// (device kernels with 64 KiB slices would leave half of every step unused).
TEST_CASE("tuner: host and device plans slice by their own ring FIFOs", "[tuner]") {
  TunerInputs in;
  in.nranks = 2;
  in.nLocalRanks = 2;
  in.nChannels = 1;
  in.ringStepBytes = 64 << 10;
  in.ringSteps = 32;
  in.deviceRingStepBytes = 128 << 10;
  in.deviceRingSteps = 8;
  Tuner tuner(in);
  Task t;
  t.coll = CollType::kAllGather;
  const size_t big = size_t(64) << 20;
  const Plan host = tuner.ringPlan(t, big), device = tuner.devicePlan(t, big, 1);
  CHECK(host.sliceBytes == (64 << 10));
  CHECK(host.chunkBytes == 16 * (64 << 10));
  CHECK(device.sliceBytes == (128 << 10));
  CHECK(device.chunkBytes == 4 * (128 << 10));
  in.deviceRingStepBytes = 0;  // not given: as the host's
  in.deviceRingSteps = 0;
  const Plan same = Tuner(in).devicePlan(t, big, 1);
  CHECK(same.sliceBytes == (64 << 10));
  CHECK(same.chunkBytes == 16 * (64 << 10));
}
