#!/usr/bin/env bash
# Who enters Python from C in gnnorch's rank processes (not in CI; needs gdb and ptrace rights).
#
#     bash scripts/trace_thread_states.sh [corpus case, default reddit]
#
# Runs one corpus case (tests/pyg_examples) with processes=2, attaches gdb to each rank process
# with a breakpoint on CPython's PyThreadState_New (a thread made in C entering Python: it takes
# the thread-state lock without the GIL, the fork race of gnnorch.launch.fork_guard), and prints,
# per rank, how many calls there were and the distinct call stacks (C++ frames, counted).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case_name="${1:-reddit}"
py="${GNNORCH_VENV:-$root/.venv}/bin/python"
work="$(mktemp -d)"
cat > "$work/gdb.cmds" <<'GDB'
set pagination off
set print thread-events off
handle SIGUSR1 SIGUSR2 SIGCHLD SIGPIPE SIGALRM nostop noprint pass
break PyThreadState_New
commands
silent
printf "=== PyThreadState_New\n"
bt 10
continue
end
continue
GDB
cd "$root"
"$py" - "$case_name" > "$work/run.log" 2>&1 <<'PY' &
import sys
sys.path.insert(0, "tests/pyg_examples")
import torch, corpus, gnnorch
case = next(c for c in corpus.load_cases() if c.name == sys.argv[1])
torch.manual_seed(0)
args, kwargs = case.make_args(0)
torch.manual_seed(0)
print(gnnorch.Runtime(case.train, **{**case.options, "processes": 2}, verbose=False)(*args, **kwargs))
PY
caller=$!
seen=""
while kill -0 "$caller" 2>/dev/null; do
  for p in $(pgrep -P "$caller" || true); do
    case " $seen " in *" $p "*) continue;; esac
    seen="$seen $p"
    timeout 300 gdb -p "$p" -batch -x "$work/gdb.cmds" > "$work/gdb.$p.log" 2>&1 &
  done
  sleep 0.2
done
wait
tail -n 1 "$work/run.log"
for p in $seen; do
  log="$work/gdb.$p.log"
  echo "rank process $p: $(grep -c '=== PyThreadState_New' "$log" || true) calls of PyThreadState_New"
  awk '/=== PyThreadState_New/ {if (s) print s; s=""; next} /^#/ {
         f=$0; sub(/^#[0-9]+ +(0x[0-9a-f]+ in )?/, "", f); sub(/ \(.*/, "", f); s=s (s?" <- ":"") f }
       END {if (s) print s}' "$log" | sort | uniq -c | sort -rn | head -5
done
rm -rf "$work"
