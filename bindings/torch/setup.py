# Builds plait_torch: the c10d backend (csrc/) against the installed torch
# and Plait's libplait.so from a Plait build (PLAIT_BUILD_DIR, default the
# repository's build/). The library is copied into the package and found
# through $ORIGIN, so the installed package does not depend on the build tree.
#   scripts/setup_torch.sh   (creates the venv, installs torch, runs this)
import os
import shutil

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("PLAIT_BUILD_DIR", os.path.join(ROOT, "build"))
LIBDIR = os.path.join(BUILD, "src", "api")
LIBRARY = os.path.join(LIBDIR, "libplait.so.0")
if not os.path.exists(LIBRARY):
    raise SystemExit(f"plait_torch: {LIBRARY} not found: build Plait first (scripts/build.sh) or set PLAIT_BUILD_DIR")
shutil.copy2(LIBRARY, os.path.join(HERE, "plait_torch", "libplait.so.0"))

# CUDA tensors (csrc/device.h) where torch has CUDA and the toolkit's headers
# are here: CUDAExtension adds them and links torch's CUDA libraries. No .cu
# file: the device work is Plait's, reached through its C API with device
# pointers. PLAIT_TORCH_CUDA=0 builds the CPU-only backend anyway.
want_cuda = os.environ.get("PLAIT_TORCH_CUDA", "1") != "0"
has_cuda = (want_cuda and torch.version.cuda is not None and CUDA_HOME is not None
            and os.path.exists(os.path.join(CUDA_HOME, "include", "cuda_runtime_api.h")))
Extension = CUDAExtension if has_cuda else CppExtension
print(f"plait_torch: {'with' if has_cuda else 'without'} CUDA tensors (torch CUDA {torch.version.cuda}, "
      f"toolkit {CUDA_HOME})")

setup(
    name="plait_torch",
    version="0.1.0",
    description="Plait as a torch.distributed backend: init_process_group('plait')",
    packages=["plait_torch"],
    package_data={"plait_torch": ["libplait.so.0"]},
    ext_modules=[
        Extension(
            "plait_torch._C",
            ["csrc/process_group_plait.cc", "csrc/collectives.cc", "csrc/tensor_args.cc", "csrc/reduction.cc",
             "csrc/device.cc", "csrc/module.cc"],
            define_macros=[("PLAIT_TORCH_CUDA", "1")] if has_cuda else [],
            include_dirs=[os.path.join(ROOT, "include")],
            library_dirs=[LIBDIR],
            libraries=["plait"],
            # -g0: the debug info Python's flags add doubles the compile time of two
            # files that include all of ATen (CI builds them on every run).
            extra_compile_args=["-O2", "-g0", "-std=c++20", "-Wall"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
