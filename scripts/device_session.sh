#!/usr/bin/env bash
# One lent GPU session (issue 21) in one device call (two at most) of a 15-minute lease;
# docs/gpu-runbook.md is the plan.
#
#   bash scripts/device_session.sh prepare        # HERE, before the session: .whl/ and .carry/
#   bash scripts/device_session.sh start          # on the device: install, launch the driver
#   bash scripts/device_session.sh wait 570       # on the device: wait, copy results to $OUT
#   bash scripts/device_session.sh status         # on the device: one line, no waiting
#   bash scripts/device_session.sh stop           # on the device: end the driver
#
# `prepare` downloads the wheels gnnorch needs and the device lacks into .whl/ and copies the
# pyg-lib source and build script from ../shared/baselines into .carry/ (both ignored through
# .git/info/exclude; the device call carries them: carry [".whl", ".carry"]); with
# PYG_LIB_WHEEL=FILE it also carries a pyg-lib wheel built here against the device's torch
# (scripts/device_like_env.sh), which the device checks and installs instead of building.
# `start` installs the missing wheels into /tmp/site, prints the machine (nvidia-smi, versions,
# compilers) and launches the driver with setsid (it outlives the call while the machine is
# held), which runs the plan's units in order, each step bounded by `timeout` and by the
# driver's deadline (DEADLINE_S seconds after its start, default 660; steps that no longer fit
# are skipped and logged), each writing its own JSON under /tmp/gnnorch-device/results (the
# log: /tmp/gnnorch-device/log):
#
#   a. (always) pyg-lib: the carried wheel, else a build (CPU kernels, 16 jobs) | the
#      products-scale graph | the GPU tests, side by side while nothing is measured
#   then PLAN's units (default sage,cpu_fastpath,gcn_gat,cpu_tuner,extra):
#   sage          SAGE: gnnorch, vanilla and expert (each family's best of num_workers
#                 12/8/4/0 by a 40-batch screen, then measured in full), features forced to
#                 the host with and without the cache, the cache
#   cpu_fastpath  16 cores, the GPU hidden: bench_fastpath --baselines
#   gcn_gat       GCN, GAT: gnnorch, vanilla and expert at SAGE's best worker counts
#   cpu_tuner     16 cores, the GPU hidden: bench_tuner part A
#   extra         SAGE features-host without rewrites; the GPU tests under CUDA's sanitizer
#   profile       where a batch of the SAGE gnnorch row spends its time, part by part
#                 (bench_gpu_breakdown.py: sampler, gather, step, serial, pipeline)
#   tests         the gpu-marked tests and the sampler's op counts on the device, as a unit
#                 (with TESTS=0 to leave them out of step a; e.g. at the plan's end)
#   gil           who holds the GIL in the last epoch of the SAGE gnnorch rows (py-spy, per
#                 thread: trainer, producer, cache refresher; GIL_CONFIGS: the rows)
#   refresh       one background refresh job of the cache, part by part and whole, before and
#                 after session 20's changes, host or device CSC, host or device features
#                 (bench_refresh_job.py on the sage graph; results/refresh_job.json)
#   hetero        HeteroData batches PyG builds, copied by the path (bench_hetero_feed.py: an
#                 ogbn-mag-like graph, to_hetero SAGE; vanilla, gnnorch-host, gnnorch with
#                 persistent workers, then gnnorch and vanilla without)
#   cpu_graph_level  16 cores, the GPU hidden: PyG's BatchNorm-free graph-level programs
#                 (proteins_topk_pool, qm9_nn_conv) vanilla (pyg-lib) against gnnorch p=1,
#                 p=2 and the tuner's plan, their training epochs sharded by graph
#                 (bench_graph_level.py, sessions 34-35)
#   step_host     what gnnorch's seams add to the trainer's step on the GPU, tiny tensors
#                 (bench_step_host.py --device cuda: vanilla, gnnorch with trimming and
#                 rewrites, each alone, neither; results/step_host_device.json); no graph
#
# Settings a later session may change (environment): SWEEP_WORKERS (the worker counts of the
# vanilla and expert rows; one count: no screen), SAGE_CONFIGS (the sage unit's rows, measured
# in that order), GIL_CONFIGS (the gil unit's rows), DEADLINE_S, TESTS, PLAN.
#
# `wait S` returns when the driver is done or after S seconds, whichever is first, copying the
# log, every results JSON and a tarball of everything (step outputs included) into $OUT.
#
# DRY=1 runs the same plan on this CPU at a tiny scale (.venv's python, no pyg-lib build, the
# GPU tests skip, PyG's vanilla rows sample with torch_sparse): a check of the script, whose
# numbers mean nothing.
set -uo pipefail

