// Plait's nccl.h against NVIDIA's newest: every field of the versioned
// structures (ncclCollConfig_t, ncclConfigExt_t, ncclConfig_t,
// ncclSimInfo_t, ncclUniqueId) at the same offset, the same sizes; and the
// initializer's defaults as NCCL documents them.
#include <catch2/catch.hpp>

#include "abi_layout_fields.h"
#include "nccl.h"

namespace {
PLAIT_ABI_LAYOUT_FUNCTION(plaitAbiLayout)
}  // namespace

extern "C" int nvidiaAbiLayout(size_t* out, const char** names, int max);

TEST_CASE("Plait's structures sit where NVIDIA's newest nccl.h puts them", "[abi]") {
  constexpr int kMax = 128;
  size_t ours[kMax], theirs[kMax];
  const char* names[kMax];
  const int n = plaitAbiLayout(ours, names, kMax);
  REQUIRE(n <= kMax);
  REQUIRE(nvidiaAbiLayout(theirs, nullptr, kMax) == n);
  for (int i = 0; i < n; ++i) {
    INFO(names[i]);
    CHECK(ours[i] == theirs[i]);
  }
}

TEST_CASE("NCCL_COLLCONFIG_INITIALIZER: unset resources, forced selection, no tag", "[abi]") {
  const ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  CHECK(c.size == sizeof(ncclCollConfig_t));
  CHECK(c.magic == 0xcafebeef);
  CHECK(c.version >= 23200u);
  CHECK(c.ext == nullptr);
  CHECK(c.minCTAs == NCCL_CONFIG_UNDEF_INT);
  CHECK(c.maxCTAs == NCCL_CONFIG_UNDEF_INT);
  CHECK(c.algSelection == nullptr);
  CHECK(c.forceAlgSelection == 1);
  CHECK(c.CTAPolicy == NCCL_CONFIG_UNDEF_INT);
  CHECK(c.userProfilerTag == 0);
  CHECK(c.launchCompletionEvent == nullptr);
}
