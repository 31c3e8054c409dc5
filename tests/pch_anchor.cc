// pch_anchor.cc — the program that compiles Catch2's precompiled header for
// the test programs (tests/CMakeLists.txt: PLAIT_TEST_PCH). It has no tests.
#include <catch2/catch.hpp>
