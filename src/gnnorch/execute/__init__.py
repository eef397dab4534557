"""One way to run the user's function: ``run(plan, request, hooks) -> (value, RunInfo)``.

Used alike by `Runtime` (an untuned call), the tuner's probes and the tuner's real run.
`backends` chooses where the ranks live (the caller's process, rank processes we start, or an
existing torch.distributed world: `world` finds it and joins its group, `world_run` runs one
rank of it, `watchdog` fails every rank when one fails) -- the only place that tells one rank
from many;
`rank` is one rank's session wherever it runs (rank context, seams, hooks, user function);
`hooks` is how a caller adds to a run (probe meters, epoch feeds, muting) without the launcher
knowing of it; `request` and `info` are what goes in and what comes out.
"""
from . import world
from .backends import Backend, ExistingWorld, InProcess, RankProcesses, backend_for, run
from .hooks import Hook, Mute
from .info import RunInfo
from .output import OutputCapture
from .rank import RankJob, run_session
from .request import Request

__all__ = ["run", "backend_for", "Backend", "InProcess", "RankProcesses", "ExistingWorld",
           "Hook", "Mute", "RunInfo", "Request", "RankJob", "run_session", "OutputCapture",
           "world"]
