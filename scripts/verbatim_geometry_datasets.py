"""Offline stand-ins for PyG's geometric sets in `pyg_examples_verbatim.py`'s point-cloud,
superpixel and mesh examples: ``ModelNet(root, '10' | '40', train)`` (`modelnet_like`),
``MNISTSuperpixels(root, train)`` (`superpixels_like`) and ``FAUST(root, train)``
(`faust_like`), each with the real set's fields, dtypes and kind of labels, smaller.
`install_geometry` puts them into ``torch_geometric.datasets`` (`verbatim_datasets` calls it).

Real ModelNet10 / 40: 3,991 / 9,843 training and 908 / 2,468 test CAD meshes of 10 / 40
object classes (``pos`` [V, 3] float, ``face`` [3, F] long, ``y`` [1] long), upright (the
z axis up) but turned freely about it. Here 30 / 10 training meshes a class for '10' and 12 /
4 for '40': star-shaped closed surfaces over one UV-sphere connectivity (290 vertices, 576
faces), each class a radial shape (sphere, box, cylinder, octahedron, pear, spindle, bumps,
ribs, dimple, egg), for '40' each in four heights; every mesh scaled a little unevenly,
turned about z and jittered.

Real MNISTSuperpixels: 60,000 / 10,000 digits, each 75 SLIC superpixels of a 28 x 28 image
(``x`` [75, 1] mean intensity, ``pos`` [75, 2] centroids in pixels, ``edge_index`` of
neighbouring regions, ``y`` [1] the digit). Here 640 / 160 digits drawn as seven-segment
strokes (shifted, slanted, thickened at random) sampled at 75 jittered centroids, each joined
to its 8 nearest (both directions): pyg-lib's CPU spline kernels take about 10 s a batch of
64 digits here.

Real FAUST: 100 registered scans (10 people x 10 poses; 80 training, 20 test), each 6,890
vertices in one order (``pos``, ``face`` [3, 13,776]; ``y`` [1] the pose, i % 10), the task
each vertex's index. Here 100 smooth deformations of one lumpy closed surface of 122
vertices (240 faces) in one vertex order, ``y`` as FAUST's: pyg-lib's CPU spline kernels,
which FAUST's example runs, take about 1 s a layer for 1,200 vertices here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

__all__ = ["MODELNET_SHAPES", "faust_like", "install_geometry", "modelnet_like",
           "superpixels_like", "uv_sphere"]


def uv_sphere(rings: int, segments: int) -> tuple:
    """Unit directions ``[2 + rings * segments, 3]`` (the two poles first) and the faces
    ``[3, 2 * segments * rings]`` of a closed UV sphere, outward-oriented."""
    import math

    import torch

    theta = torch.arange(1, rings + 1, dtype=torch.float) * math.pi / (rings + 1)
    phi = torch.arange(segments, dtype=torch.float) * 2 * math.pi / segments
    t, p = torch.meshgrid(theta, phi, indexing="ij")
    ring = torch.stack([t.sin() * p.cos(), t.sin() * p.sin(), t.cos()], -1).view(-1, 3)
    dirs = torch.cat([torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]]), ring])
    at = lambda r, s: 2 + r * segments + s % segments   # noqa: E731
    faces = [(0, at(0, s), at(0, s + 1)) for s in range(segments)]
    faces += [(1, at(rings - 1, s + 1), at(rings - 1, s)) for s in range(segments)]
    for r in range(rings - 1):
        for s in range(segments):
            faces += [(at(r, s), at(r + 1, s), at(r + 1, s + 1)),
                      (at(r, s), at(r + 1, s + 1), at(r, s + 1))]
    return dirs, torch.tensor(faces).t().contiguous()


def _radius(name: str) -> Callable:
    """The radius of a class's surface along unit directions ``d`` [V, 3]."""
    import torch

    shapes = {
        "sphere": lambda d: torch.ones(len(d)),
        "box": lambda d: 1 / d.abs().amax(1),
        "cylinder": lambda d: 1 / torch.maximum(d[:, :2].norm(dim=1), d[:, 2].abs()),
        "octahedron": lambda d: 1 / d.abs().sum(1),
        "pear": lambda d: 1 + 0.45 * d[:, 2],
        "spindle": lambda d: 0.35 + 0.65 * d[:, 2].abs(),
        "bumps": lambda d: 1 + 0.25 * torch.cos(5 * torch.atan2(d[:, 1], d[:, 0])),
        "ribs": lambda d: 1 + 0.2 * torch.cos(9 * torch.acos(d[:, 2].clamp(-1, 1))),
        "dimple": lambda d: 1 - 0.5 * torch.exp(-((d[:, 2] - 1) / 0.35) ** 2),
        "egg": lambda d: 1 / (d[:, 0] ** 2 + d[:, 1] ** 2 + (d[:, 2] / 1.6) ** 2).sqrt(),
    }
    return shapes[name]


