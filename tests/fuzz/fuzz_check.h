// fuzz_check.h — the fuzz targets' own invariants: a failed one prints the
// condition and line and aborts, which libFuzzer reports as a crash with
// the input that caused it.
#pragma once

#include <cstdio>
#include <cstdlib>

#define PLAIT_FUZZ_CHECK(condition)                                                             \
  do {                                                                                          \
    if (!(condition)) {                                                                         \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)
