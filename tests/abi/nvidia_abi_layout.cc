// nvidia_abi_layout.cc — the structures' layout as NVIDIA's nccl.h (the
// release fetched by scripts/fetch_nccl_headers.sh) defines it; compiled
// without Plait's include directory (tests/abi/CMakeLists.txt).
#include <nccl.h>

#include "abi_layout_fields.h"

extern "C" PLAIT_ABI_LAYOUT_FUNCTION(nvidiaAbiLayout)
