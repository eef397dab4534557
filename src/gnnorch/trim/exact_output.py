"""The output of a trimmed forward: exact in its first rows, exact on demand everywhere else.

Invariant. A `PrefixExact` tensor `o` of shape [N, ...] holds the exact values of rows
[0, o.exact_rows) (the seeds of the batch; hop-aware trimming proves nothing more) and
placeholders (zeros, or whatever the untrimmed rows compute to) in rows [exact_rows, N). Every
use of `o` either reads only exact rows, or first *materialises* the exact tensor by recomputing
the forward untrimmed (`Materializer`), once, and continues on that. So no value the user can
observe is ever a placeholder.

What stays cheap (no recomputation):
* metadata (shape, dtype, device, `requires_grad`, ...);
* indexing whose row part selects only exact rows: ``o[:b]`` with b <= exact_rows, ``o[i]``,
  ``o[mask]`` where ``mask[exact_rows:]`` is all False, ``o[idx]`` with 0 <= idx < exact_rows,
  ``o.index_select(0, idx)`` likewise (a link objective's reads at ``edge_label_index``);
* row-local operations (the value of output row i depends on input row i only): elementwise
  functions, softmax / log_softmax / argmax / squeeze / unsqueeze over a non-row dimension,
  ``o[:, j]``-style indexing of the other dimensions, dtype and device moves, ``detach``,
  arithmetic with a Python number, or with another prefix-exact tensor of the same shape and
  exact rows (two encoder calls' outputs summed). Their result is again `PrefixExact` (same
  exact rows) and materialises by replaying the same operation on the exact parents.
Everything else (a reduction over rows, a loss on all rows, printing, ``torch.cat`` with other
tensors, indexing into non-seed rows, ...) materialises first. Autograd is preserved: the
prefix-exact tensor is the trimmed forward's own result (`as_subclass`), and a materialised
tensor is the untrimmed forward's result, so gradients flow through whichever the user read.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable

import contextlib
import functools

import torch
from torch import Tensor

from ..compat import torch as compat_torch

# torch's "no __torch_function__ for subclasses" context; when torch lacks it (`gnnorch.compat`)
# no PrefixExact is ever built (`prefix_exact` materialises at once), so the stand-in is unused.
DisableTorchFunctionSubclass = (compat_torch.disable_torch_function_subclass()
                                or contextlib.nullcontext)

# Returns the exact (untrimmed) tensor for a prefix-exact root, given why it is needed.
Materializer = Callable[[str], Tensor]


def _getters(*names: str) -> list[Any]:
    """The property getters `__torch_function__` receives for `tensor.<name>`."""
    return [getattr(Tensor, n).__get__ for n in names if hasattr(Tensor, n)]


_METADATA = frozenset([
    Tensor.size, Tensor.dim, Tensor.numel, Tensor.__len__, Tensor.element_size,
    Tensor.is_floating_point, Tensor.is_complex, Tensor.stride, Tensor.is_contiguous,
    Tensor.get_device, Tensor.data_ptr, Tensor.__hash__, Tensor.untyped_storage,
    Tensor.register_hook, Tensor.retain_grad, Tensor.requires_grad_,
    *_getters("shape", "dtype", "device", "ndim", "requires_grad", "grad_fn", "is_leaf",
              "layout", "is_cuda", "is_sparse", "is_meta", "names", "grad", "is_quantized",
              "is_nested", "output_nr", *compat_torch.tensor_private_properties()),
])

_ELEMENTWISE = frozenset([
    torch.relu, torch.sigmoid, torch.tanh, torch.exp, torch.log, torch.neg, torch.abs,
    torch.nn.functional.relu, torch.nn.functional.elu, torch.nn.functional.leaky_relu,
    torch.nn.functional.gelu, torch.nn.functional.silu, torch.nn.functional.sigmoid,
    torch.nn.functional.tanh, torch.nn.functional.normalize,
    Tensor.relu, Tensor.sigmoid, Tensor.tanh, Tensor.exp, Tensor.log, Tensor.neg,
    Tensor.abs, Tensor.__neg__, Tensor.detach, Tensor.float, Tensor.double, Tensor.half,
    Tensor.bfloat16, Tensor.to, Tensor.cpu, Tensor.cuda, Tensor.contiguous, Tensor.clone,
    Tensor.sqrt, torch.sqrt,
])
_ALONG_DIM = frozenset([   # row-local when the reduced/normalised dimension is not dim 0
    torch.softmax, torch.log_softmax, torch.argmax, torch.argmin,
    torch.nn.functional.softmax, torch.nn.functional.log_softmax,
    Tensor.softmax, Tensor.log_softmax, Tensor.argmax, Tensor.argmin,
    torch.squeeze, Tensor.squeeze, torch.unsqueeze, Tensor.unsqueeze,
])
_SCALAR_ARITHMETIC = frozenset([
    Tensor.__mul__, Tensor.__rmul__, Tensor.__truediv__, Tensor.__add__, Tensor.__radd__,
    Tensor.__sub__, Tensor.__rsub__, Tensor.mul, Tensor.div, Tensor.add, Tensor.sub,
    torch.mul, torch.div, torch.add, torch.sub, Tensor.__pow__,
])


class PrefixExact(Tensor):
    """See the module docstring. Built only by `prefix_exact` (or by row-local operations on
    one); never by the user."""

    _gnnorch_exact_rows: int
    _gnnorch_materialize: Callable[[str], Tensor]   # this tensor's exact value
    _gnnorch_exact: Tensor | None

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _METADATA:
            with DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        owners = [a for a in args if isinstance(a, PrefixExact)]
        owners += [v for v in kwargs.values() if isinstance(v, PrefixExact)]
        if len(owners) == 1 and args and args[0] is owners[0]:
            owner = owners[0]
            if owner._gnnorch_exact is None:
                if (func is Tensor.__getitem__ and _selects_exact_rows(owner, args[1])) or (
                        _is_index_select(func)
                        and _selects_exact_rows_along(owner, args, kwargs)):
                    with DisableTorchFunctionSubclass():
                        return func(*args, **kwargs)
                if _row_local(func, owner, args, kwargs) or (
                        func is Tensor.__getitem__ and _keeps_rows(args[1])):
                    with DisableTorchFunctionSubclass():
                        out = func(*args, **kwargs)
                    if isinstance(out, Tensor) and out.dim() >= 1 and \
                            out.size(0) == owner.size(0):
                        return _derived(out, owner, func, args, kwargs)
                    return out
        if len(owners) == 2 and _row_local_pair(func, args, kwargs, owners):
            with DisableTorchFunctionSubclass():
                out = func(*args)
            return prefix_exact(out, owners[0]._gnnorch_exact_rows,
                                functools.partial(_replay_pair, func, *owners))
        exact_args = [_exact(a, func) for a in args]
        exact_kwargs = {k: _exact(v, func) for k, v in kwargs.items()}
        with DisableTorchFunctionSubclass():
            return func(*exact_args, **exact_kwargs)


def prefix_exact(value: Tensor, exact_rows: int, materialize: Materializer) -> Tensor:
    """Wrap a trimmed forward's output `value` (rows [0, exact_rows) exact) so that reading any
    other row first calls `materialize(reason)`, which returns the untrimmed output. Without
    torch's `DisableTorchFunctionSubclass` (`gnnorch.compat`) the untrimmed output is returned
    at once: exact, and trimming switches itself off for the model."""
    if compat_torch.disable_torch_function_subclass() is None:
        return materialize(f"{compat_torch.DISABLE_TORCH_FUNCTION_SUBCLASS.name} unavailable")
    out = value.as_subclass(PrefixExact)
    out._gnnorch_exact_rows = exact_rows
    out._gnnorch_materialize = materialize
    out._gnnorch_exact = None
    return out


def prefix_exact_parts(parts: dict[Hashable, tuple[Tensor, int, int]],
                       materialize: Callable[[str], Any]) -> Any:
    """A trimmed forward's output rebuilt from its parts (`gnnorch.trim.verify.output_parts`:
    key -> (tensor, exact rows, rows)), each part prefix-exact in its exact rows: one tensor
    (key None) or a dict by node type. `materialize(reason)` recomputes the whole output
    untrimmed, at most once for all the parts."""
    if None in parts:
        value, exact, rows = parts[None]
        return value if rows <= exact else prefix_exact(value, exact, materialize)
    untrimmed = _once(materialize)
    return {key: value if rows <= exact else prefix_exact(
                value, exact, functools.partial(_part_of, untrimmed, key))
            for key, (value, exact, rows) in parts.items()}


def _once(materialize: Callable[[str], Any]) -> Callable[[str], Any]:
    """`materialize`, run at its first call only (for the reason given then)."""
    done: list[Any] = []

    def untrimmed(reason: str) -> Any:
        if not done:
            done.append(materialize(reason))
        return done[0]
    return untrimmed


def _part_of(untrimmed: Callable[[str], dict], key: Hashable, reason: str) -> Tensor:
    """Part `key` of a dict output recomputed untrimmed (once for all its parts)."""
    return untrimmed(reason)[key]


def exact_value(value: Any, reason: str = "requested") -> Any:
    """The exact tensor behind `value` (materialised if needed); other values unchanged."""
    return _exact(value, reason) if isinstance(value, PrefixExact) else value


def _derived(out: Tensor, parent: PrefixExact, func: Any, args: tuple,
             kwargs: dict) -> PrefixExact:
    rest = args[1:]

    def replay(reason: str) -> Tensor:
        with DisableTorchFunctionSubclass():
            return func(_exact(parent, reason), *rest, **kwargs)

    return prefix_exact(out, parent._gnnorch_exact_rows, replay)


def _row_local_pair(func: Any, args: tuple, kwargs: dict, owners: list[PrefixExact]) -> bool:
    """Whether ``func(a, b)`` is elementwise arithmetic on two prefix-exact tensors of one
    shape and the same exact rows, neither materialised (the sum of two encoder calls' rows):
    row i of the result depends on row i of each, so it is exact in the same rows."""
    a, b = owners
    return (func in _SCALAR_ARITHMETIC and not kwargs and len(args) == 2
            and args[0] is a and args[1] is b and a.shape == b.shape
            and a._gnnorch_exact_rows == b._gnnorch_exact_rows
            and a._gnnorch_exact is None and b._gnnorch_exact is None)


def _replay_pair(func: Any, a: PrefixExact, b: PrefixExact, reason: str) -> Tensor:
    with DisableTorchFunctionSubclass():
        return func(_exact(a, reason), _exact(b, reason))


def _exact(value: Any, why: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_exact(v, why) for v in value)
    if not isinstance(value, PrefixExact):
        return value
    if value._gnnorch_exact is None:
        reason = why if isinstance(why, str) else _op_name(why)
        exact = value._gnnorch_materialize(reason)
        if isinstance(exact, PrefixExact):  # defensive: never hand a placeholder on
            exact = exact.as_subclass(Tensor)
        value._gnnorch_exact = exact
    return value._gnnorch_exact


def _op_name(func: Any) -> str:
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return name.replace("_TensorBase.", "Tensor.").replace("TensorBase.", "Tensor.")


def _row_key_ok(owner: PrefixExact, key: Any) -> bool:
    limit, n = owner._gnnorch_exact_rows, owner.shape[0]
    if isinstance(key, bool):
        return False
    if isinstance(key, int):
        return 0 <= key < limit or -n <= key < limit - n
    if isinstance(key, slice):
        start, stop, step = key.indices(n)
        if step <= 0:
            return False
        return start >= stop or (start >= 0 and stop <= limit)
    if isinstance(key, Tensor):
        with DisableTorchFunctionSubclass():
            if key.dtype == torch.bool:
                return key.dim() >= 1 and key.size(0) == n and not bool(key[limit:].any())
            if key.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
                if key.numel() == 0:
                    return True
                return bool(key.min() >= 0) and bool(key.max() < limit)
    return False


def _selects_exact_rows(owner: PrefixExact, key: Any) -> bool:
    """Whether indexing `owner[key]` reads only exact rows."""
    if isinstance(key, tuple):
        if not key or key[0] is Ellipsis or key[0] is None:
            return False
        return _row_key_ok(owner, key[0]) and not any(
            isinstance(k, Tensor) for k in key[1:])  # advanced indexing mixes dims
    return _row_key_ok(owner, key)


def _is_index_select(func: Any) -> bool:
    """``Tensor.index_select`` or torch's ``index_select`` builtin. By name: PyG replaces
    ``torch.index_select`` with a wrapper (``torch_geometric.hash_tensor``) that calls the
    builtin, so the function ``__torch_function__`` receives is not always the module's."""
    return func is Tensor.index_select or getattr(func, "__name__", None) == "index_select"


def _selects_exact_rows_along(owner: PrefixExact, args: tuple, kwargs: dict) -> bool:
    """Whether ``index_select(owner, dim, index)`` picks exact rows only (``dim`` 0)."""
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    index = args[2] if len(args) > 2 else kwargs.get("index")
    return (isinstance(dim, int) and owner.dim() >= 1 and dim % owner.dim() == 0
            and isinstance(index, Tensor) and _row_key_ok(owner, index))


def _keeps_rows(key: Any) -> bool:
    """Whether `o[key]` keeps every row and indexes the other dimensions only (``o[:, 0]``)."""
    return (isinstance(key, tuple) and len(key) > 1 and key[0] == slice(None)
            and not any(isinstance(k, Tensor) or k is None or k is Ellipsis for k in key[1:]))


def _row_local(func: Any, owner: PrefixExact, args: tuple, kwargs: dict) -> bool:
    if func in _ELEMENTWISE:
        return not any(isinstance(a, Tensor) for a in args[1:]) and not any(
            isinstance(v, Tensor) for v in kwargs.values())
    if func in _SCALAR_ARITHMETIC:
        return len(args) == 2 and isinstance(args[1], (int, float)) and not kwargs.get("out")
    if func in _ALONG_DIM:
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        if not isinstance(dim, int) or owner.dim() < 2:
            return False
        return dim % owner.dim() != 0
    return False
