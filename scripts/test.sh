#!/usr/bin/env bash
# Set up (idempotent: the runtime, then the test suite's torch_scatter / torch_sparse builds and
# extras) and run the test suite (slow benchmarks are excluded by pytest's config).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" --test
cd "$root"
exec "${GNNORCH_VENV:-$root/.venv}/bin/python" -m pytest -p no:cacheprovider "$@"
