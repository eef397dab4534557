"""The data-flow rule of `gnnorch.intercept.dataflow`: each layer call's depth from what reads
its output (a source input one hop more than its reader, a destination input as many, other
operations passing the need on), recorded with a TorchFunctionMode. Layer calls are stood in
for by plain tensor arithmetic through `DataflowRecorder.layer`."""
from __future__ import annotations

import torch

from gnnorch.intercept.dataflow import DataflowRecorder, layer_plan


def test_depths_follow_what_reads_each_output():
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(5, 3)
        h = rec.layer("a", x, lambda: x * 2)            # read as a source below: depth 1
        g = h.relu()
        u = rec.layer("b", (x, g), lambda: g + 1)       # bipartite: g is its destination
        out = rec.layer("a", g, lambda: g * 3)          # g as a source: needs depth 1 too
        rec.layer("c", x, lambda: x - 1)                # nothing reads it: untrimmed
        result = out + u
    plan, why = layer_plan(rec.steps, result)
    assert why is None
    # K = 2: layer 0 computes rows within 1 hop, layer 1 the seeds'; None: untrimmed
    assert plan == (("a", 0), ("b", 1), ("a", 1), ("c", None))


def test_a_destination_read_keeps_the_depth_a_source_read_adds_one():
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(4, 2)
        first = rec.layer("e", x, lambda: x + 1)
        as_dst = rec.layer("f", (x, first), lambda: first * 2)   # first: depth 0 + 0
        result = as_dst.sum(-1)
    assert layer_plan(rec.steps, result)[0] == (("e", 0), ("f", 0))
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(4, 2)
        first = rec.layer("e", x, lambda: x + 1)
        as_src = rec.layer("f", (first, x), lambda: first * 2)   # first: depth 0 + 1
        result = as_src.sum(-1)
    assert layer_plan(rec.steps, result)[0] == (("e", 0), ("f", 1))


def test_in_place_writes_carry_the_need_to_what_was_written():
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(4, 2)
        h = rec.layer("a", x, lambda: x + 1)
        buffer = torch.zeros(4, 2)
        buffer[:] = h                      # __setitem__: buffer now depends on h
        buffer.mul_(2)                     # in place: still buffer
        result = rec.layer("b", buffer, lambda: buffer + 1)
    assert layer_plan(rec.steps, result)[0] == (("a", 0), ("b", 1))


def test_operations_inside_a_layer_call_are_not_recorded():
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(3, 2)

        def layer():
            return (x * 2).relu().sum(-1, keepdim=True) + x   # one step, whatever inside

        out = rec.layer("a", x, layer)
    assert len(rec.steps) == 2 and rec.steps[-1].layer      # randn, then the layer call
    assert layer_plan(rec.steps, out)[0] == (("a", 0),)


def test_no_plan_when_no_layer_call_reaches_the_output():
    rec = DataflowRecorder()
    with rec:
        x = torch.randn(3, 2)
        rec.layer("a", x, lambda: x + 1)
        result = x * 2
    plan, why = layer_plan(rec.steps, result)
    assert plan is None and "reaches the model's output" in why