# The driver runs from a copy of this script under $ROOT (started with GNNORCH_REPO set), so
# that a later call's copy of the working tree cannot change the script under a running bash.
REPO="${GNNORCH_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
DRY="${DRY:-0}"
ROOT="${GNNORCH_DEVICE_ROOT:-/tmp/gnnorch-device$([ "$DRY" = 1 ] && echo -dry)}"
SITE="${GNNORCH_DEVICE_SITE:-/tmp/site}"
SHARED="${SHARED:-$REPO/../shared/baselines}"
DEADLINE_S="${DEADLINE_S:-660}"
if [ "$DRY" = 1 ]; then PY="${PY:-$REPO/.venv/bin/python}"; else PY="${PY:-python3}"; fi
# The wheels of gnnorch's dependencies the device lacks (scikit-optimize and what it pulls in,
# cloudpickle): the versions of the project's .venv. `start` installs only the missing ones.
WHEELS=(scikit-optimize==0.10.2 pyaml==26.7.0 PyYAML==6.0.3 scikit-learn==1.9.1
        joblib==1.6.0 threadpoolctl==3.8.0 narwhals==2.29.0 cloudpickle==3.1.2 packaging==26.3
        py-spy==0.4.3)   # py-spy: the `gil` unit's sampler (a binary in $SITE/bin)
PIP_PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
               --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
               --platform manylinux1_x86_64)

# The units of measurement, in the order of the default plan (issue 21's priorities). Each is
# whole in itself: its ratios compare rows measured on the same machine in the same session.
UNITS="sage cpu_fastpath gcn_gat cpu_tuner extra profile tests hetero gil refresh step_host cpu_graph_level"
DEFAULT_PLAN="sage,cpu_fastpath,gcn_gat,cpu_tuner,extra"

# The plan's scale (DRY: tiny, on the CPU).
if [ "$DRY" = 1 ]; then
  NODES=40000; SEEDS=20480; HIDDEN=64; EPOCHS=2; EPOCHS_BASELINE=2; DEVICE=cpu
  SWEEP_WORKERS="${SWEEP_WORKERS:-2,1,0}"; SCREEN_BATCHES=4; PROFILE_BATCHES=6
  FASTPATH_WORKERS=0,1; FASTPATH_ARGS=(--nodes 20000 --epochs 2 --train-seeds 2048)
  TUNER_ARGS=(--nodes 5000 --epochs 3 --ex-epochs 2 --min-cores "$(nproc)")
else
  NODES=2450000; SEEDS=196615; HIDDEN=256; EPOCHS=3; EPOCHS_BASELINE=2; DEVICE=cuda
  SWEEP_WORKERS="${SWEEP_WORKERS:-12,8,4,0}"; SCREEN_BATCHES=40; PROFILE_BATCHES=40
  FASTPATH_WORKERS=0,4,8,12; FASTPATH_ARGS=(--nodes 400000 --epochs 2)
  TUNER_ARGS=(--nodes 60000 --epochs 10 --ex-epochs 4 --min-cores 16)
fi

log() { echo "[$(date +%H:%M:%S) +$(( $(date +%s) - ${T0:-$(date +%s)} ))s] $*" >> "$ROOT/log"; }

