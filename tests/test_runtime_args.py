"""`Runtime`'s arguments: a typed keyword-only signature, settings grouped in config dataclasses
that hold every default once, clear errors that say what to pass (also for the keywords that
moved into a config), and nothing communicated before a call."""
import dataclasses
import inspect
import os
import socket
from pathlib import Path

import pytest
import torch.distributed as dist

import gnnorch
from gnnorch import (CacheConfig, DataPathConfig, LaunchConfig, PartitionConfig, RunOptions,
                     TuneConfig)
from gnnorch.execute import Request, world

SIGNATURE = ["processes", "device", "sampler", "trim", "rewrite", "cache", "partition_features",
             "data_path", "autotune", "seed", "verbose", "launch", "tune"]


def train():
    return 1


# -- the signature -----------------------------------------------------------------------------
def test_signature_is_explicit_typed_and_keyword_only():
    params = inspect.signature(gnnorch.Runtime).parameters
    assert list(params) == ["train"] + SIGNATURE
    assert params["train"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    for name in SIGNATURE:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].annotation is not inspect.Parameter.empty, name
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert gnnorch.VALID_OPTIONS == tuple(SIGNATURE)


def test_every_argument_is_documented_and_the_trim_doc_is_true():
    doc = gnnorch.Runtime.__doc__
    for name in ("train", *SIGNATURE):
        assert f"\n        {name}: " in doc, name
    assert "NaN" not in doc and "exact" in doc and "PrefixExact" in doc


# -- defaults in one place ---------------------------------------------------------------------
def test_signature_defaults_are_the_config_dataclasses_defaults():
    params = inspect.signature(gnnorch.Runtime).parameters
    run_defaults = {f.name: f.default for f in dataclasses.fields(RunOptions)
                    if f.default is not dataclasses.MISSING}
    for name in ("sampler", "trim", "rewrite", "cache", "partition_features"):
        assert params[name].default == run_defaults[name], name
    for name in ("data_path", "launch", "tune"):   # None: the config's own defaults
        assert params[name].default is None, name
    rt = gnnorch.Runtime(train)
    assert rt.run_options == RunOptions()
    assert rt.run_options.data_path == DataPathConfig()
    assert rt.launch == LaunchConfig() and rt.tune_config == TuneConfig()
    # the allocator travels in RunOptions; its default is LaunchConfig's
    assert RunOptions().allocator == LaunchConfig().allocator


def test_request_takes_the_configs_and_repeats_no_default():
    names = {f.name for f in dataclasses.fields(Request)}
    assert {"options", "launch"} <= names
    assert not names & {f.name for f in dataclasses.fields(LaunchConfig)}
    assert not names & {f.name for f in dataclasses.fields(RunOptions)}
    request = Request(train)
    assert request.options == RunOptions() and request.launch == LaunchConfig()
    assert request.collective_timeout == LaunchConfig().collective_timeout
    moved = request.replace(log_dir="/tmp/x", seed=3)   # a launch field by its name
    assert moved.launch == LaunchConfig(log_dir="/tmp/x") and moved.seed == 3
    assert request.launch.log_dir is None                # the original is untouched


# -- configs: objects and dicts alike -------------------------------------------------------------
def test_configs_are_taken_as_objects_or_dicts():
    by_object = gnnorch.Runtime(train, processes=1, launch=LaunchConfig(threads=1, bind=False),
                                cache=CacheConfig(staleness=2),
                                partition_features=PartitionConfig(hot_budget_mb=1.0),
                                data_path=DataPathConfig(mode="host"),
                                tune=TuneConfig(budget=3))
    by_dict = gnnorch.Runtime(train, processes=1, launch={"threads": 1, "bind": False},
                              cache={"staleness": 2}, partition_features={"hot_budget_mb": 1.0},
                              data_path={"mode": "host"}, tune={"budget": 3})
    for rt in (by_object, by_dict):
        assert rt.plan.as_tuple() == (1, 0, 1) and rt.launch.bind is False
        assert rt.run_options.cache_config == CacheConfig(staleness=2)
        assert rt.run_options.partition_config == PartitionConfig(hot_budget_mb=1.0)
        assert rt.run_options.data_path.mode == "host" and rt.tune_config.budget == 3
    assert by_object.run_options == by_dict.run_options


def test_configs_round_trip_through_json_values(tmp_path):
    launch = LaunchConfig(threads=2, log_dir=tmp_path, allocator="default")
    assert LaunchConfig.from_dict(launch.to_dict()) == LaunchConfig(
        threads=2, log_dir=str(tmp_path), allocator="default")
    assert TuneConfig(report_dir=tmp_path).to_dict()["report_dir"] == str(tmp_path)
    assert LaunchConfig(threads=2, sampler_cores=1).plan_given() == {"sampler_cores": 1,
                                                                    "threads": 2}


