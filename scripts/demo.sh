#!/usr/bin/env bash
# Set up (idempotent) and run the demo: GraphSAGE on the bundled Cora, under gnnorch.Runtime.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "${GNNORCH_VENV:-$root/.venv}/bin/python" "$root/examples/train_gnnorch.py" "$@"
