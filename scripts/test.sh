#!/usr/bin/env bash
# Set up (idempotent) and run the test suite (slow benchmarks are excluded by pytest's config).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root"
exec "${GNNORCH_VENV:-$root/.venv}/bin/python" -m pytest -p no:cacheprovider "$@"