# =============================================================================== prepare (here)
prepare() {
  cd "$REPO" || exit 1
  mkdir -p .git/info && touch .git/info/exclude
  local line
  for line in /.whl/ /.carry/; do
    grep -qxF "$line" .git/info/exclude || echo "$line" >> .git/info/exclude
  done
  mkdir -p .whl .carry
  local spec name version norm have
  for spec in "${WHEELS[@]}"; do
    name="${spec%%==*}"; version="${spec##*==}"
    norm="$(echo "$name" | tr 'A-Z-' 'a-z_')"
    # one version of each: others of the same name go
    for have in .whl/*.whl; do
      [ -e "$have" ] || continue
      local base; base="$(basename "$have" | tr 'A-Z' 'a-z')"
      if [ "${base%%-*}" = "$norm" ] && [ "$(echo "$base" | cut -d- -f2)" != "$version" ]; then
        echo "removing $have (not $version)"; rm -f "$have"
      fi
    done
    if ls .whl | tr 'A-Z' 'a-z' | grep -q "^${norm}-${version}-"; then continue; fi
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${PIP_PLATFORMS[@]}" -d .whl "$spec" \
      || python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        -d .whl "$spec" || { echo "prepare: could not download $spec" >&2; return 1; }
  done
  [ -f "$SHARED/pyg-lib-0.9.0-src.tar.gz" ] && [ -f "$SHARED/build-pyg-lib.sh" ] \
    || { echo "prepare: $SHARED lacks the pyg-lib archive or build script" >&2; return 1; }
  cmp -s "$SHARED/pyg-lib-0.9.0-src.tar.gz" .carry/pyg-lib-0.9.0-src.tar.gz \
    || cp -f "$SHARED/pyg-lib-0.9.0-src.tar.gz" .carry/
  # the build script, offline: its `pip install cmake ninja wheel setuptools` (already on the
  # device, and there is no network there) becomes a check that they are there
  local pipline='"$py" -m pip install -q cmake ninja wheel setuptools'
  grep -qxF "$pipline" "$SHARED/build-pyg-lib.sh" \
    || { echo "prepare: build-pyg-lib.sh changed; check its pip line by hand" >&2; return 1; }
  awk -v pipline="$pipline" '$0 == pipline {
      print "# offline copy (gnnorch scripts/device_session.sh prepare): no pip install here;"
      print "# cmake, wheel and setuptools must be installed already"
      print "\"$py\" -c \"import setuptools, wheel\""
      print "command -v cmake >/dev/null || [ -x \"$(dirname \"$py\")/cmake\" ]"
      next } { print }' "$SHARED/build-pyg-lib.sh" > .carry/build-pyg-lib.sh
  chmod +x .carry/build-pyg-lib.sh
  # a pyg-lib wheel built beforehand against the device's torch (scripts/device_like_env.sh):
  # the device installs it after a check instead of building (saves minutes of device time)
  if [ -n "${PYG_LIB_WHEEL:-}" ]; then
    [ -f "$PYG_LIB_WHEEL" ] || { echo "prepare: no wheel at $PYG_LIB_WHEEL" >&2; return 1; }
    rm -f .carry/pyg_lib-*.whl && cp -f "$PYG_LIB_WHEEL" .carry/
  fi
  if ls .carry/pyg_lib-*.whl >/dev/null 2>&1; then
    echo "pyg-lib: carrying $(basename .carry/pyg_lib-*.whl) (checked on the device, else built)"
  else
    echo "pyg-lib: no wheel carried: the device builds it (2-4 minutes of device time)"
  fi
  git check-ignore -q .whl/x && git check-ignore -q .carry/x \
    || { echo "prepare: .whl/ or .carry/ is not ignored by git" >&2; return 1; }
  ls -la .whl .carry
  local kib; kib="$(du -sk .whl .carry | awk '{s += $1} END {print s}')"
  echo "carry: [\".whl\", \".carry\"]  ($((kib / 1024)) MiB of the 64 MiB a call carries)"
  [ "$kib" -lt $((60 * 1024)) ] || { echo "prepare: too large to carry" >&2; return 1; }
}

# =============================================================================== start (device)
install_wheels() {
  # only the distributions this python lacks go into $SITE (none at all in DRY here)
  local missing
  missing="$("$PY" - <<'EOF'
import importlib.metadata as md
import pathlib
out = []
for wheel in sorted(pathlib.Path(".whl").glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        md.version(name)
    except md.PackageNotFoundError:
        out.append(str(wheel))
print(" ".join(out))
EOF
)"
  if [ -z "$missing" ]; then echo "wheels: nothing missing"; return 0; fi
  echo "wheels: installing into $SITE: $missing"
  mkdir -p "$SITE"
  # shellcheck disable=SC2086
  if "$PY" -m pip --version >/dev/null 2>&1; then
    PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q --no-index \
      --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $missing
  else  # no pip: a wheel is a zip laid out for site-packages
    "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
      "$SITE" $missing
  fi
}

start() {
  cd "$REPO" || exit 1
  if driver_alive; then echo "the driver is already running (pid $(cat "$ROOT/driver.pid"))"
    status; return 0; fi
  if [ -f "$ROOT/current" ] && [ "${FORCE:-0}" != 1 ]; then
    echo "a driver already ran here ($(status)); FORCE=1 starts the plan again (the graph and"
    echo "an installed pyg-lib are kept, the results are not)"; return 0
  fi
  [ "$DRY" = 1 ] || [ -d .whl ] || { echo "no .whl/: run prepare here and carry .whl" >&2; return 1; }
  # a fresh run keeps only the generated graphs (cwd/bench-results/graphs)
  (cd "$ROOT" 2>/dev/null && ls -A | grep -vx cwd | xargs -r rm -rf)
  mkdir -p "$ROOT/results" "$ROOT/steps" "$ROOT/cwd"
  [ -d .whl ] && install_wheels
  export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
  {
    echo "== machine"; date -u; uname -a; nproc; free -g | head -2; df -h /tmp | tail -1
    if command -v nvidia-smi >/dev/null; then nvidia-smi; else echo "no nvidia-smi"; fi
    local t; for t in nvcc g++ c++ cmake ninja taskset; do
      echo "$t: $(command -v "$t" || echo missing)"; done
    ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null
    "$PY" - <<'EOF'
import importlib.metadata as md, platform, torch, torch_geometric
import torch_geometric.typing as t
print("python", platform.python_version(), "torch", torch.__version__, "cuda",
      torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
print("torch_geometric", torch_geometric.__version__, "pyg-lib", t.WITH_PYG_LIB,
      "torch_sparse", t.WITH_TORCH_SPARSE)
for name in ("numpy", "scipy", "scikit-optimize", "scikit-learn", "cloudpickle", "psutil",
             "pytest", "pytest-timeout"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} MISSING")
import gnnorch  # noqa: F401  (fatal: nothing can be measured without it)
print("gnnorch import ok")
for name in ("skopt", "cloudpickle"):   # the CPU rows' tuner needs skopt
    try:
        __import__(name)
    except Exception as exc:
        print(f"WARNING: import {name} failed: {exc!r}")
EOF
  } 2>&1 | tee "$ROOT/machine.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "start: the machine check failed (above)" >&2; return 1; }
  echo "== launching the driver (deadline ${DEADLINE_S}s; log $ROOT/log)"
  cp "$SELF" "$ROOT/device_session.sh"
  DRY="$DRY" PY="$PY" DEADLINE_S="$DEADLINE_S" PLAN="${PLAN:-$DEFAULT_PLAN}" TESTS="${TESTS:-1}" \
    GNNORCH_DEVICE_ROOT="$ROOT" \
    GNNORCH_REPO="$REPO" \
    setsid nohup bash "$ROOT/device_session.sh" _driver > "$ROOT/driver.out" 2>&1 < /dev/null &
  local i; for i in $(seq 1 20); do [ -s "$ROOT/driver.pid" ] && break; sleep 0.5; done
  sleep 2
  driver_alive && echo "driver running, pid $(cat "$ROOT/driver.pid")" \
    || { echo "the driver did not start:"; cat "$ROOT/driver.out"; return 1; }
  tail -n 5 "$ROOT/log"
}

driver_alive() { [ -s "$ROOT/driver.pid" ] && kill -0 "$(cat "$ROOT/driver.pid")" 2>/dev/null; }

# =============================================================================== the driver
# run_step NAME MAX_SECONDS CMD...: CMD bounded by min(MAX, the time left before the deadline)
# with its output in steps/NAME.out; the command line and exit status go to the log.
run_step() {
  local name="$1" max="$2"; shift 2
  local left=$(( DEADLINE_S - ($(date +%s) - T0) ))
  if (( left < 20 )); then
    log "step $name: SKIPPED (${left}s left before the deadline)"
    echo "$name" >> "$ROOT/skipped"; return 99
  fi
  local limit=$(( max < left ? max : left ))
  echo "$name" > "$ROOT/current"
  log "step $name: start (timeout ${limit}s): $*"
  local began; began="$(date +%s)"
  timeout -k 20 "$limit" "$@" > "$ROOT/steps/$name.out" 2>&1
  local rc=$?
  log "step $name: exit $rc$( ((rc == 124)) && echo ' (timed out)') after $(( $(date +%s) - began ))s"
  tail -n 4 "$ROOT/steps/$name.out" | sed 's/^/    | /' >> "$ROOT/log"
  ((rc == 0)) || echo "$name($rc)" >> "$ROOT/failed"
  return $rc
}

# seconds left before the deadline, minus a margin
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) - ${1:-15} )); }

# (run through `timeout` by the driver)
_torch_cpu_config() {
  # torch's CMake config needs a CUDA toolkit when torch is a CUDA build; pyg-lib's CPU kernels
  # need none of it: a minimal config of torch's CPU libraries, found first through Torch_ROOT
  local shim="$ROOT/torch-cpu-cmake" prefix abi
  prefix="$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" || return 1
  abi="$("$PY" -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')" || return 1
  mkdir -p "$shim/share/cmake/Torch"
  cat > "$shim/share/cmake/Torch/TorchConfig.cmake" <<CMAKE
# Written by gnnorch scripts/device_session.sh: torch's CPU libraries, to build pyg-lib's CPU
# kernels (FORCE_CUDA=0) against a CUDA build of torch where no CUDA toolkit is installed
# (torch's own config stops there). Found before torch's own through Torch_ROOT.
set(TORCH_INSTALL_PREFIX "$prefix")
set(TORCH_INCLUDE_DIRS "\${TORCH_INSTALL_PREFIX}/include"
    "\${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
find_library(TORCH_LIBRARY torch PATHS "\${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
find_library(TORCH_CPU_LIBRARY torch_cpu PATHS "\${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
find_library(C10_LIBRARY c10 PATHS "\${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
if(NOT TARGET torch)
  add_library(torch SHARED IMPORTED)
  set_target_properties(torch PROPERTIES
    IMPORTED_LOCATION "\${TORCH_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "\${TORCH_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "\${TORCH_CPU_LIBRARY};\${C10_LIBRARY}"
    INTERFACE_COMPILE_OPTIONS "-D_GLIBCXX_USE_CXX11_ABI=$abi")
endif()
set(TORCH_LIBRARIES torch)
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=$abi")
if(TORCH_LIBRARY AND TORCH_CPU_LIBRARY AND C10_LIBRARY)
  set(Torch_FOUND TRUE)
else()
  set(Torch_FOUND FALSE)
  set(Torch_NOT_FOUND_MESSAGE "libtorch, libtorch_cpu or libc10 missing in \${TORCH_INSTALL_PREFIX}/lib")
endif()
CMAKE
  export Torch_ROOT="$shim"
  echo "building against $shim/share/cmake/Torch/TorchConfig.cmake (torch's CPU libraries)"
}

_build_once() {
  # an absolute PYTHON: the script puts its folder (where pip put cmake and ninja) on PATH;
  # the wheel goes into that python's own site-packages (a PEP 668 marker would refuse it: the
  # device is thrown away after the session)
  PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    PYTHON="$(command -v "$PY" || echo "$PY")" JOBS="${JOBS:-$(nproc)}" \
    bash "$ROOT/carry/build-pyg-lib.sh" "$ROOT/wheels"
}

_check_pyg_lib() {
  # pyg-lib imports and PyG samples with it (hop counts present), in a process of its own (an
  # instruction the CPU lacks kills only the check)
  (cd / && "$PY" - <<'EOF'
import torch, pyg_lib
import torch_geometric.typing as t
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader
assert t.WITH_PYG_LIB, "PyG does not see pyg-lib"
g = torch.Generator().manual_seed(0)
data = Data(x=torch.randn(1000, 4), edge_index=torch.randint(0, 1000, (2, 10000), generator=g))
batch = next(iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=64)))
assert batch.num_sampled_nodes[0] == 64, batch.num_sampled_nodes
print("pyg-lib", pyg_lib.__version__, "samples with PyG against torch", torch.__version__)
EOF
  )
}

_build() {
  # pyg-lib's CPU kernels (FORCE_CUDA=0), from a copy of .carry. A wheel carried there
  # (`PYG_LIB_WHEEL=... prepare`: built beforehand against the device's torch) is installed
  # and checked first; the source is built when there is none or it fails its check.
  # TORCH_CPU_CONFIG=1 builds against _torch_cpu_config, 0 against torch's own config; by
  # default torch's own where nvcc exists (retried with the CPU config when that fails within
  # 3 minutes: at CMake's configure step), the CPU config where it does not.
  mkdir -p "$ROOT" && rm -rf "$ROOT/carry" && cp -r "$REPO/.carry" "$ROOT/carry" || return 1
  local wheel; wheel="$(ls "$ROOT"/carry/pyg_lib-*.whl 2>/dev/null | head -n 1)"
  if [ -n "$wheel" ]; then
    echo "== installing the carried wheel $(basename "$wheel")"
    if PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
         "$PY" -m pip install -q --no-index --no-deps --force-reinstall "$wheel" \
       && _check_pyg_lib; then
      return 0
    fi
    echo "== the carried wheel failed its check: building from source"
    PIP_BREAK_SYSTEM_PACKAGES=1 "$PY" -m pip uninstall -q -y pyg_lib
  fi
  local mode="${TORCH_CPU_CONFIG:-auto}"
  if [ "$mode" = auto ] && ! command -v nvcc >/dev/null \
      && ! ls /usr/local/cuda*/bin/nvcc >/dev/null 2>&1; then
    echo "no nvcc found"; mode=1
  fi
  if [ "$mode" = 1 ]; then _torch_cpu_config && _build_once; return; fi
  local began=$SECONDS
  _build_once && return 0
  if [ "$mode" = auto ] && ((SECONDS - began < 180)); then
    echo "== the build failed after $((SECONDS - began))s: again against torch's CPU libraries"
    rm -rf "$ROOT/wheels"; _torch_cpu_config && _build_once
  else
    return 1
  fi
}

