#!/usr/bin/env bash
# Idempotent set-up of a fresh machine for gnnorch, in two steps:
#
#   bash scripts/setup.sh          what the demo and any user needs (minutes): a virtual
#                                  environment at $GNNORCH_VENV (default .venv), torch 2.13.0
#                                  first (the CPU wheel on this machine: never let pip pick a
#                                  newer torch, which pulls GBs of CUDA wheels), then gnnorch
#                                  (editable) with its runtime dependencies (PyG, ...).
#   bash scripts/setup.sh --test   that, plus what the test suite needs: torch_scatter /
#                                  torch_sparse built from source against the installed torch
#                                  (PyG's sampling backend, for the suite's vanilla-PyG
#                                  comparisons; about 20 minutes on 2 cores the first time,
#                                  pip's wheel cache makes later builds fast) and the test extras.
#
# Each step is a fast no-op once done (a stamp in the environment, plus an import check).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
with_tests=0
case "${1:-}" in
  "") ;;
  --test) with_tests=1 ;;
  *) echo "usage: bash scripts/setup.sh [--test]" >&2; exit 2 ;;
esac
venv="${GNNORCH_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
constraints="$root/scripts/constraints.txt"
want="$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)"

if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
pip=("$py" -m pip install --progress-bar off -c "$constraints")

# done STAMP MODULES: the step that writes STAMP ran for this set-up, and MODULES import
done_already() {
  [ -f "$1" ] && [ "$(cat "$1")" = "$want" ] && "$py" -c "import $2" 2>/dev/null
}

# -- step 1: the runtime ------------------------------------------------------------------------
if ! done_already "$venv/.gnnorch-setup-stamp" "torch, torch_geometric, skopt, psutil, gnnorch"
then
  if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" \
       2>/dev/null; then
    echo "[setup] installing torch 2.13.0 (CPU)"
    "${pip[@]}" "torch==2.13.0"
  fi
  # pyg-lib is not on the package registry; gnnorch's own sampler needs neither it nor
  # torch_sparse (gnnorch uses pyg-lib when a user installs it).
  echo "[setup] installing gnnorch (editable) and its runtime dependencies"
  "${pip[@]}" -q -e .
  echo "$want" > "$venv/.gnnorch-setup-stamp"
  echo "[setup] runtime ready: $("$py" -c 'import torch, torch_geometric; print("torch", torch.__version__, "| torch_geometric", torch_geometric.__version__)')"
fi
[ "$with_tests" = 1 ] || exit 0

# -- step 2: the test suite ---------------------------------------------------------------------
if ! done_already "$venv/.gnnorch-test-stamp" "torch_sparse, torch_scatter, pytest, hypothesis"
then
  "${pip[@]}" -q setuptools wheel
  # source distributions, compiled against the installed torch (about 8 + 13 minutes on
  # 2 cores the first time; pip caches the built wheels)
  export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
  for pkg in torch_scatter torch_sparse; do
    if ! "$py" -c "import $pkg" 2>/dev/null; then
      echo "[setup] building $pkg against torch 2.13.0 (cached after the first build)"
      "${pip[@]}" --no-build-isolation "$pkg"
    fi
  done
  echo "[setup] installing the test dependencies"
  "${pip[@]}" -q -e ".[test]"
  echo "$want" > "$venv/.gnnorch-test-stamp"
  echo "[setup] tests ready: $("$py" -c 'import torch_sparse, torch_scatter; print("torch_sparse", torch_sparse.__version__, "| torch_scatter", torch_scatter.__version__)')"
fi
