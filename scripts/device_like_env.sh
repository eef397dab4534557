#!/usr/bin/env bash
# A scratch environment with the GPU machine's own versions, on this CPU machine: Python 3.12,
# torch 2.11.0+cu130 (PyPI's CUDA wheel and its CUDA packages, about 5 GB; it runs on the CPU
# here), torch-geometric 2.8.0.post1, the tools the device has (pytest, hypothesis, cmake,
# ninja, ...), the wheels `device_session.sh prepare` carries (into DIR/site, as `start` does
# there) and pyg-lib built by the device session's own build step (`_build`, mode auto).
# No torch_sparse / torch_scatter, as on the device. For rehearsing a device session
# (docs/gpu-runbook.md, "Rehearsal"); nothing of the project depends on it.
#
#   bash scripts/device_like_env.sh [DIR]        # default /work/t211; about 15 min here
#
# Then, e.g.:
#   PYTHONPATH=DIR/site:src DIR/venv/bin/python -m pytest tests/test_device_path.py
#   DRY=1 PY=DIR/venv/bin/python GNNORCH_DEVICE_SITE=DIR/site \
#     bash scripts/device_session.sh start
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-/work/t211}"
python312="${PYTHON312:-$(command -v python3.12 || true)}"
[ -n "$python312" ] || { echo "device_like_env: no python3.12 found (PYTHON312=...)" >&2; exit 1; }
mkdir -p "$dir"
if [ ! -x "$dir/venv/bin/python" ]; then
  "$python312" -m venv "$dir/venv"
fi
py="$dir/venv/bin/python"
# the device's versions (KINDS.md of the device tool, and its runbook); torch pinned exactly
"$py" -m pip install -q torch==2.11.0 torch_geometric==2.8.0.post1 numpy scipy psutil tqdm \
  pytest pytest-timeout hypothesis cmake ninja wheel setuptools pybind11
(cd "$repo" && bash scripts/device_session.sh prepare > /dev/null)
mkdir -p "$dir/site"
PIP_NO_INDEX=1 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
  --upgrade --target "$dir/site" "$repo"/.whl/*.whl
if ! (cd / && "$py" -c "import pyg_lib" 2>/dev/null); then
  PY="$py" GNNORCH_DEVICE_ROOT="$dir/root" bash "$repo/scripts/device_session.sh" _build
fi
(cd / && PYTHONPATH="$dir/site:$repo/src" "$py" -c "
import torch, torch_geometric, pyg_lib, gnnorch, skopt
print('device-like env:', 'torch', torch.__version__, 'PyG', torch_geometric.__version__,
      'pyg-lib', pyg_lib.__version__, 'gnnorch ok')")