@pytest.mark.parametrize("kwargs, error, match", [
    ({"launch": 3}, ValueError, "launch must be None, a gnnorch.LaunchConfig or a dict"),
    ({"launch": {"thread": 1}}, TypeError, r"launch got unexpected setting\(s\) \['thread'\]"),
    ({"launch": {"allocator": "fast"}}, ValueError, "launch.allocator must be one of"),
    ({"launch": {"start_timeout": 0}}, ValueError, "launch.start_timeout"),
    ({"tune": {"report_dir": 3}}, ValueError, r"tune\['report_dir'\] must be a folder path"),
    ({"cache": "yes"}, ValueError, "cache must be True, False"),
])
def test_bad_config_values_name_the_setting(kwargs, error, match):
    with pytest.raises(error, match=match):
        gnnorch.Runtime(train, **kwargs)


# -- keywords that moved, and unknown ones ---------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"staleness": 2},
     "staleness moved: pass cache=gnnorch.CacheConfig(staleness=2) or cache={'staleness': 2}"),
    ({"hot_ratio": "auto"},
     "hot_ratio moved: pass cache=gnnorch.CacheConfig(hot_ratio='auto') or "
     "cache={'hot_ratio': 'auto'}"),
    ({"report_dir": "out"},
     "report_dir moved: pass tune=gnnorch.TuneConfig(report_dir='out') or "
     "tune={'report_dir': 'out'}"),
    ({"threads": 1, "bind": False},
     "threads and bind moved: pass launch=gnnorch.LaunchConfig(threads=1, bind=False) or "
     "launch={'threads': 1, 'bind': False}"),
    ({"sampler_cores": 1, "staleness": 0},
     "sampler_cores moved: pass launch=gnnorch.LaunchConfig(sampler_cores=1) or "
     "launch={'sampler_cores': 1}; staleness moved: pass cache=gnnorch.CacheConfig(staleness=0) "
     "or cache={'staleness': 0}"),
])
def test_moved_keywords_say_where_they_went(kwargs, message):
    with pytest.raises(TypeError) as info:
        gnnorch.Runtime(train, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("name, value", [
    ("log_dir", "logs"), ("start_timeout", 5.0), ("collective_timeout", 60.0),
    ("allocator", "default"), ("sampler_cores", 0), ("threads", 1), ("bind", False),
    ("staleness", 1), ("hot_ratio", 0.2), ("report_dir", "out"),
])
def test_every_moved_keyword_is_refused_and_its_advice_works(name, value):
    with pytest.raises(TypeError, match=f"{name} moved: pass (launch|cache|tune)="):
        gnnorch.Runtime(train, processes=1, **{name: value})
    where = gnnorch.runtime.MOVED[name][0]
    rt = gnnorch.Runtime(train, processes=1, autotune=False, **{where: {name: value}})
    config = {"launch": rt.launch, "tune": rt.tune_config,
              "cache": rt.run_options.cache_config}[where]
    assert getattr(config, name) == value


def test_unknown_keyword_lists_valid_options():
    with pytest.raises(TypeError) as info:
        gnnorch.Runtime(train, procesess=2)
    msg = str(info.value)
    assert "procesess" in msg
    for name in SIGNATURE:
        assert name in msg


# -- values --------------------------------------------------------------------------------------
def test_train_not_callable():
    with pytest.raises(ValueError, match="train must be a callable"):
        gnnorch.Runtime(42)


def _nested(processes):
    return gnnorch.Runtime(lambda: 1, processes=processes)()


@pytest.mark.parametrize("outer, inner", [(1, 1), (2, 1), (1, 2)])
def test_nested_runtime_says_so(outer, inner):
    """A Runtime made inside another's training function. Before, inside two ranks it failed
    with a core-plan ValueError (it took the ranks' world for a torchrun world to join)."""
    with pytest.raises(RuntimeError, match="Runtime calls cannot be nested"):
        gnnorch.Runtime(_nested, processes=outer)(inner)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_processes_out_of_range(value):
    with pytest.raises(ValueError, match=r"processes must be an integer in 1\.\.\d+"):
        gnnorch.Runtime(train, processes=value)


def test_more_ranks_than_usable_cores():
    usable = len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match=rf"processes must be an integer in 1\.\.{usable}, "
                                         rf"got {usable + 1}"):
        gnnorch.Runtime(train, processes=usable + 1)


def test_plan_that_oversubscribes_cores():
    usable = len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match=r"allowed: processes\*\(sampler_cores\+threads\)"):
        gnnorch.Runtime(train, processes=1, launch={"sampler_cores": 1, "threads": usable})


