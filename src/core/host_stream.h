// The host stream is part of the public C++ API; see plait/stream.hpp.
#pragma once
#include "plait/stream.hpp"
