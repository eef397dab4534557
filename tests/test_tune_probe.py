"""The probe meter on scripted step times: warm-up and epoch starts are not measured, the
default run's measurement waits until step times settle, and the budget ends a probe."""
import pytest

import os
import pickle

from gnnorch.tune.probe import EpochReport, ProbeEnd, ProbeHook, ProbeMeter, combine


class FakeTimer:
    def __init__(self, loader=0, epoch=0, total=None):
        self.loader, self.epoch, self.total = loader, epoch, total
        self.batch_ends, self.batch_seeds = [], []


def feed(meter, durations, epoch_len=100, seeds=10):
    """Drive `meter` with steps of the given durations; returns the step that ended it."""
    clock, timer = 0.0, None
    for i, d in enumerate(durations):
        if i % epoch_len == 0:
            timer = FakeTimer(epoch=i // epoch_len)
            clock += 5.0                          # time between epochs is never measured
        clock += d
        if step(meter, timer, clock, seeds):
            return i + 1
    return None


def step(meter, timer, clock, seeds=10):
    """One training step of `timer`'s epoch ending at `clock`; True when the meter ends it."""
    timer.batch_ends.append(clock)
    timer.batch_seeds.append(seeds)
    try:
        meter(timer)
    except ProbeEnd:
        return True
    return False


def test_fixed_warmup_and_budget():
    meter = ProbeMeter(warmup=2, batches=4)
    assert feed(meter, [9.0, 9.0, 1.0, 1.0, 1.0, 1.0, 1.0]) == 6
    st = meter.summary()
    assert st["batches"] == 4 and st["seconds"] == pytest.approx(4.0) and st["seeds"] == 40
    assert combine({0: {"stats": {"probe": st}}})["throughput"] == pytest.approx(10.0)


def test_first_step_of_each_epoch_is_not_measured():
    meter = ProbeMeter(warmup=0, batches=4)
    assert feed(meter, [1.0] * 10, epoch_len=3) == 6          # steps 2,3,5,6 measured
    assert meter.summary()["seconds"] == pytest.approx(4.0)
    assert meter.summary()["epoch_length"] == 3 and meter.summary()["epoch_length_exact"]


def test_converge_mode_waits_for_settled_steps():
    meter = ProbeMeter(warmup=1, batches=4, converge=0.15)
    durations = [20.0, 8.0, 6.0, 4.0, 3.0, 1.0, 1.0, 1.05, 0.95, 1.0, 1.0]
    end = feed(meter, durations)
    st = meter.summary()
    assert end == 9 and st["batches"] == 4
    assert st["seconds"] == pytest.approx(4.0)                # the settled steps only
    assert st["warmup"] == 5                                  # what the probes will skip


def test_converge_mode_gives_up_after_max_extra():
    meter = ProbeMeter(warmup=0, batches=2, converge=0.01, max_extra=3)
    assert feed(meter, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]) == 6


def test_combine_uses_the_slowest_rank():
    summaries = {r: {"stats": {"probe": {"batches": 4, "seeds": 20, "seconds": s, "steps": 6,
                                         "warmup": 2, "first_step_at": 1.0, "epoch_length": 7,
                                         "epoch_length_exact": True, "batch_size": 5,
                                         "complete": True}}} for r, s in ((0, 2.0), (1, 4.0))}
    m = combine(summaries)
    assert m["throughput"] == pytest.approx(40 / 4.0)
    assert m["batch_size_per_rank"] == [5, 5] and m["complete"]


def test_a_probe_that_counted_no_seeds_is_unmeasured_not_zero():
    """Batches whose seeds the meter cannot count give no throughput (a failed probe to the
    tuner), never 0 seeds/s: the tuner's objective is -log(throughput)."""
    meter = ProbeMeter(warmup=0, batches=3)
    clock, timer = 0.0, FakeTimer()
    while not step(meter, timer, clock := clock + 1.0, seeds=0):
        pass
    m = combine({0: {"stats": {"probe": meter.summary()}}})
    assert m["seeds"] == 0 and m["batches"] == 3
    assert m["throughput"] is None and m["steady_throughput"] is None