#: ModelNet's classes here: radial shapes (`_radius`).
MODELNET_SHAPES = ("sphere", "box", "cylinder", "octahedron", "pear", "spindle", "bumps",
                   "ribs", "dimple", "egg")
#: ModelNet40's four heights of each shape (z scale).
MODELNET40_HEIGHTS = (0.5, 0.85, 1.35, 2.2)


def modelnet_like(name: str, train: bool, seed: int = 0) -> list:
    """ModelNet `name` ('10' or '40') meshes, training or test (module docstring)."""
    import torch
    from torch_geometric.data import Data

    if name not in ("10", "40"):
        raise ValueError(f"no stand-in for ModelNet{name!r} (only '10', '40')")
    gen = torch.Generator().manual_seed(seed * 2 + int(train))
    dirs, face = uv_sphere(12, 24)
    heights = (1.0, ) if name == "10" else MODELNET40_HEIGHTS
    per_class = (30 if train else 10) if name == "10" else (12 if train else 4)
    graphs = []
    for label, (shape, height) in enumerate((s, h) for s in MODELNET_SHAPES for h in heights):
        base = dirs * _radius(shape)(dirs).unsqueeze(1) * torch.tensor([1.0, 1.0, height])
        for _ in range(per_class):
            scale = 1 + 0.1 * (2 * torch.rand(3, generator=gen) - 1)
            angle = float(torch.rand(1, generator=gen)) * 6.2832
            c, s = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
            turn = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            pos = (base * scale) @ turn.t() + 0.01 * torch.randn(base.shape, generator=gen)
            graphs.append(Data(pos=pos * 20, face=face.clone(), y=torch.tensor([label])))
    order = torch.randperm(len(graphs), generator=gen).tolist()
    return [graphs[i] for i in order]


#: Seven-segment strokes in a 28 x 28 image, ((x0, y0), (x1, y1)) pixels, y down: a top,
#: b top right, c bottom right, d bottom, e bottom left, f top left, g middle.
SEGMENTS = {"a": ((9, 5), (19, 5)), "b": ((19, 5), (19, 14)), "c": ((19, 14), (19, 23)),
            "d": ((9, 23), (19, 23)), "e": ((9, 14), (9, 23)), "f": ((9, 5), (9, 14)),
            "g": ((9, 14), (19, 14))}
DIGITS = ("abcdef", "bc", "abdeg", "abcdg", "bcfg", "acdfg", "acdefg", "abc", "abcdefg",
          "abcdfg")


