// nvidia_layout.cc — the device API's layout as NVIDIA's nccl_device.h
// (the CUDA toolkit's copy) defines it; compiled without Plait's include
// directory (tests/device_api/CMakeLists.txt).
#include <stddef.h>

#include <nccl.h>
#include <nccl_device.h>

#include "device_layout_fields.h"

extern "C" PLAIT_DEVICE_LAYOUT_FUNCTION(nvidiaDeviceLayout)