_graph() {
  cd "$ROOT/cwd" && "$PY" -c "
import sys, time; sys.path.insert(0, '$REPO/scripts')
import baselines
t = time.perf_counter(); path = baselines.ensure_graph($NODES, 0, $SEEDS, 50.5)
print(path, f'{time.perf_counter() - t:.0f} s')"
}

_gpu_tests() {
  cd "$REPO" || return 1
  local files; files="$(grep -l 'mark.gpu' tests/test_*.py | tr '\n' ' ')"
  local extra=(); "$PY" -c "import pytest_timeout" 2>/dev/null && extra=(--timeout 120)
  # shellcheck disable=SC2086
  "$PY" -m pytest -m gpu -q -p no:cacheprovider -rs "${extra[@]}" $files \
    --junitxml "$ROOT/results/pytest_gpu.xml"
  local rc=$?
  # the sampler's cost per batch on the device, both k-subset draws (ops, syncs, ms)
  "$PY" "$REPO/scripts/bench_sampler_ops.py" --nodes 1000000 --device "$DEVICE" \
    --out "$ROOT/results/sampler_ops_device.json" || rc=$?
  return $rc
}

bench_gpu() {  # NAME MAX ARGS...: one bench_gpu.py run, its JSON results/gpu_NAME.json
  local name="$1" max="$2"; shift 2
  local budget; budget="$(left 30)"; (( budget < max )) || budget=$((max - 30))
  (cd "$ROOT/cwd" && run_step "gpu_$name" "$max" "$PY" "$REPO/scripts/bench_gpu.py" \
    --nodes "$NODES" --train-seeds "$SEEDS" --hidden "$HIDDEN" --epochs "$EPOCHS" \
    --epochs-baseline "$EPOCHS_BASELINE" --device "$DEVICE" --time-budget "$budget" \
    --out "$ROOT/results/gpu_$name.json" "$@")
  local rc=$?
  merge_gpu
  return $rc
}

