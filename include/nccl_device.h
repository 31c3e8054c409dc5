/* nccl_device.h — Plait's NCCL device API, the 2.28 layout (the version
 * nccl.h reports): types and host entry points for device communicators
 * (ncclDevCommCreate), teams, windows and barriers, and the inline device
 * code a kernel calls (ncclGetLsaPointer, ncclLsaBarrierSession, ...).
 * Written for Plait; the structures a library fills and a kernel reads
 * (ncclDevComm, ncclWindow_vidmem, the requirement structs) have NCCL's
 * layout, checked by tests/api/test_device_api_abi.cc against NVIDIA's header
 * where the CUDA toolkit ships it, so a kernel compiled against either header
 * reads the same fields.
 *
 * STATE: the headers are complete for the LSA (load/store accessible) part
 * and declare GIN; the library does not yet map windows for peers' loads and
 * stores, so ncclDevCommCreate returns ncclInvalidUsage saying so, as NCCL
 * does where symmetric memory is unavailable. Multimem (NVLink SHARP) and
 * GIN (GPU-initiated networking) device calls trap with a message.
 * C++ only (CUDA C++ for the device parts). */
#ifndef PLAIT_NCCL_DEVICE_H_
#define PLAIT_NCCL_DEVICE_H_

#ifndef __cplusplus
#error "nccl_device.h is C++: include it from CUDA C++ (.cu) or C++ sources"
#endif

#include "nccl.h"
#include "nccl_device/core.h"
#include "nccl_device/coop.h"
#include "nccl_device/lsa_barrier.h"
#include "nccl_device/gin.h"
#include "nccl_device/barrier.h"

#endif
