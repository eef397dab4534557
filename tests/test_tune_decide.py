"""The tuner's pure decisions (gnnorch.tune.decide), alone: does tuning pay, how many epochs,
the probes' warm-up, a trial's status, the finalists of the race and its winner."""
import pytest

from gnnorch.tune.config import TuneConfig
from gnnorch.tune.decide import (Decision, epochs_hint, finalists, probe_warmup, race,
                                 trial_status, tuning_pays)

ONE = {"processes": 1, "sampler_cores": 0, "threads": 2}
TWO = {"processes": 2, "sampler_cores": 0, "threads": 1}
SAMPLER = {"processes": 1, "sampler_cores": 1, "threads": 1}


def measurement(step=0.1, batches=8, setup=1.0, length=100, exact=True, warmup=3, seeds=None):
    return {"batches": batches, "seconds": step * batches, "first_step_at": setup,
            "epoch_length": length, "epoch_length_exact": exact, "warmup": warmup,
            "seeds": 1024 * batches if seeds is None else seeds}


# ----------------------------------------------------------------------------- tuning pays


def test_long_run_pays_for_tuning_and_the_projection_is_explained():
    cfg = TuneConfig(budget=4, confirm_margin=0.0, warmup_batches=3, probe_batches=8,
                     max_overhead=0.2, launch_seconds=5.0)
    d = tuning_pays(measurement(), cfg, [ONE, TWO], ONE, epochs=50, source="argument 'epochs'")
    # run: 1 s set-up + 50 epochs x 100 steps x 0.1 s
    assert d.projected_run_seconds == pytest.approx(1.0 + 500.0)
    # probes: (3 warm-up + 8 measured) steps + 1 per started epoch (11 // 100 = 0); one more
    # probe (the space has 2 points) at the mean cost of the two: (1 + 1.1) and (1 + 1.1 + 5)
    assert d.projected_tuning_seconds == pytest.approx((2.1 + 7.1) / 2)
    assert d.tuned and d.epochs == 50 and d.epochs_source == "argument 'epochs'"
    assert "<= 20% of the projected run 501.0 s" in d.reason
    assert "100 steps/epoch" in d.reason and "ran untuned" not in d.reason


def test_short_run_does_not_pay():
    cfg = TuneConfig(budget=20)
    d = tuning_pays(measurement(length=7, exact=False), cfg, [ONE, TWO, SAMPLER], ONE,
                    epochs=3, source="assumed")
    assert not d.tuned and d.reason.endswith("ran untuned with the default configuration")
    assert "7+ steps/epoch" in d.reason                     # a lower bound, not exact
    # the finalists' second probes are part of the projection (3 points, 3 finalists)
    assert "for 5 more probes" in d.reason


def test_nothing_measured_is_not_tuned():
    d = tuning_pays({"batches": 0}, TuneConfig(), [ONE], ONE, 10, "assumed")
    assert d == Decision(False, "no steady-state step could be measured")


def test_steps_without_counted_seeds_are_not_tuned():
    """Plans are compared by seeds per second: with no seed counted there is nothing to
    compare (and -log(0) would be the tuner's objective)."""
    d = tuning_pays(measurement(seeds=0), TuneConfig(), [ONE, TWO], ONE, 500, "assumed")
    assert not d.tuned and "counted no seeds" in d.reason


def test_points_not_enumerable_use_the_default_point():
    cfg = TuneConfig(budget=3, confirm_margin=0.0, warmup_batches=0, probe_batches=2)
    d = tuning_pays(measurement(step=1.0, setup=0.0, length=1000, warmup=0), cfg, [], TWO, 1,
                    "x")
    assert d.projected_tuning_seconds == pytest.approx(2 * (2.0 + cfg.launch_seconds))