merge_gpu() {  # the GPU table so far, from every bench_gpu JSON: results/gpu.json
  local files=()
  local f; for f in sage gcn_gat extra; do
    [ -f "$ROOT/results/gpu_$f.json" ] && files+=("$ROOT/results/gpu_$f.json"); done
  ((${#files[@]})) || return 0
  "$PY" "$REPO/scripts/bench_gpu.py" --merge "${files[@]}" --out "$ROOT/results/gpu.json" \
    > "$ROOT/steps/gpu_table.out" 2>&1
  log "merged ${#files[@]} GPU runs into results/gpu.json (table: steps/gpu_table.out)"
}

pyg_can_sample() {  # vanilla / expert rows: pyg-lib (DRY: torch_sparse does, on the CPU)
  (cd / && "$PY" -c "
import torch_geometric.typing as t, sys
sys.exit(0 if t.WITH_PYG_LIB or ($DRY == 1 and t.WITH_TORCH_SPARSE) else 1)")
}

_driver() {
  echo $$ > "$ROOT/driver.pid"
  T0="$(date +%s)"
  cd "$REPO" || exit 1
  case ":${PYTHONPATH:-}:" in *":$REPO/src:"*) ;;
    *) export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}" ;; esac
  export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
  # the tests make their own empty decision cache; bench_gpu.py one per gnnorch row
  unset GNNORCH_CACHE_DIR
  local plan="${PLAN:-$DEFAULT_PLAN}" unit
  for unit in ${plan//,/ }; do
    case " $UNITS " in *" $unit "*) ;;
      *) log "driver: unknown unit $unit in PLAN (units: $UNITS)"; echo "$unit(unknown)" \
           >> "$ROOT/failed"; finish; return 1 ;; esac
  done
  log "driver start: plan $plan, DRY=$DRY, python $PY, deadline ${DEADLINE_S}s, $(nproc) cpus"

  # a. pyg-lib (the carried wheel, else a build) | the graph | the GPU tests, side by side
  #    while nothing is measured. The rows wait for all three: every row (gnnorch's
  #    sampler="auto" looks for pyg-lib) sees the same environment, and no row is measured
  #    while compilers or tests run.
  local gpu=0; case ",$plan," in *,sage,*|*,gcn_gat,*|*,extra,*|*,profile,*|*,gil,*|*,refresh,*) gpu=1 ;; esac
  local build_pid="" graph_pid="" tests_pid="" graph_rc=0
  if [ "$DRY" = 1 ]; then log "step build: DRY, no pyg-lib"
  elif (cd / && "$PY" -c "import pyg_lib" 2>/dev/null); then
    log "step build: pyg-lib already installed"
  else run_step build 540 bash "$SELF" _build & build_pid=$!
  fi
  if ((gpu)); then
    run_step graph 420 bash "$SELF" _graph & graph_pid=$!
    # TESTS=0: not again (a second call's plan on the same machine)
    [ "${TESTS:-1}" = 1 ] && { run_step gpu_tests 150 bash "$SELF" _gpu_tests & tests_pid=$!; }
    wait "$graph_pid"; graph_rc=$?
    [ -n "$tests_pid" ] && wait "$tests_pid"
  fi
  [ -n "$build_pid" ] && wait "$build_pid"
  (cd / && "$PY" -c "import pyg_lib; print('pyg-lib', pyg_lib.__version__)" >> "$ROOT/log" \
    2>/dev/null) || log "pyg-lib: not importable"

  for unit in ${plan//,/ }; do
    case "$unit" in
      sage|gcn_gat|extra|profile|gil|refresh)
        if ((graph_rc == 0)); then "unit_$unit"; else log "unit $unit: no graph, skipped"
          echo "$unit" >> "$ROOT/skipped"; fi ;;
      *) "unit_$unit" ;;
    esac
  done
  finish
}

