// fuzz_check.h — what the fuzz targets share: their own invariants (a
// failed one prints the condition and line and aborts, which libFuzzer
// reports as a crash with the input that caused it) and a reader over the
// fuzzer's bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define PLAIT_FUZZ_CHECK(condition)                                                             \
  do {                                                                                          \
    if (!(condition)) {                                                                         \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

// The fuzzer's bytes, consumed front to back.
struct FuzzInput {
  const uint8_t* data;
  size_t size;
  // The next byte; 0 once the input is used up.
  uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  int32_t int32() {
    int32_t v = 0;
    for (int i = 0; i < 4; ++i) v = static_cast<int32_t>(static_cast<uint32_t>(v) << 8 | byte());
    return v;
  }
  // Up to 79 bytes, the length from the next byte.
  std::string text() {
    const size_t n = byte() % 80;
    std::string s;
    for (size_t i = 0; i < n && size > 0; ++i) s.push_back(static_cast<char>(byte()));
    return s;
  }
  // The next n bytes, or false when the input (a peer "closing") ends first.
  bool take(void* out, size_t n) {
    if (size < n) return false;
    std::memcpy(out, data, n);
    data += n;
    size -= n;
    return true;
  }
  template <typename T>
  bool take(T* out) {
    return take(out, sizeof(T));
  }
};
