#!/usr/bin/env bash
# Idempotent set-up of a fresh machine for gnnorch: a virtual environment at $GNNORCH_VENV
# (default .venv in the repository), torch 2.13.0 first (the CPU wheel on this machine), then
# torch_scatter / torch_sparse built from source against it (pip's wheel cache makes later runs
# fast), then the project itself (editable) with its test extras.
# Fast no-op when everything is already installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${GNNORCH_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
constraints="$root/scripts/constraints.txt"
stamp="$venv/.gnnorch-setup-stamp"
want="$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)"

if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
py="$venv/bin/python"
pip=("$py" -m pip install --progress-bar off -c "$constraints")

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && "$py" -c "import torch, torch_sparse, torch_scatter, torch_geometric, skopt, psutil, gnnorch" 2>/dev/null; then
  exit 0
fi

if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  echo "[setup] installing torch 2.13.0 (CPU)"
  "${pip[@]}" "torch==2.13.0"
fi
"${pip[@]}" -q setuptools wheel numpy scipy

# torch_scatter / torch_sparse: source distributions, compiled against the installed torch
# (about 10 + 13 minutes on 2 cores the first time; pip caches the built wheels).
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
for pkg in torch_scatter torch_sparse; do
  if ! "$py" -c "import $pkg" 2>/dev/null; then
    echo "[setup] building $pkg against torch 2.13.0 (cached after the first build)"
    "${pip[@]}" --no-build-isolation "$pkg"
  fi
done

# pyg-lib is not on the package registry; gnnorch uses it when a user installs it.
echo "[setup] installing gnnorch (editable) and test dependencies"
"${pip[@]}" -q -e ".[test]"
echo "$want" > "$stamp"
echo "[setup] done: $("$py" -c 'import torch, torch_geometric, torch_sparse; print("torch", torch.__version__, "| torch_geometric", torch_geometric.__version__, "| torch_sparse", torch_sparse.__version__)')"
