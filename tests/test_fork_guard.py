"""The fork guard (`gnnorch.launch.fork_guard`): a rank process never gets a forked child that
is stuck inside CPython's after-fork reinitialisation (CPython gh-112275).

Each scenario runs in a fresh interpreter: at-fork hooks cannot be unregistered, and a stuck
child is made on purpose by a hook registered before the guard's (CPython runs after-fork hooks
in registration order, so a hook that blocks stands for the child that never gets out)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gnnorch.launch import fork_guard

SRC = str(Path(__file__).resolve().parents[1] / "src")
GUARDED = fork_guard.affected()
needs_guard = pytest.mark.skipif(not GUARDED, reason="this CPython is not guarded (>= 3.12)")

# A hook that blocks the child for good while `block_file` says so and records its pid.
PRELUDE = textwrap.dedent("""
    import json, os, signal, sys, time
    sys.path.insert(0, {src!r})
    BLOCK, PIDS = {block!r}, {pids!r}

    def block_child():
        if os.path.exists(BLOCK):
            with open(BLOCK) as f:
                left = int(f.read())
            if left > 0:
                with open(BLOCK, "w") as f:
                    f.write(str(left - 1))
                with open(PIDS, "a") as f:
                    f.write(f"{{os.getpid()}}\\n")
                while True:
                    time.sleep(60)

    os.register_at_fork(after_in_child=block_child)
    from gnnorch.launch import fork_guard
    fork_guard.ANNOUNCE_SECONDS = {announce}
""")
ANNOUNCE = 0.5


def _run(tmp_path: Path, body: str, stuck: int, timeout: float = 60) -> dict:
    block, pids = tmp_path / "block", tmp_path / "pids"
    block.write_text(str(stuck))
    prelude = PRELUDE.format(src=SRC, block=str(block), pids=str(pids), announce=ANNOUNCE)
    code = prelude + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["blocked_pids"] = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    return result


def _gone(pid: int) -> bool:
    """Neither running nor a zombie left to reap."""
    return not Path(f"/proc/{pid}").exists()


def test_affected_versions():
    assert fork_guard.affected((3, 11, 7)) and fork_guard.affected((3, 10, 13))
    assert not fork_guard.affected((3, 12, 0)) and not fork_guard.affected((3, 13, 1))


@needs_guard
def test_a_stuck_child_is_killed_reaped_and_forked_again(tmp_path):
    result = _run(tmp_path, """
        assert fork_guard.install()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status),
                          **fork_guard.stats().to_dict()}))
    """, stuck=1)
    assert result["code"] == 7                      # the second child ran the program
    assert result["stuck_killed"] == 1 and result["forks"] == 1
    [stuck] = result["blocked_pids"]
    assert stuck != result["pid"] and _gone(stuck)
    assert result["waited_seconds"] >= ANNOUNCE


@pytest.mark.slow
@needs_guard
def test_without_the_guard_the_same_child_hangs(tmp_path):
    """The scenario above is a real hang for a plain fork (so the test above can fail): a
    check of the test, not of gnnorch, so `slow` (11 s; `-m ''` runs it)."""
    result = _run(tmp_path, """
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        time.sleep(2)
        done, _ = os.waitpid(pid, os.WNOHANG)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(json.dumps({"ended": bool(done)}))
    """, stuck=1)
    assert result["ended"] is False


@needs_guard
def test_stuck_every_time_raises_fork_stuck_error_and_leaves_no_child(tmp_path):
    result = _run(tmp_path, """
        from gnnorch.errors import ForkStuckError
        fork_guard.install()
        try:
            os.fork()
        except ForkStuckError as exc:
            print(json.dumps({"error": str(exc), **fork_guard.stats().to_dict()}))
    """, stuck=100)
    assert "gh-112275" in result["error"] and "spawn" in result["error"]
    assert result["stuck_killed"] == fork_guard.ATTEMPTS and result["forks"] == 0
    assert len(result["blocked_pids"]) == fork_guard.ATTEMPTS
    assert all(_gone(pid) for pid in result["blocked_pids"])


@needs_guard
def test_interrupted_wait_kills_the_child_before_raising(tmp_path):
    result = _run(tmp_path, """
        fork_guard.ANNOUNCE_SECONDS = 30
        fork_guard.install()
        def interrupt(signum, frame):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        start = time.monotonic()
        try:
            os.fork()
        except KeyboardInterrupt:
            print(json.dumps({"after": time.monotonic() - start}))
    """, stuck=1)
    assert result["after"] < 10
    [stuck] = result["blocked_pids"]
    assert _gone(stuck)


@needs_guard
def test_children_fork_through_the_guard_too_and_uninstall_restores_fork(tmp_path):
    result = _run(tmp_path, """
        original = os.fork
        with fork_guard.guarding() as on:
            assert on and os.fork is not original
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:                      # the child's guard is fresh: it forks in turn
                grandchild = os.fork()
                if grandchild == 0:
                    os._exit(0)
                os.waitpid(grandchild, 0)
                os.write(write, json.dumps(fork_guard.stats().to_dict()).encode())
                os._exit(0)
            os.close(write)
            os.waitpid(pid, 0)
            child = json.loads(os.read(read, 1000))
            with fork_guard.guarding():       # nested: the outer installation stays
                pass
            assert os.fork is not original
        print(json.dumps({"restored": os.fork is original, "child": child,
                          **fork_guard.stats().to_dict()}))
    """, stuck=0)
    assert result["restored"]
    assert result["child"]["forks"] == 1 and result["forks"] == 1


@needs_guard
def test_the_real_race_forks_beside_threads_entering_python():
    """Threads made in C enter Python under a fresh thread state, as torch's gloo threads do
    after each collective: forks beside them never hang through the guard (the harness of
    scripts/fork_race.py: a child not ended 3 s after its fork counts as hung)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import fork_race

    row = fork_race.run(sys.executable, 400, guarded=True, churn=True)
    assert row["hung"] == 0 and row["forks"] == 400


