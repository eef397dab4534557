"""A rewritten layer call's arguments by name (`gnnorch.rewrite.rules.base.bind_call`): the
same as ``inspect.Signature.bind`` with the defaults applied, for every rule's layer type and
every way a call can pass them, malformed calls included."""
import inspect
import itertools

import pytest

from gnnorch.rewrite.rules import RULES
from gnnorch.rewrite.rules.base import bind_call


def _inspect_bind(layer_type, args, kwargs):
    bound = inspect.signature(layer_type.forward).bind(object(), *args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments)
    del call["self"]
    return call


def _calls(layer_type):
    """Every split of the parameters into positional / keyword / left out, plus malformed
    ones: too many positionals, an unknown keyword, a parameter given twice."""
    names = list(inspect.signature(layer_type.forward).parameters)[1:]
    values = {n: f"<{n}>" for n in names}
    for k in range(len(names) + 1):
        positional = tuple(values[n] for n in names[:k])
        rest = names[k:]
        for chosen in itertools.product((True, False), repeat=len(rest)):
            yield positional, {n: values[n] for n, use in zip(rest, chosen) if use}
    yield tuple(values.values()) + ("extra",), {}
    yield (values[names[0]],), {"not_a_parameter": 1}
    yield (values[names[0]],), {names[0]: "twice"}
    yield (), {}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.layer_type.__name__)
def test_bind_arguments_equals_inspect(rule):
    layer_type = rule.layer_type
    checked = 0
    for args, kwargs in _calls(layer_type):
        try:
            expected = _inspect_bind(layer_type, args, kwargs)
        except TypeError:
            with pytest.raises(TypeError):
                bind_call(layer_type, object(), args, kwargs)
            continue
        got = bind_call(layer_type, object(), args, kwargs)
        assert got == expected and list(got) == list(expected), (args, kwargs)
        checked += 1
    assert checked > 0