unit_sage() {
  # gnnorch's rows and the baselines: each family's best of the worker counts by a screen,
  # then measured in full; the acceptance rows first
  local baselines=""
  if pyg_can_sample; then baselines="vanilla,expert,"
  else log "PyG cannot sample with pyg-lib: the vanilla and expert rows are not measured"; fi
  local configs="${SAGE_CONFIGS:-gnnorch,${baselines}gnnorch-features-host,gnnorch-cache-features-host,gnnorch-cache}"
  [ -n "$baselines" ] || configs="$(echo ",$configs," | sed 's/,vanilla,/,/; s/,expert,/,/; s/^,//; s/,$//')"
  bench_gpu sage 600 --models sage --workers "$SWEEP_WORKERS" --screen-batches "$SCREEN_BATCHES" \
    --configs "$configs"
}

unit_profile() {
  # the SAGE gnnorch row taken apart: sampler, gather, step, serial, pipeline (ms per batch:
  # wall, thread CPU, CUDA kernels; ops), on the same graph
  (cd "$ROOT/cwd" && run_step profile 240 "$PY" "$REPO/scripts/bench_gpu_breakdown.py" \
    --nodes "$NODES" --train-seeds "$SEEDS" --hidden "$HIDDEN" --device "$DEVICE" \
    --batches "$PROFILE_BATCHES" --out "$ROOT/results/gpu_breakdown.json")
}