def test_epochs_hint_reads_the_setting_then_the_argument_then_assumes():
    def train(data, num_epochs=7, flag=True):
        pass

    assert epochs_hint(train, (None,), {}, TuneConfig()) == (7, "argument 'num_epochs'")
    assert epochs_hint(train, (None, 12), {}, TuneConfig()) == (12, "argument 'num_epochs'")
    assert epochs_hint(train, (None,), {}, TuneConfig(epochs=3)) == (3, "tune['epochs']")
    assert epochs_hint(lambda data, epochs=True: 0, (None,), {}, TuneConfig(assumed_epochs=4)) \
        == (4, "assumed (no epochs argument found)")
    assert epochs_hint(len, (), {}, TuneConfig())[1].startswith("assumed")


# ----------------------------------------------------------------------------- probes


def trial(index, config, throughput, chosen_by="tuner", warmup=0):
    return {"index": index, "config": config, "throughput": throughput,
            "chosen_by": chosen_by, "warmup_batches": warmup}


def test_probe_warmup_follows_the_default_run_less_its_prefetch_allowance():
    cfg = TuneConfig(warmup_batches=3)
    assert probe_warmup([], cfg) == 3
    assert probe_warmup([trial(0, SAMPLER, 10.0, "default", warmup=9)], cfg) == 7
    assert probe_warmup([trial(0, ONE, 10.0, "default", warmup=1)], cfg) == 3
    assert probe_warmup([trial(0, ONE, 10.0, "tuner", warmup=9)], cfg) == 3


@pytest.mark.parametrize("m, error, status", [
    ({"complete": True}, None, "ok"), ({"complete": False}, None, "short"),
    (None, None, "short"), ({"complete": True}, "ValueError: x", "failed"),
])
def test_trial_status(m, error, status):
    assert trial_status(m, error) == status


# ----------------------------------------------------------------------------- racing


def test_finalists_are_the_plans_near_the_best_probe_best_first():
    c = [{"processes": 1, "sampler_cores": 0, "threads": t} for t in range(1, 6)]
    trials = [trial(0, c[0], 100.0), trial(1, c[1], 120.0), trial(2, c[2], 90.0),
              trial(3, c[3], None), trial(4, c[4], 104.0), trial(5, c[0], 101.0)]
    # within 15 % of 120 (>= 102): c[1], c[4]; c[0]'s best is 101
    assert finalists(trials, 0.15, 3) == [c[1], c[4]]
    assert finalists(trials, 0.2, 3) == [c[1], c[4], c[0]]
    assert finalists(trials, 0.2, 2) == [c[1], c[4]]
    assert finalists(trials, 0.0, 3) == [] and finalists(trials, 0.2, 1) == []
    assert finalists(trials, 0.01, 3) == []                  # a single finalist: no race
    assert finalists([trial(0, c[0], None)], 0.15, 3) == []


def test_race_picks_the_best_mean_and_names_its_last_probe():
    trials = [trial(0, ONE, 100.0, "default"), trial(1, TWO, 110.0), trial(2, SAMPLER, 50.0),
              trial(3, TWO, 90.0, "confirm"), trial(4, ONE, 105.0, "confirm")]
    result = race(trials, [TWO, ONE], ONE, 0.15)
    assert result.best == {"config": ONE, "throughput": pytest.approx(102.5), "trial": 4}
    assert result.confirmation["chosen"] == ONE and result.confirmation["margin"] == 0.15
    assert [f["mean"] for f in result.confirmation["finalists"]] == [100.0, 102.5]
    assert result.speedup == pytest.approx(1.0)


def test_race_tie_goes_to_the_better_single_probe_and_unmeasured_default_has_no_speedup():
    trials = [trial(0, ONE, None, "default"), trial(1, TWO, 110.0), trial(2, SAMPLER, 100.0),
              trial(3, TWO, 90.0, "confirm"), trial(4, SAMPLER, 100.0, "confirm")]
    result = race(trials, [TWO, SAMPLER], ONE, 0.15)
    assert result.best["config"] == TWO and result.best["trial"] == 3
    assert result.speedup is None
