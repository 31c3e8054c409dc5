// Deadlines are part of the public C++ API; see plait/clock.hpp.
#pragma once
#include "plait/clock.hpp"
