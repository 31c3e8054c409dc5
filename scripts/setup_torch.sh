#!/usr/bin/env bash
# Sets up the PyTorch backend (bindings/torch): a virtual environment with
# torch from PyPI, Plait built, and plait_torch built against both and
# installed into the environment. Safe to run again: torch is installed once
# (per PLAIT_TORCH_SPEC), the extension rebuilt when its sources changed.
#   scripts/setup_torch.sh                 venv in build-torch/venv, Plait from build/
#   scripts/setup_torch.sh --install-only  only the venv and torch (no Plait needed;
#                                          scripts/test.sh runs this during its build)
#   PLAIT_TORCH_VENV=dir PLAIT_BUILD_DIR=dir scripts/setup_torch.sh
#   PLAIT_TORCH_SPEC='torch==2.15.0'       which torch (pinned: c10d's C++ API moves)
#   PLAIT_SKIP_SETUP=1                     do not run scripts/setup.sh (Debian packages)
# Prints the environment's python as its last line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PLAIT_TORCH_VENV:-$ROOT/build-torch/venv}"
BUILD="${PLAIT_BUILD_DIR:-$ROOT/build}"
SPEC="${PLAIT_TORCH_SPEC:-torch==2.15.0}"
# Debian's python (python3-venv, python3-dev from scripts/setup.sh) rather
# than whatever python3 is first in PATH: the extension needs its headers.
PYTHON="${PLAIT_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}"
[[ "${PLAIT_SKIP_SETUP:-0}" == 1 ]] || "$ROOT/scripts/setup.sh" >&2
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
installed=$("$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' 2>/dev/null || true)
if [[ -z "$installed" || ("$SPEC" == torch==* && "$installed" != "$SPEC") ]]; then
  # torch's wheel brings NVIDIA's CUDA libraries (about 5 GB installed); they
  # load without a GPU. pip compiles torch's modules here, once (where
  # PYTHONDONTWRITEBYTECODE is set, as in CI, every process would compile
  # what it imports again: 1-3 s per rank). ninja builds the extension's
  # files in parallel.
  echo "setup_torch: installing $SPEC into $VENV" >&2
  "$PY" -m pip install -q "$SPEC" numpy ninja "setuptools>=77" >&2
fi
[[ "${1:-}" == --install-only ]] && { echo "$PY"; exit 0; }
if [[ ! -f "$BUILD/src/api/libplait.so.0" ]]; then
  echo "setup_torch: building Plait in $BUILD" >&2
  BUILD_DIR="$BUILD" TARGETS=plait "$ROOT/scripts/build.sh" >&2
fi
echo "setup_torch: building plait_torch against $BUILD" >&2
(cd "$ROOT/bindings/torch" && PLAIT_BUILD_DIR="$BUILD" MAX_JOBS="${MAX_JOBS:-2}" \
  "$PY" -m pip install -q --no-build-isolation --no-deps . >&2)
"$PY" -c "import plait_torch; print('setup_torch: plait_torch on', plait_torch.library_path())" >&2
echo "$PY"
