#!/usr/bin/env bash
# A first run in minutes: set up what the demo needs (idempotent: torch CPU, PyG, gnnorch; not
# the torch_scatter / torch_sparse builds, which only the test suite needs) and run GraphSAGE on
# the bundled Cora under gnnorch.Runtime with 2 processes (examples/train_gnnorch.py). The
# training prints its own lines; gnnorch's summary of what it did follows on stderr at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
echo "[demo] examples/train_gnnorch.py: GraphSAGE on Cora, gnnorch.Runtime(train, processes=2)" >&2
exec "${GNNORCH_VENV:-$root/.venv}/bin/python" "$root/examples/train_gnnorch.py" "$@"
