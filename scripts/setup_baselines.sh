#!/usr/bin/env bash
# Separate environment for the strong PyG baselines (issue 14): the same torch 2.13.0 /
# torch_sparse / torch_scatter / PyG as the test environment, plus pyg-lib 0.9.0 built from the
# source archive in ../shared/baselines (about 14 minutes on 2 cores). The test suite never needs
# it; benchmark scripts run vanilla PyG (pyg-lib) and "PyG expert" baselines in it with
#   .venv-baseline/bin/python scripts/bench_fastpath.py --baselines
# Idempotent: a no-op when pyg-lib and torch_cluster already import there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GNNORCH_BASELINE_VENV:-$root/.venv-baseline}"
shared="${GNNORCH_SHARED:-$root/../shared}"
GNNORCH_VENV="$venv" bash "$root/scripts/setup.sh"
# torch_cluster (fps, radius, knn, graclus, voxel grids) for the point-cloud, superpixel and
# mesh examples of scripts/pyg_examples_verbatim.py: built from source against the installed
# torch (about 15 minutes on 2 cores; pip caches the wheel).
if ! (cd / && "$venv/bin/python" -c "import torch_cluster") 2>/dev/null; then
  echo "[baselines] building torch_cluster 1.6.3 against $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  MAX_JOBS="${MAX_JOBS:-$(nproc)}" "$venv/bin/python" -m pip install -q --no-build-isolation \
    --no-deps torch_cluster==1.6.3
fi
if (cd / && "$venv/bin/python" -c "import torch_geometric.typing as t, sys; sys.exit(not t.WITH_PYG_LIB)") 2>/dev/null; then
  echo "[baselines] pyg-lib already installed in $venv"; exit 0
fi
wheels="$venv/wheels"; mkdir -p "$wheels"
PYTHON="$venv/bin/python" bash "$shared/baselines/build-pyg-lib.sh" "$wheels"