def superpixels_like(train: bool, seed: int = 0) -> list:
    """MNISTSuperpixels digits, training or test (module docstring)."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce

    gen = torch.Generator().manual_seed(seed * 2 + int(train))
    count = 640 if train else 160
    grid = torch.stack(torch.meshgrid(torch.arange(9.0), torch.arange(9.0), indexing="xy"),
                       -1).view(-1, 2)[:75] * 3.2 + 1.5
    graphs = []
    for label in torch.randint(0, 10, (count, ), generator=gen).tolist():
        pos = (grid + 1.2 * torch.randn(75, 2, generator=gen)).clamp(0, 27.9)
        shift = 2 * torch.randn(2, generator=gen)
        slant, width = 0.25 * float(torch.randn(1, generator=gen)), 1.5 + float(
            torch.rand(1, generator=gen))
        ink = torch.zeros(75)
        for seg in DIGITS[label]:
            (x0, y0), (x1, y1) = SEGMENTS[seg]
            a = torch.tensor([x0 + slant * (14 - y0), y0]) + shift
            b = torch.tensor([x1 + slant * (14 - y1), y1]) + shift
            t = ((pos - a) @ (b - a) / (b - a).dot(b - a)).clamp(0, 1)
            dist = (pos - (a + t.unsqueeze(1) * (b - a))).norm(dim=1)
            ink = torch.maximum(ink, (1 - dist / (2 * width)).clamp(min=0))
        x = (ink + 0.05 * torch.randn(75, generator=gen)).clamp(0, 1).unsqueeze(1)
        dist = torch.cdist(pos, pos)
        dist.fill_diagonal_(float("inf"))
        near = dist.topk(8, largest=False).indices
        src = torch.arange(75).repeat_interleave(8)
        pairs = torch.stack([src, near.flatten()])
        edge_index = coalesce(torch.cat([pairs, pairs.flip(0)], 1), num_nodes=75)
        graphs.append(Data(x=x, edge_index=edge_index, pos=pos, y=torch.tensor([label])))
    return graphs


def faust_like(seed: int = 0) -> list:
    """FAUST's 100 registered meshes (module docstring): pose i deforms the one base surface
    with smooth waves of its own; ``y`` is ``[i % 10]``."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    dirs, face = uv_sphere(10, 12)

    def waves(amplitude: float) -> torch.Tensor:   # a smooth random field over the sphere
        freq = torch.randn(4, 3, generator=gen) * 2
        phase = torch.rand(4, generator=gen) * 6.2832
        return amplitude * torch.sin(dirs @ freq.t() + phase).sum(1)

    body = dirs * (1 + waves(0.12)).unsqueeze(1) * torch.tensor([0.45, 0.3, 1.0])
    graphs = []
    for i in range(100):
        pos = body * (1 + waves(0.05)).unsqueeze(1) + 0.003 * torch.randn(body.shape,
                                                                           generator=gen)
        graphs.append(Data(pos=pos, face=face.clone(), y=torch.tensor([i % 10])))
    return graphs


def install_geometry(base: type) -> None:
    """Replace `ModelNet`, `MNISTSuperpixels` and `FAUST` in ``torch_geometric.datasets`` for
    this process with subclasses of `base` (`verbatim_datasets`' in-memory ``Synthetic``: the
    graphs filtered and pre-transformed as PyG's processing does, under a root of this
    process's own) holding the stand-ins above."""
    import torch_geometric.datasets as datasets

    class ModelNetLike(base):
        def __init__(self, root, name="10", train=True, transform=None, pre_transform=None,
                     pre_filter=None, **kwargs):
            super().__init__(modelnet_like(name, train), transform, pre_transform, pre_filter)

    class MNISTSuperpixelsLike(base):
        def __init__(self, root, train=True, transform=None, pre_transform=None,
                     pre_filter=None, **kwargs):
            super().__init__(superpixels_like(train), transform, pre_transform, pre_filter)

    class FAUSTLike(base):
        def __init__(self, root, train=True, transform=None, pre_transform=None,
                     pre_filter=None, **kwargs):
            meshes = faust_like()
            super().__init__(meshes[:80] if train else meshes[80:], transform,
                             pre_transform, pre_filter)

    datasets.ModelNet = ModelNetLike
    datasets.MNISTSuperpixels = MNISTSuperpixelsLike
    datasets.FAUST = FAUSTLike