@pytest.mark.parametrize("kwargs, name", [
    ({"launch": {"threads": 0}}, "threads"), ({"launch": {"sampler_cores": -1}}, "sampler_cores"),
    ({"device": "tpu"}, "device"), ({"launch": {"bind": "yes"}}, "bind"), ({"seed": -3}, "seed"),
    ({"launch": {"start_timeout": 0}}, "start_timeout"), ({"verbose": 1}, "verbose"),
    ({"sampler": "dgl"}, "sampler"), ({"trim": "yes"}, "trim"), ({"rewrite": 2}, "rewrite"),
])
def test_bad_values_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gnnorch.Runtime(train, **kwargs)


def test_default_plan_is_one_rank_on_all_cores():
    rt = gnnorch.Runtime(train)
    assert rt.plan.processes == 1 and rt.plan.sampler_cores == 0
    assert rt.plan.threads == rt.topology.num_usable
    assert rt.summary() is None                      # before any call
    assert rt() == 1
    assert rt.summary().startswith("gnnorch: 1 rank on cpu")


# -- no communication before a call ------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def torchrun_env_without_local_ranks(monkeypatch):
    """Rank 0 of 2 as a launcher that sets no LOCAL_RANK / LOCAL_WORLD_SIZE starts it: this
    node's ranks can only be found through the group's store. Any communication fails loudly."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(name, value)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)

    def communicated(*args, **kwargs):
        raise AssertionError("Runtime() communicated before a call")

    monkeypatch.setattr(dist, "init_process_group", communicated)
    monkeypatch.setattr(world, "default_store", communicated)


def test_runtime_starts_no_process_group(torchrun_env_without_local_ranks):
    rt = gnnorch.Runtime(train, launch={"collective_timeout": 5})
    assert not dist.is_initialized()
    assert (rt.world.rank, rt.world.size, rt.world.local_size) == (0, 2, None)
    assert rt.plan is None and rt.autotune is False       # the layout is found at the call
    assert "plan at the first call" in repr(rt)
    # what can be checked without the layout still is, before any communication
    with pytest.raises(ValueError, match="processes=3 but this process is rank 0 of 2"):
        gnnorch.Runtime(train, processes=3)
    with pytest.raises(ValueError, match="autotune must be False or None inside"):
        gnnorch.Runtime(train, autotune=True)
    assert not dist.is_initialized()


def test_the_call_finds_the_layout(torchrun_env_without_local_ranks, monkeypatch):
    """At the call (and only then) the node's ranks are found and the plan is made."""
    rt = gnnorch.Runtime(train, launch={"threads": 1})
    asked = []

    def with_layout(found, device, timeout):
        asked.append((device, timeout))
        return dataclasses.replace(found, local_rank=0, local_size=1)

    monkeypatch.setattr(world, "with_layout", with_layout)
    monkeypatch.setattr(gnnorch.runtime.execute, "run",
                        lambda plan, request: (plan, None))
    monkeypatch.setattr(gnnorch.runtime, "render_summary", lambda info, tuning=None: "")
    assert rt().as_tuple() == (2, 0, 1)
    assert asked == [("cpu", LaunchConfig().collective_timeout)]
    assert rt.plan.as_tuple() == (2, 0, 1)


# -- exports -------------------------------------------------------------------------------------
def test_public_configs_errors_and_warnings_are_exported():
    for name in gnnorch.__all__:
        assert hasattr(gnnorch, name), name
    for name in ("LaunchConfig", "CacheConfig", "TuneConfig", "PartitionConfig",
                 "DataPathConfig", "RunOptions", "TrimmingWarning", "CacheWarning",
                 "StalenessError", "TrimmingError", "GnnorchError", "GnnorchWarning"):
        assert name in gnnorch.__all__, name
    assert issubclass(gnnorch.StalenessError, gnnorch.GnnorchError)
    assert issubclass(gnnorch.StalenessError, RuntimeError)
    assert not issubclass(gnnorch.StalenessError, AssertionError)
    from gnnorch.cache import CacheWarning, StalenessError
    assert StalenessError is gnnorch.StalenessError and CacheWarning is gnnorch.CacheWarning
    for warning in (gnnorch.TrimmingWarning, gnnorch.CacheWarning):
        assert issubclass(warning, gnnorch.GnnorchWarning)
        assert issubclass(warning, UserWarning)


def test_architecture_doc_describes_the_new_shape():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    assert "_Options" not in doc


def test_every_error_and_warning_of_gnnorch_errors_is_exported():
    import gnnorch.errors as errors

    public = [name for name, value in vars(errors).items()
              if isinstance(value, type) and issubclass(value, (errors.GnnorchError,
                                                                errors.GnnorchWarning))]
    assert public and not set(public) - set(gnnorch.__all__)
    for name in public:
        cls = getattr(errors, name)
        if issubclass(cls, errors.GnnorchError) and cls is not errors.GnnorchError:
            # each error also says what kind of failure it is through a built-in base
            assert issubclass(cls, (TypeError, ValueError, RuntimeError, OSError)), name
            assert not issubclass(cls, AssertionError), name
