// NCCL 2.32's parameter API over Plait's tunables. The ctest entry sets
// NCCL_NCHANNELS=3, PLAIT_CHUNK_BYTES=300 and NCCL_ALGO=ring before the
// process starts (tunables are read once): every value checked here comes
// from the environment or from a default the test knows.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "nccl.h"

namespace {
ncclParamHandle_t bind(const char* key) {
  ncclParamHandle_t h = nullptr;
  INFO(key);
  REQUIRE(ncclParamBind(&h, key) == ncclSuccess);
  REQUIRE(h != nullptr);
  return h;
}
}  // namespace

TEST_CASE("ncclParam: keys in NCCL's and Plait's spellings name one parameter", "[param]") {
  CHECK(bind("NCCL_NCHANNELS") == bind("PLAIT_NCHANNELS"));
  CHECK(bind("NCHANNELS") == bind("NCCL_NCHANNELS"));
  ncclParamHandle_t h = nullptr;
  CHECK(ncclParamBind(&h, "NCCL_NO_SUCH_THING") == ncclInvalidArgument);
  CHECK(h == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("no parameter \"NCCL_NO_SUCH_THING\"") != std::string::npos);
  CHECK(ncclParamBind(nullptr, "NCCL_NCHANNELS") == ncclInvalidArgument);
}

TEST_CASE("ncclParam: typed values, and values that do not fit the type", "[param]") {
  int32_t i32 = 0;
  REQUIRE(ncclParamGetI32(bind("NCCL_NCHANNELS"), &i32) == ncclSuccess);
  CHECK(i32 == 3);
  uint64_t u64 = 0;
  REQUIRE(ncclParamGetU64(bind("NCCL_NCHANNELS"), &u64) == ncclSuccess);
  CHECK(u64 == 3);
  ncclParamHandle_t chunk = bind("NCCL_CHUNK_BYTES");  // 300
  int16_t i16 = 0;
  REQUIRE(ncclParamGetI16(chunk, &i16) == ncclSuccess);
  CHECK(i16 == 300);
  int8_t i8 = 0;
  CHECK(ncclParamGetI8(chunk, &i8) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("NCCL_CHUNK_BYTES is 300, which does not fit int8_t") !=
        std::string::npos);
  uint8_t u8 = 0;
  CHECK(ncclParamGetU8(chunk, &u8) == ncclInvalidArgument);
  ncclParamHandle_t gdr = bind("NCCL_NET_GDR");  // default -1
  CHECK(ncclParamGetI8(gdr, &i8) == ncclSuccess);
  CHECK(i8 == -1);
  uint32_t u32 = 0;
  CHECK(ncclParamGetU32(gdr, &u32) == ncclInvalidArgument);
  int64_t i64 = 0;
  CHECK(ncclParamGetI64(bind("NCCL_ALGO"), &i64) == ncclInvalidUsage);  // a string parameter
  CHECK(ncclParamGetI32(reinterpret_cast<ncclParamHandle_t>(&i64), &i32) == ncclInvalidArgument);  // not a handle
}

TEST_CASE("ncclParam: strings, raw bytes, keys and the dump", "[param]") {
  const char* text = nullptr;
  REQUIRE(ncclParamGetStr(bind("NCCL_ALGO"), &text) == ncclSuccess);
  CHECK(std::string(text) == "ring");
  REQUIRE(ncclParamGetStr(bind("NCCL_NCHANNELS"), &text) == ncclSuccess);
  CHECK(std::string(text) == "3");
  int len = 0;
  CHECK(ncclParamGetParameter("PLAIT_ALGO", &text, &len) == ncclSuccess);
  CHECK(std::string(text, len) == "ring");

  char buf[16] = {};
  int64_t raw = 0;
  REQUIRE(ncclParamGet(bind("NCCL_NCHANNELS"), buf, sizeof buf, &len) == ncclSuccess);
  REQUIRE(len == 8);
  std::memcpy(&raw, buf, 8);
  CHECK(raw == 3);
  REQUIRE(ncclParamGet(bind("NCCL_ALGO"), buf, sizeof buf, &len) == ncclSuccess);
  CHECK(len == 5);
  CHECK(std::string(buf) == "ring");
  CHECK(ncclParamGet(bind("NCCL_ALGO"), buf, 3, &len) == ncclInvalidArgument);
  CHECK(len == 5);  // what it needs, even when refused

  const char** keys = nullptr;
  int n = 0;
  REQUIRE(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess);
  CHECK(n > 50);
  bool sawChannels = false, sawAlgo = false;
  for (int i = 0; i < n; ++i) {
    ncclParamHandle_t h = nullptr;
    CHECK(ncclParamBind(&h, keys[i]) == ncclSuccess);  // every listed key binds
    sawChannels = sawChannels || std::string(keys[i]) == "NCCL_NCHANNELS";
    sawAlgo = sawAlgo || std::string(keys[i]) == "NCCL_ALGO";
  }
  CHECK(sawChannels);
  CHECK(sawAlgo);
  ncclParamDumpAll();  // lines at NCCL_DEBUG=INFO; must not fail without it
}