def test_epoch_start_is_amortised_over_short_epochs():
    """Epochs of 4 steps whose starts cost 5 s: the steady rate misses them, the combined
    throughput charges each epoch one start (the first epoch's start, with its one-off set-up,
    is never used)."""
    meter = ProbeMeter(warmup=0, batches=6)
    clock = 0.0
    for epoch in range(4):
        timer = FakeTimer(epoch=epoch)
        timer.start = clock
        for i in range(4):
            clock += (50.0 if epoch == 0 else 5.0) if i == 0 else 1.0
            if step(meter, timer, clock):
                break
    st = meter.summary()
    assert st["epoch_start_seconds"] == pytest.approx(5.0)
    m = combine({0: {"stats": {"probe": st}}})
    assert m["steady_throughput"] == pytest.approx(10.0)
    assert m["throughput"] == pytest.approx(40 / (5.0 + 3 * 1.0))


def test_one_off_measurement_time_is_taken_out_of_measured_steps():
    """Steps of 1 s, of which the second and third also ran 4 s of rewrite probes: the meter
    measures 1 s per step all the same."""
    class Ctx:
        spent = 0.0

        def one_off_seconds(self):
            return self.spent

    ctx = Ctx()
    meter = ProbeMeter(warmup=0, batches=4)
    meter.start = 0.0                                        # the fake clock's origin
    timer = FakeTimer()
    timer.ctx = ctx
    clock = 0.0
    for i in range(6):
        extra = 4.0 if i in (1, 2) else 0.0
        ctx.spent += extra
        clock += 1.0 + extra
        if step(meter, timer, clock):
            break
    st = meter.summary()
    assert st["batches"] == 4 and st["seconds"] == pytest.approx(4.0)
    assert st["first_step_at"] == pytest.approx(1.0)


def test_epoch_length_is_exact_when_the_loader_tells_it():
    """`EpochTimer.total` (the loader's length) makes the epoch length exact from its first
    step; without it the steps seen so far are a lower bound until an epoch ends."""
    told, untold = ProbeMeter(warmup=0, batches=50), ProbeMeter(warmup=0, batches=50)
    for meter, total in ((told, 40), (untold, None)):
        timer = FakeTimer(total=total)
        for clock in range(1, 4):
            step(meter, timer, float(clock))
    assert told.summary()["epoch_length"] == 40 and told.summary()["epoch_length_exact"]
    assert untold.summary()["epoch_length"] == 3
    assert not untold.summary()["epoch_length_exact"]


class Ctx:
    rank = 0

    def __init__(self):
        self.stats, self.batch_callbacks, self.epochs = {}, [], []


def test_probe_hook_installs_a_meter_and_owns_probe_end():
    hook, ctx = ProbeHook(warmup=1, batches=2), Ctx()
    hook.prepare(ctx)
    assert isinstance(ctx.batch_callbacks[0], ProbeMeter) and "probe" in ctx.stats
    assert hook.finish(ctx, ProbeEnd()) is True
    assert not hook.finish(ctx, None) and not hook.finish(ctx, KeyError("user bug"))


def test_epoch_report_calls_back_here_and_writes_a_file_from_a_rank_process(tmp_path):
    seen = []
    hook = EpochReport(seen.append, path=tmp_path / "epochs.json")
    ctx = Ctx()
    hook.prepare(ctx)                                   # this process: a direct call
    ctx.epochs.append(type("Record", (), {"to_dict": lambda self: {"epoch": 0}})())
    assert seen == [[{"epoch": 0}]] and not (tmp_path / "epochs.json").exists()
    copy = pickle.loads(pickle.dumps(hook))            # what a rank process gets
    assert copy.callback is None and copy.path == hook.path
    copy.owner = os.getpid() + 1                        # as if unpickled in another process
    ctx = Ctx()
    copy.prepare(ctx)
    ctx.epochs.append(type("Record", (), {"to_dict": lambda self: {"epoch": 1}})())
    assert (tmp_path / "epochs.json").exists()