unit_gil() {
  # who holds the GIL during the last epoch of SAGE gnnorch rows (py-spy's GIL samples per
  # thread: trainer, producer, cache refresher; scripts/gil_profile.py): do the threads' shares
  # add up to about 1 (the host's launches bound the epoch), and what holds it in the cache's
  # rows; results/gpu_gil.json (not merged into the GPU table: py-spy's sampling is in its
  # epoch times), the raw samples in results/gil/
  if ! "$PY" -c "import sys; sys.path.insert(0, '$REPO/scripts'); import gil_profile
sys.exit(gil_profile.find_pyspy() is None)"; then
    log "unit gil: skipped (no py-spy: carry its wheel, prepare does)"
    echo gil >> "$ROOT/skipped"; return; fi
  bench_gpu gil 300 --models sage --configs "${GIL_CONFIGS:-gnnorch,gnnorch-cache}" \
    --gil-profile "$ROOT/results/gil"
}

unit_refresh() {
  # one background refresh job of the cache (about 22,800 hot rows, as on the H200 of session
  # 19), part by part and whole: the job as built before session 20 and now, on the host's CSC
  # and the device's, with the features on the host and on the GPU; on the sage unit's graph
  local args=(--rows 22800); [ "$DRY" = 1 ] && args=(--rows 1000 --repeats 2)
  (cd "$ROOT/cwd" && run_step refresh 300 "$PY" "$REPO/scripts/bench_refresh_job.py" \
    --nodes "$NODES" --train-seeds "$SEEDS" --device "$DEVICE" --threads "$(nproc)" \
    "${args[@]}" --out "$ROOT/results/refresh_job.json")
}

unit_hetero() {
  # HeteroData loaders served by the path (sampled and gathered on the GPU, drawn ahead),
  # against the user's workers and pageable batch.to(device), and the gnnorch row untrimmed
  # (gnnorch-notrim: session 31's per-type trimming off); its own graph (built in each
  # row's process)
  local papers=736389 workers=8
  [ "$DRY" = 1 ] && { papers=20000; workers=2; }
  (cd "$ROOT/cwd" && run_step hetero 300 "$PY" "$REPO/scripts/bench_hetero_feed.py" \
    --device "$DEVICE" --papers "$papers" --workers "$workers" --epochs 3 \
    --out "$ROOT/results/hetero_feed.json")
  (cd "$ROOT/cwd" && run_step hetero_nonpersistent 180 "$PY" \
    "$REPO/scripts/bench_hetero_feed.py" --device "$DEVICE" --papers "$papers" \
    --workers "$workers" --epochs 3 --persistent 0 --rows gnnorch,vanilla \
    --out "$ROOT/results/hetero_feed_nonpersistent.json")
}

unit_tests() {
  run_step gpu_tests 150 bash "$SELF" _gpu_tests
}

unit_step_host() {
  # the trainer's step with tensors so small that it costs its launches and its Python: the
  # seams' share of the GPU step (session 23 measured it on the CPU only)
  local args=(--rounds 2); [ "$DRY" = 1 ] && args=(--rounds 1 --batches 6)
  (cd "$ROOT/cwd" && run_step step_host 240 "$PY" "$REPO/scripts/bench_step_host.py" \
    --device "$DEVICE" "${args[@]}" --out "$ROOT/results/step_host_device.json")
}

unit_gcn_gat() {
  # GCN and GAT: gnnorch, and vanilla / expert at SAGE's best worker counts (from this session,
  # else from the committed GPU table of an earlier one)
  local from=""
  if [ -f "$ROOT/results/gpu_sage.json" ]; then from="$ROOT/results/gpu_sage.json"
  elif [ "$DRY" != 1 ] && [ -f "$REPO/benchmarks/results/gpu.json" ]; then
    from="$REPO/benchmarks/results/gpu.json"; fi
  if [ -n "$from" ] && pyg_can_sample; then
    log "unit gcn_gat: worker counts from $from"
    bench_gpu gcn_gat 480 --models gcn,gat --configs gnnorch,vanilla,expert \
      --worker-sweep-model sage --workers-from "$from"
  else
    bench_gpu gcn_gat 300 --models gcn,gat --configs gnnorch
  fi
}