def train_with_loader_workers(data, epochs):
    import torch.nn.functional as F
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    model = GraphSAGE(data.num_features, 16, 2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=35, shuffle=True, num_workers=2)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    return os.getpid()


def test_rank_processes_fork_their_loader_workers_through_the_guard():
    import gnnorch
    from helpers import cora

    original = os.fork
    runtime = gnnorch.Runtime(train_with_loader_workers, processes=2)
    pid = runtime(cora(), 2)
    assert pid != os.getpid() and os.fork is original     # the caller's fork is untouched
    for rank in (0, 1):
        stats = runtime.last_run.stats[rank]
        if not GUARDED:
            assert "fork_guard" not in stats
            continue
        guard = stats["fork_guard"]
        assert guard["forks"] >= 4                         # 2 workers x 2 epochs
        assert guard["stuck_killed"] >= 0 and guard["waited_seconds"] >= 0


def test_one_rank_runs_in_the_callers_process_unguarded():
    import gnnorch
    from helpers import cora

    original = os.fork
    runtime = gnnorch.Runtime(train_with_loader_workers, processes=1)
    assert runtime(cora(), 1) == os.getpid()
    assert os.fork is original and "fork_guard" not in runtime.last_run.stats[0]


@needs_guard
def test_pipe_descriptors_above_select_limit(tmp_path):
    result = _run(tmp_path, """
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 2048), hard), hard))
        held = [os.dup(0) for _ in range(1100)]
        fork_guard.install()
        pid = os.fork()
        if pid == 0:
            os._exit(3)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"top": max(held), "code": os.waitstatus_to_exitcode(status),
                          **fork_guard.stats().to_dict()}))
    """, stuck=1)
    assert result["top"] > 1024 and result["code"] == 3 and result["stuck_killed"] == 1
