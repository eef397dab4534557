"""The zygote process's side of warm rank starts (`gnnorch.launch.zygote` is the caller's):
check that forking is safe, fork a rank on request, make the child the rank a fresh
``python -m gnnorch.launch.worker`` would be, reap children and report their ends.

Started as ``python -c`` `gnnorch.launch.zygote.ZYGOTE_COMMAND`: importing this module imports
the package first, whose __init__ imports the runtime (torch, PyG and every seam a payload
names); `main` imports what a rank imports besides, says hello and serves. The protocol's two
primitives, `send` and `recv`, are shared with the caller's side.
"""
from __future__ import annotations

import os
import pickle
import socket
import sys

from .readable import readable

_PACKET = 1 << 20     # a message's most bytes (the environment is the largest: a few KiB)
_REAP_SECONDS = 0.05  # how often the zygote looks for ended children while idle


def fork_hazards() -> list[str]:
    """Why forking this process could give a broken child (empty: none found). Linux only:
    elsewhere the reason is the platform."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/task"):
        return [f"forking a rank is supported on Linux only (this is {sys.platform})"]
    hazards = []
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        hazards.append(f"{threads} threads (a fork keeps only the caller's)")
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        if any("libcuda.so" in line for line in maps):
            hazards.append("the CUDA driver is loaded (CUDA cannot be used after a fork)")
    torch = sys.modules.get("torch")
    if torch is not None and not _generator_unused(torch):
        hazards.append("torch's default generator has been used")
    return hazards


def _generator_unused(torch) -> bool:  # noqa: ANN001 - the torch module
    """Whether torch's default CPU generator is still at the state its seed gives (compared as
    bytes: a torch operation here could start threads)."""
    fresh = torch.Generator()
    fresh.manual_seed(torch.initial_seed())
    return torch.get_rng_state().numpy().tobytes() == fresh.get_state().numpy().tobytes()


def _reseed_like_a_fresh_interpreter() -> None:
    """A fresh interpreter's generators are its own: Python's `random` reseeds itself after a
    fork; numpy's global generator is seeded from the OS at import, and so is torch's default
    generator where torch seeds it per process (torch 2.13; older torch starts every process
    at one fixed seed, which a fresh `torch.Generator` has, and that is kept)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None and torch.initial_seed() != torch.Generator().initial_seed():
        torch.seed()


def send(sock: socket.socket, message: tuple, fds: tuple[int, ...] = ()) -> None:
    data = pickle.dumps(message)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv(sock: socket.socket, fds: int = 0) -> tuple[tuple | None, list[int]]:
    """One message and the fds that came with it; (None, []) at end of stream."""
    data, received, _flags, _addr = socket.recv_fds(sock, _PACKET, fds) if fds else \
        (sock.recv(_PACKET), [], 0, None)
    if not data:
        for fd in received:
            os.close(fd)
        return None, []
    return pickle.loads(data), received


def _become_rank(sock: socket.socket, stdio: list[int], env: dict[str, str]) -> None:
    """In a fresh child: become a rank process as a fresh one would be (`zygote.WORKER_ARGV`)."""
    try:
        os.setsid()
        sock.close()
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        for fd in stdio:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        from . import worker

        sys.argv[:] = ["-c"]   # as a fresh rank's, `python -c` (`zygote.WORKER_ARGV`)
        _reseed_like_a_fresh_interpreter()
        worker.main()   # ends with os._exit
    finally:
        os._exit(1)


def _report_ended(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        send(sock, ("exit", pid, code))


def serve(sock: socket.socket) -> None:
    """The zygote's loop: fork on request, report ended children, exit when the caller goes."""
    children: set[int] = set()
    while True:
        ready = readable(sock.fileno(), _REAP_SECONDS)
        _report_ended(sock, children)
        if not ready:
            continue
        message, stdio = recv(sock, fds=3)
        if message is None:
            return
        hazards = fork_hazards()
        if hazards:
            for fd in stdio:
                os.close(fd)
            send(sock, ("refused", "; ".join(hazards)))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_rank(sock, stdio, message[1])
        for fd in stdio:
            os.close(fd)
        children.add(pid)
        send(sock, ("forked", pid))


def main() -> None:
    """The zygote process (`ZYGOTE_COMMAND`): importing this module imported the package,
    whose __init__ imports the runtime (torch, PyG and every seam a payload names); here, what
    a rank imports besides, and the samplers' compiled bodies (ranks inherit them; compiling
    starts no thread, `fork_hazards` checks); then the hello and the loop."""
    sock = socket.socket(fileno=int(os.environ.pop("GNNORCH_ZYGOTE_FD")))
    import torch.distributed  # noqa: F401

    from ..sampling.hetero import compiled_hetero_sampler
    from ..sampling.uniform import compiled_sampler
    from . import context, plan, serialize, worker  # noqa: F401
    compiled_sampler()
    compiled_hetero_sampler()
    send(sock, ("hello", os.getpid(), fork_hazards()))
    serve(sock)