unit_extra() {
  # rows the acceptance does not name, and stream races under torch's CUDA sanitizer
  bench_gpu extra 300 --models sage --configs gnnorch-features-host-norewrite
  [ "$DEVICE" = cuda ] && (cd "$REPO" && run_step gpu_sanitizer 120 env TORCH_CUDA_SANITIZER=1 \
    "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/test_device.py \
    tests/test_device_path.py --junitxml "$ROOT/results/pytest_gpu_sanitizer.xml")
}

unit_cpu_fastpath() {
  # the CPU rows on all cores, the GPU hidden; rewrite decisions start empty. torch_sparse is
  # not on the device: its vanilla row is left out
  export GNNORCH_CACHE_DIR="$ROOT/gnnorch-cache-cpu"
  if ! (cd / && "$PY" -c "import pyg_lib" 2>/dev/null); then
    log "unit cpu_fastpath: skipped (needs pyg-lib)"; echo cpu_fastpath >> "$ROOT/skipped"
    return; fi
  local experts; experts="$(echo "$FASTPATH_WORKERS" | sed 's/\([0-9]\+\)/expert-w\1/g')"
  (cd "$ROOT/cwd" && CUDA_VISIBLE_DEVICES="" run_step cpu_fastpath 300 "$PY" \
    "$REPO/scripts/bench_fastpath.py" --baselines "${FASTPATH_ARGS[@]}" \
    --workers "$FASTPATH_WORKERS" --configs "vanilla-pyg_lib,$experts,gnnorch" \
    --out "$ROOT/results/cpu_fastpath_baselines.json")
}

unit_cpu_tuner() {
  export GNNORCH_CACHE_DIR="$ROOT/gnnorch-cache-cpu"
  (cd "$ROOT/cwd" && CUDA_VISIBLE_DEVICES="" run_step cpu_tuner 420 "$PY" \
    "$REPO/scripts/bench_tuner.py" --part A "${TUNER_ARGS[@]}" \
    --out "$ROOT/results/cpu_tuner_partA.json")
}

unit_cpu_graph_level() {
  # graph-level programs on all cores, the GPU hidden (no graph needed): what sharding their
  # training epochs by graph gives where cores are many (the two BatchNorm-free workloads:
  # the BatchNorm ones run whole in every rank, measured on 2 cores in session 34)
  export GNNORCH_CACHE_DIR="$ROOT/gnnorch-cache-cpu"
  local args=(--workload proteins --workload qm9)
  [ "$DRY" = 1 ] && args+=(--scale 300 --epochs 1)
  (cd "$ROOT/cwd" && CUDA_VISIBLE_DEVICES="" run_step cpu_graph_level 240 "$PY" \
    "$REPO/scripts/bench_graph_level.py" "${args[@]}" \
    --out "$ROOT/results/cpu_graph_level.json")
}

finish() {
  merge_gpu
  local failed=""; [ -f "$ROOT/failed" ] && failed="$(tr '\n' ' ' < "$ROOT/failed")"
  local skipped=""; [ -f "$ROOT/skipped" ] && skipped="$(tr '\n' ' ' < "$ROOT/skipped")"
  echo "done${failed:+; failed: $failed}${skipped:+; skipped: $skipped}" > "$ROOT/current"
  log "driver done after $(( $(date +%s) - T0 ))s${failed:+; failed steps: $failed}${skipped:+; skipped: $skipped}"
}

# =============================================================================== wait / status
status() {
  if [ ! -f "$ROOT/current" ] && ! driver_alive; then echo "STATUS: not started"; return; fi
  local current; current="$(cat "$ROOT/current" 2>/dev/null)"
  local since=""; [ -f "$ROOT/driver.pid" ] && since="$(( $(date +%s) - $(stat -c %Y "$ROOT/driver.pid") ))s"
  if driver_alive; then echo "STATUS: running (step ${current:-?}, ${since} since start)"
  elif [[ "$current" == done* ]]; then echo "STATUS: $current"
  else echo "STATUS: driver gone during step ${current:-?} (see the log)"; fi
}

collect() {
  local out="${OUT:?OUT is not set}"
  mkdir -p "$out"
  cp -f "$ROOT/log" "$out/log.txt" 2>/dev/null
  status > "$ROOT/status.txt"
  (cd "$ROOT" && tar -czf "$out/results.tar.gz" --exclude='*.tmp' log status.txt \
    machine.txt driver.out results steps 2>/dev/null)
  # the JSONs flat as well (8 files at most come back: log.txt, results.tar.gz and 6 of these)
  local n=0 f
  for f in gpu.json gpu_breakdown.json gpu_gil.json gpu_sage.json gpu_gcn_gat.json \
           cpu_fastpath_baselines.json cpu_tuner_partA.json gpu_extra.json; do
    [ -f "$ROOT/results/$f" ] && ((n < 6)) && cp -f "$ROOT/results/$f" "$out/" && n=$((n + 1))
  done
  ls -la "$out"
}

wait_cmd() {
  local seconds="${1:-540}"
  local end=$((SECONDS + seconds))
  while driver_alive && ((SECONDS < end)); do sleep 5; done
  collect
  echo "== log (tail)"; tail -n 40 "$ROOT/log" 2>/dev/null
  [ -f "$ROOT/steps/gpu_table.out" ] && { echo "== GPU table so far"; cat "$ROOT/steps/gpu_table.out"; }
  status
}

stop() {
  if driver_alive; then kill -- "-$(cat "$ROOT/driver.pid")" && echo "driver stopped"
  else echo "no driver running"; fi
}

case "${1:-}" in
  prepare) prepare ;;
  start) start ;;
  wait) wait_cmd "${2:-540}" ;;
  status) status ;;
  collect) collect ;;
  stop) stop ;;
  _driver) _driver ;;
  _build) _build ;;
  _graph) _graph ;;
  _gpu_tests) _gpu_tests ;;
  *) sed -n '2,9p' "$SELF"; exit 2 ;;
esac
