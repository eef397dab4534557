#!/usr/bin/env python
"""Run PyG's example scripts verbatim, plainly and under `gnnorch.Runtime`, and compare what
they print.

    .venv/bin/python scripts/pyg_examples_verbatim.py --out results.json --md results.md
    .venv/bin/python scripts/pyg_examples_verbatim.py --examples sgc gat --modes runtime device
    .venv/bin/python scripts/pyg_examples_verbatim.py --report a.json b.json --md table.md

`tests/pyg_examples` adapts PyG's examples into functions and compares their metrics in
distribution over seeds. This script runs the files as PyG ships them, the whole script inside
the runtime, and asks for more: the same printed lines. Each file is extracted unchanged
(``git show REF:examples/...``) from the fetched bare repository, at the tag of the installed
PyG version (``pyg_tests_under_runtime.pick_ref``) unless ``--ref`` says otherwise. The child
process that runs it puts only this around it:

* dataset stand-ins, so that nothing downloads (`verbatim_datasets`): ``Planetoid(root,
  name)`` reads the Cora / CiteSeer raw files bundled with gnnorch (PyG's own class and
  processing, another root); ``TUDataset(root, 'PROTEINS' | 'PROTEINS_full' | 'MUTAG' |
  'COLORS-3' | 'TRIANGLES' | 'IMDB-BINARY' | 'ENZYMES')``, ``PPI(root, split)``, ``ZINC(root,
  subset=True, split)``, ``Reddit(root)``, ``Flickr(root)``, ``DBLP(root)``, ``IMDB(root)``,
  ``MovieLens(root)``, ``OGB_MAG(root)``, ``Entities(root, 'AIFB')``, ``BitcoinOTC(root)``,
  ``LINKXDataset(root, 'Penn94')``, ``RelLinkPredDataset(root, 'FB15k-237')``,
  ``JODIEDataset(root, 'wikipedia')``, ``AmazonBook(root)``, ``WikipediaNetwork(root,
  'chameleon')``, ``QM9(root)``, ``UPFD(root, name, feature, split)``, ``AMiner(root)``,
  ``GDELT(root, split)``, ``ICEWS18(root, split)`` and ``GraphLandDataset(root,
  'tolokers-2', split)`` are synthetic sets of the same types and widths (the large ones
  smaller), built by PyG's ``InMemoryDataset`` with the caller's transform, pre-transform and
  filter (the event sets and GraphLand by PyG's own classes' processing, of made-up raw
  data);
* where a script's default run takes minutes here, its epoch count lowered by a textual edit
  listed in `EXAMPLES` (and in the report); an edit that no longer matches exactly once is an
  error, not a silent change;
* an offline ``ogb`` package in ``sys.modules`` (`verbatim_more_examples_datasets.install_ogb`):
  ``PygNodePropPredDataset('ogbn-arxiv' | 'ogbn-products' | 'ogbn-proteins')``,
  ``PygGraphPropPredDataset('ogbg-molhiv')`` (synthetic, smaller), their ``Evaluator``
  (ogb's metrics: accuracy, ROC-AUC by sklearn) and ``AtomEncoder`` / ``BondEncoder``;
* where a script has required arguments (no defaults), the arguments listed in `EXAMPLES`
  (``argv``, and in the report);
* ``random``, ``numpy`` and ``torch`` seeded with 0, ``PYTHONHASHSEED=0`` (string hashing,
  hence set order, fixed), ``sys.argv = [file]`` (the script's defaults; ``[file, *argv]``
  where it has ``argv``), and the file run by ``runpy.run_path(file,
  run_name="__main__")``; in a runtime mode, as
  ``gnnorch.Runtime(run, **options)()`` after ``torch.manual_seed(0)`` in the caller too, whose
  seed is the run's (the order in which p > 1 ranks shard a training loader's epochs: a
  script's own seeding runs inside the ranks, too late for it).

Every example runs in fresh processes: ``vanilla`` twice (does the script repeat itself with a
fixed seed here?), then each of ``--modes``. Lines that report a time (`TIME_LINE`) are dropped
before comparing. The verdict of a mode against the first vanilla run:

* ``identical``: every other line equal;
* ``numbers differ``: the same lines with their numbers blanked, some numbers not equal (the
  largest absolute difference is reported); a finding only where vanilla repeated itself;
* ``text differs``, ``failed`` (exit status not 0), ``timeout``.

An example whose vanilla run fails here (a package missing) is reported as such, not compared.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from pyg_tests_under_runtime import DEFAULT_MIRROR, pick_ref, probe_versions  # noqa: E402
from verbatim_datasets import install_stand_ins  # noqa: E402
from verbatim_more_examples_datasets import install_ogb  # noqa: E402

DEFAULT_PYTHON = REPO / ".venv" / "bin" / "python"
#: Runtime options of each mode (``vanilla`` runs the file directly).
MODE_OPTIONS: dict[str, dict] = {
    "runtime": {},
    "device": {"data_path": "device"},
    "p2": {"processes": 2},
}
#: A printed line that reports a duration: dropped before comparing.
TIME_LINE = re.compile(r"time|took|elapsed|\d\s*(?:s|ms|sec|seconds)\b|it/s|s/it", re.I)
TIME_FIELD = re.compile(r"(\bDuration\s*[:=]\s*)[-+]?[\d.]+(?:[eE][-+]?\d+)?")   # blanked
ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Interrupt)\b")
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Example:
    """One PyG example file; `edits`: (old, new) textual replacements, each matching once;
    `argv`: the command-line arguments it runs with (for a script whose arguments have no
    defaults), none unless given."""

    path: str
    edits: tuple[tuple[str, str], ...] = ()
    why: str = ""
    argv: tuple[str, ...] = ()
    tree: str = ""                        # a folder extracted whole (the script's siblings)
    import_roots: tuple[str, ...] = ()    # tree folders first on sys.path (package imports)


def _epochs(old: str, new: str, why: str) -> dict:
    return {"edits": ((old, new), ), "why": why}


EXAMPLES: dict[str, Example] = {
    "gat": Example("examples/gat.py"),
    "agnn": Example("examples/agnn.py"),
    "arma": Example("examples/arma.py"),
    "sgc": Example("examples/sgc.py"),
    "tagcn": Example("examples/tagcn.py"),
    "mixhop": Example("examples/mixhop.py"),
    "pmlp": Example("examples/pmlp.py"),
    "ogc": Example("examples/ogc.py"),
    "graph_unet": Example("examples/graph_unet.py"),
    "infomax_transductive": Example("examples/infomax_transductive.py"),
    "glnn": Example("examples/glnn.py"),
    "argva_node_clustering": Example("examples/argva_node_clustering.py"),
    "rect": Example("examples/rect.py"),
    "ar_link_pred": Example("examples/ar_link_pred.py"),
    "jit_gcn": Example("examples/jit/gcn.py"),
    "jit_gat": Example("examples/jit/gat.py"),
    "gnn_explainer_link_pred": Example("examples/explain/gnn_explainer_link_pred.py"),
    "graphmask_explainer": Example("examples/explain/graphmask_explainer.py"),
    "dna": Example("examples/dna.py"),
    # The verbatim counterparts of corpus cases (tests/pyg_examples adapts these).
    "gcn": Example("examples/gcn.py"),
    "link_pred": Example("examples/link_pred.py"),
    "autoencoder": Example("examples/autoencoder.py"),
    "super_gat": Example("examples/super_gat.py"),
    "gcn2_cora": Example("examples/gcn2_cora.py",
                         **_epochs("range(1, 1001)", "range(1, 201)", "1,000 epochs -> 200")),
    "gnn_explainer": Example("examples/explain/gnn_explainer.py"),
    "compile_gcn": Example("examples/compile/gcn.py"),
    "seal_link_pred": Example("examples/seal_link_pred.py",
                              **_epochs("range(1, 51)", "range(1, 4)", "50 epochs -> 3")),
    "proteins_diff_pool": Example(
        "examples/proteins_diff_pool.py",
        **_epochs("range(1, 151)", "range(1, 6)", "150 epochs -> 5")),
    "proteins_mincut_pool": Example(
        "examples/proteins_mincut_pool.py",
        **_epochs("range(1, 15001)", "range(1, 6)", "15,000 epochs (early stopping) -> 5")),
    "proteins_dmon_pool": Example(
        "examples/proteins_dmon_pool.py",
        **_epochs("range(1, 101)", "range(1, 6)", "100 epochs -> 5")),
    # Graph-level DataLoaders of node-level tasks (PPI), and of a learned aggregation.
    "ppi": Example("examples/ppi.py",
                   **_epochs("range(1, 101)", "range(1, 11)", "100 epochs -> 10")),
    "film": Example("examples/film.py",
                    **_epochs("range(1, 501)", "range(1, 11)", "500 epochs -> 10")),
    "geniepath": Example("examples/geniepath.py",
                         **_epochs("range(1, 101)", "range(1, 11)", "100 epochs -> 10")),
    "gcn2_ppi": Example("examples/gcn2_ppi.py",
                        **_epochs("range(1, 2001)", "range(1, 3)", "2,000 epochs -> 2")),
    "mem_pool": Example("examples/mem_pool.py",
                        **_epochs("range(1, 2001)", "range(1, 6)", "2,000 epochs -> 5")),
    "lcm_aggr_2nd_min": Example(
        "examples/lcm_aggr_2nd_min.py",
        **_epochs("range(1, 1001)", "range(1, 3)", "1,000 epochs -> 2")),
    "equilibrium_median": Example(
        "examples/equilibrium_median.py",
        **_epochs("steps = 10000000", "steps = 3000", "10,000,000 steps -> 3,000")),
    # Mini-batch programs: NeighborLoader, LinkNeighborLoader, GraphSAINT, ShaDow.
    "reddit": Example("examples/reddit.py",
                      **_epochs("range(1, 11)", "range(1, 4)", "10 epochs -> 3")),
    "infomax_inductive": Example(
        "examples/infomax_inductive.py",
        **_epochs("range(1, 31)", "range(1, 3)", "30 epochs -> 2")),
    "hierarchical_sampling": Example("examples/hierarchical_sampling.py"),
    "graph_sage_unsup": Example("examples/graph_sage_unsup.py",
                                **_epochs("range(1, 51)", "range(1, 6)", "50 epochs -> 5")),
    "graph_saint": Example("examples/graph_saint.py",
                           **_epochs("range(1, 51)", "range(1, 4)", "50 epochs -> 3")),
    "shadow": Example("examples/shadow.py",
                      **_epochs("range(1, 51)", "range(1, 4)", "50 epochs -> 3")),
    # Heterogeneous and multi-relational graphs (`verbatim_typed_datasets`).
    "hgt_dblp": Example("examples/hetero/hgt_dblp.py",
                        **_epochs("range(1, 101)", "range(1, 31)", "100 epochs -> 30")),
    "hetero_conv_dblp": Example(
        "examples/hetero/hetero_conv_dblp.py",
        **_epochs("range(1, 101)", "range(1, 31)", "100 epochs -> 30")),
    "han_imdb": Example("examples/hetero/han_imdb.py",
                        **_epochs("range(1, 200)", "range(1, 31)", "199 epochs -> 30")),
    "dmgi_unsup": Example("examples/hetero/dmgi_unsup.py",
                          **_epochs("range(1, 1001)", "range(1, 101)", "1,000 epochs -> 100")),
    "hetero_link_pred": Example(
        "examples/hetero/hetero_link_pred.py",
        **_epochs("range(1, 301)", "range(1, 51)", "300 epochs -> 50")),
    "bipartite_sage": Example(
        "examples/hetero/bipartite_sage.py",
        **_epochs("range(1, 701)", "range(1, 51)", "700 epochs -> 50")),
    "rgcn": Example("examples/rgcn.py"),
    "rgat": Example("examples/rgat.py"),
    "temporal_link_pred": Example("examples/hetero/temporal_link_pred.py",
                                  **_epochs("range(1, 11)", "range(1, 4)", "10 epochs -> 3")),
    "to_hetero_mag": Example("examples/hetero/to_hetero_mag.py",
                             **_epochs("range(1, 21)", "range(1, 4)", "20 epochs -> 3")),
    "hierarchical_sage": Example("examples/hetero/hierarchical_sage.py",
                                 **_epochs("range(1, 6)", "range(1, 3)", "5 epochs -> 2")),
    # More graph-level loaders, and a torch DataLoader over node indices.
    "mutag_gin": Example("examples/mutag_gin.py",
                         **_epochs("'--epochs', type=int, default=100",
                                   "'--epochs', type=int, default=20", "100 epochs -> 20")),
    "proteins_topk_pool": Example(
        "examples/proteins_topk_pool.py",
        **_epochs("range(1, 201)", "range(1, 6)", "200 epochs -> 5")),
    "proteins_gmt": Example("examples/proteins_gmt.py",
                            **_epochs("range(1, 201)", "range(1, 6)", "200 epochs -> 5")),
    "pna": Example("examples/pna.py",
                   **_epochs("range(1, 301)", "range(1, 4)", "300 epochs -> 3")),
    "graph_gps": Example("examples/graph_gps.py",
                         **_epochs("range(1, 101)", "range(1, 4)", "100 epochs -> 3")),
    "sign": Example("examples/sign.py",
                    **_epochs("range(1, 201)", "range(1, 21)", "200 epochs -> 20")),
    "graph_sage_unsup_ppi": Example("examples/graph_sage_unsup_ppi.py"),
    "cluster_gcn_ppi": Example("examples/cluster_gcn_ppi.py",
                               **_epochs("range(1, 201)", "range(1, 4)", "200 epochs -> 3")),
    # METIS parts of Reddit (pyg-lib's METIS: run it with pyg-lib's environment), then
    # layer-wise inference over a full-neighbourhood NeighborLoader with 12 workers.
    "cluster_gcn_reddit": Example("examples/cluster_gcn_reddit.py",
                                  **_epochs("range(1, 31)", "range(1, 6)", "30 epochs -> 5")),
    # Attention pooling on Knyazev et al.'s synthetic sets, a TorchScript GIN, a signed, a
    # non-homophilous and a relational graph (`verbatim_more_datasets`).
    "colors_topk_pool": Example(
        "examples/colors_topk_pool.py",
        **_epochs("range(1, 301)", "range(1, 21)", "300 epochs -> 20")),
    "triangles_sag_pool": Example(
        "examples/triangles_sag_pool.py",
        **_epochs("range(1, 301)", "range(1, 2)", "300 epochs -> 1")),
    "jit_gin": Example("examples/jit/gin.py",
                       **_epochs("range(1, 101)", "range(1, 21)", "100 epochs -> 20")),
    "compile_gin": Example("examples/compile/gin.py",
                           **_epochs("range(1, 101)", "range(1, 11)", "100 epochs -> 10")),
    "jit_film": Example("examples/jit/film.py",
                        **_epochs("range(1, 501)", "range(1, 11)", "500 epochs -> 10")),
    "signed_gcn": Example("examples/signed_gcn.py"),
    "linkx": Example("examples/linkx.py"),
    "rgcn_link_pred": Example(
        "examples/rgcn_link_pred.py",
        edits=(("range(1, 10001)", "range(1, 31)"), ("(epoch % 500) == 0", "(epoch % 10) == 0")),
        why="10,000 epochs -> 30, evaluated every 10 instead of 500"),
    # A temporal event stream through a stateful memory, and a torch DataLoader of edge
    # indices over a full-graph recommender (`verbatim_interaction_datasets`).
    "tgn": Example("examples/tgn.py",
                   **_epochs("range(1, 51)", "range(1, 4)", "50 epochs -> 3")),
    "lightgcn": Example("examples/lightgcn.py",
                        **_epochs("range(1, 101)", "range(1, 6)", "100 epochs -> 5")),
    # An explainer over a synthetic motif graph, a directed heterophilous graph, an edge
    # network over complete molecule graphs, and news propagation trees
    # (`verbatim_more_datasets`, `verbatim_molecule_datasets`).
    "gnn_explainer_ba_shapes": Example(
        "examples/explain/gnn_explainer_ba_shapes.py",
        edits=(("range(400, data.num_nodes, 5)", "range(400, data.num_nodes, 50)"), ),
        why="explains 6 nodes instead of 60 per explanation type (2,000 epochs kept)"),
    "dir_gnn": Example("examples/dir_gnn.py",
                       **_epochs("'--epochs', type=int, default=1000",
                                 "'--epochs', type=int, default=100", "1,000 epochs -> 100")),
    "qm9_nn_conv": Example("examples/qm9_nn_conv.py",
                           **_epochs("range(1, 301)", "range(1, 4)", "300 epochs -> 3")),
    "upfd": Example("examples/upfd.py"),
    # Metapath random walks over a bibliographic graph, a WL kernel's histograms into a
    # LinearSVC, a recurrent event network over a temporal knowledge graph (DataLoaders of
    # events with workers), and GraphLand's full-graph GCN (`verbatim_more_examples_datasets`).
    "metapath2vec": Example("examples/hetero/metapath2vec.py"),
    # A Taobao shopping log (`verbatim_interaction_datasets`): RandomLinkSplit, an item-item
    # graph from co-purchases (scipy), hetero LinkNeighborLoaders with binary negatives and
    # 16 workers each, embeddings of users and items.
    "bipartite_sage_unsup": Example("examples/hetero/bipartite_sage_unsup.py",
                                    **_epochs("range(1, 21)", "range(1, 3)", "20 epochs -> 2")),
    # Random walks over Cora into a sparse embedding table trained by SparseAdam (pyg-lib's
    # random walk: run it with pyg-lib's environment).
    "node2vec": Example("examples/node2vec.py",
                        edits=(("range(1, 101)", "range(1, 6)"), ("\nplot_points(colors)", "\n"),
                               ("import matplotlib.pyplot as plt\n", "")),
                        why="100 epochs -> 5; the t-SNE plot at the end not drawn (nor "
                            "matplotlib imported)"),
    "wl_kernel": Example("examples/wl_kernel.py"),
    "renet": Example("examples/renet.py",
                     **_epochs("range(1, 21)", "range(1, 5)", "20 epochs -> 4")),
    # --name and --split are required (no defaults): the smallest set, the first split.
    "graphland": Example("examples/graphland.py",
                         argv=("--name", "tolokers-2", "--split", "RL")),
    # OGB's sets through an offline `ogb` package (`verbatim_more_examples_datasets.install_ogb`):
    # label propagation and a masked-label transformer on arxiv, EGC on molhiv.
    "label_prop": Example("examples/label_prop.py"),
    # Knowledge-graph embeddings over an FB15k-237 stand-in (`verbatim_kg_datasets`): a torch
    # DataLoader of triples (PyG's KGTripletLoader), each model with its own optimizer
    # (Adagrad for ComplEx), every entity ranked in the evaluation. --model is required.
    **{f"kge_fb15k_237_{model}": Example(
        "examples/kge_fb15k_237.py", argv=("--model", model),
        edits=(("range(1, 501)", "range(1, 21)"), ("epoch % 25 == 0", "epoch % 5 == 0")),
        why="500 epochs -> 20, evaluated every 5 instead of 25")
       for model in ("transe", "complex", "distmult", "rotate")},
    # SplineConv on Cora, full-batch (pyg-lib's spline kernels: run it with pyg-lib's
    # environment; over ten minutes for its 200 epochs here).
    "cora_spline": Example("examples/cora.py",
                           **_epochs("range(1, 201)", "range(1, 11)", "200 epochs -> 10")),
    # PyG's own NeighborLoader trainer for OGB node sets, each of its four models on the
    # arxiv stand-in: SGFormer (its default; disjoint sampling and a batch vector), GraphSAGE,
    # GAT and Polynormer (one local epoch, then global attention). Three epochs, two loader
    # workers (persistent) instead of twelve. The two transformers sample disjoint trees:
    # at the default batch of 1,024 seeds and fanout 10 over 3 hops (about 1.1M rows a
    # batch) vanilla was killed for memory here in its first batch, so they take batches of
    # 128 seeds and fanout 5.
    **{name: Example("examples/ogbn_train.py",
                     argv=("-e", "3", "--num_workers", "2", *extra))
       for name, extra in (
           ("ogbn_train", ("-b", "128", "--fan_out", "5")),
           ("ogbn_train_sage", ("--model", "sage")), ("ogbn_train_gat", ("--model", "gat")),
           ("ogbn_train_polynormer", ("--model", "polynormer", "-le", "1", "-b", "128",
                                      "--fan_out", "5")))},
    # More ogb node sets (`verbatim_ogbn_datasets`): an MLP then Correct & Smooth over a
    # normalised SparseTensor on products; a reversible 7-layer GNN (GroupAddRev's own
    # autograd, a dropout mask shared by the blocks) over RandomNodeLoader parts of products;
    # a 28-layer DeeperGCN (GENConv with learned softmax, DeepGCNLayer 'res+' with gradient
    # checkpointing every third layer) over RandomNodeLoader parts of proteins, 112 tasks.
    "correct_and_smooth": Example(
        "examples/correct_and_smooth.py",
        **_epochs("range(1, 301)", "range(1, 31)", "300 epochs -> 30")),
    "rev_gnn": Example("examples/rev_gnn.py",
                       **_epochs("range(1, 1001)", "range(1, 4)", "1,000 epochs -> 3")),
    "ogbn_proteins_deepgcn": Example(
        "examples/ogbn_proteins_deepgcn.py",
        **_epochs("range(1, 1001)", "range(1, 3)", "1,000 epochs -> 2")),
    # Point clouds, superpixels and meshes (`verbatim_geometry_datasets`): torch-cluster's
    # fps / radius / knn / graclus / voxel grids inside the models' forwards, pyg-lib's
    # spline kernels (run them with pyg-lib's environment, torch-cluster added to it).
    **{name: Example(f"examples/{name}.py", **_epochs(old, new, why))
       for name, old, new, why in (
           ("pointnet2_classification", "range(1, 201)", "range(1, 3)", "200 epochs -> 2"),
           ("point_transformer_classification", "range(1, 201)", "range(1, 3)",
            "200 epochs -> 2"),
           ("randlanet_classification", "range(1, 201)", "range(1, 3)", "200 epochs -> 2"),
           ("mnist_graclus", "range(1, 31)", "range(1, 2)", "30 epochs -> 1"),
           ("mnist_nn_conv", "range(1, 31)", "range(1, 4)", "30 epochs -> 3"),
           ("mnist_voxel_grid", "range(1, 21)", "range(1, 2)", "20 epochs -> 1"),
           ("faust", "range(1, 101)", "range(1, 3)", "100 epochs -> 2"))},
    "dgcnn_classification": Example("examples/dgcnn_classification.py",
                                    argv=("--epochs", "3")),   # 200 epochs -> 2
    "unimp_arxiv": Example("examples/unimp_arxiv.py",   # 0.3-1.7 s an epoch here
                           **_epochs("range(1, 501)", "range(1, 101)", "500 epochs -> 100")),
    "egc": Example("examples/egc.py"),
    # PyG's benchmark programs, run as their READMEs say (``python main.py`` in the folder:
    # its sibling modules imported; the points and runtime scripts import theirs as packages
    # of ``benchmark/``, which is therefore on sys.path too).
    # Graph classification by 10-fold cross-validation: 17 models (BatchNorm GIN, DiffPool's
    # dense loaders, EdgePool, SAGPool, ASAP, SortPool, ...), a model's `reset_parameters` and
    # three new loaders per fold; its grid of 5 x 4 layer / width choices and 4 datasets cut
    # to one choice on MUTAG and IMDB-BINARY, 100 epochs to 3, each epoch logged.
    "kernel_main": Example(
        "benchmark/kernel/main.py", tree="benchmark/kernel", argv=("--epochs", "3"),
        edits=(("layers = [1, 2, 3, 4, 5]", "layers = [2]"),
               ("hiddens = [16, 32, 64, 128]", "hiddens = [32]"),
               ("datasets = ['MUTAG', 'PROTEINS', 'IMDB-BINARY', 'REDDIT-BINARY']",
                "datasets = ['MUTAG', 'IMDB-BINARY']"),
               ("logger=None", "logger=logger"),
               ("    SortPool,\n", "")),   # its forward reads a `self.k` it never sets
        why="layers [1..5] x hiddens [16..128] -> [2] x [32]; 4 datasets -> MUTAG, "
            "IMDB-BINARY; 100 epochs -> 3; its logger on; SortPool left out (fails in PyG: "
            "no attribute 'k')"),
    **{f"points_{name}": Example(f"benchmark/points/{name}.py", tree="benchmark/points",
                                 import_roots=("benchmark", ), argv=("--epochs", "2"))
       for name in ("point_net", "edge_cnn", "mpnn", "spline_cnn", "point_cnn")},
}


# -- the child: one example in one mode --------------------------------------------------------
def run_child(file: Path, options: dict | None, data_root: Path,
              argv: list[str] | tuple[str, ...] = (),
              import_roots: list[str] | tuple[str, ...] = ()) -> None:
    import random
    import runpy

    import numpy as np
    import torch

    def run() -> None:   # in each of the runtime's ranks: stand-ins installed there too
        install_stand_ins(data_root)
        install_ogb(data_root)
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        sys.argv = [str(file), *argv]
        for root in (*import_roots, str(file.parent)):   # as ``python file`` puts its folder
            if root not in sys.path:
                sys.path.insert(0, root)
        runpy.run_path(str(file), run_name="__main__")

    if options is None:
        run()
    else:
        import gnnorch

        torch.manual_seed(0)   # the run's seed (`Runtime(seed=None)`: the caller's)
        gnnorch.Runtime(run, **options)()


# -- comparing ---------------------------------------------------------------------------------
def kept_lines(stdout: str) -> list[str]:
    """The printed lines compared: blank lines and lines reporting a time dropped, the value of
    a ``Duration:`` field blanked (PyG's benchmark scripts print it beside their metrics)."""
    return [TIME_FIELD.sub(r"\1#", line.rstrip()) for line in stdout.splitlines()
            if line.strip() and not TIME_LINE.search(line)]


def compare(reference: list[str], other: list[str]) -> dict:
    """The verdict of `other` against `reference` (lines from `kept_lines`)."""
    if reference == other:
        return {"verdict": "identical", "lines": len(reference)}
    blank = [NUMBER.sub("#", line) for line in reference]
    if len(reference) == len(other) and blank == [NUMBER.sub("#", line) for line in other]:
        # The line with the largest difference; else (numbers equal, spelt otherwise: 1.0 /
        # 1.00) the first line that differs.
        where = next(k for k, (a, b) in enumerate(zip(reference, other)) if a != b)
        worst = 0.0
        for i, (a, b) in enumerate(zip(reference, other)):
            for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)):
                if abs(float(x) - float(y)) > worst:
                    worst, where = abs(float(x) - float(y)), i
        return {"verdict": "numbers differ", "lines": len(reference), "max_abs_diff": worst,
                "first": {"reference": reference[where], "other": other[where]}}
    i = next((k for k, (a, b) in enumerate(zip(reference, other)) if a != b),
             min(len(reference), len(other)))
    return {"verdict": "text differs", "lines": [len(reference), len(other)],
            "first": {"reference": reference[i] if i < len(reference) else None,
                      "other": other[i] if i < len(other) else None}}


# -- the parent --------------------------------------------------------------------------------
def extract(mirror: Path, ref: str, example: Example, dest: Path) -> Path:
    text = subprocess.run(["git", "-C", str(mirror), "show", f"{ref}:{example.path}"],
                          capture_output=True, text=True, check=True).stdout
    if example.tree:   # the script's folder as shipped, for its sibling modules
        archive = subprocess.run(["git", "-C", str(mirror), "archive", ref, example.tree],
                                 capture_output=True, check=True).stdout
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for old, new in example.edits:
        if text.count(old) != 1:
            raise SystemExit(f"{example.path} at {ref}: the edit {old!r} matches "
                             f"{text.count(old)} times, not once (the example changed)")
        text = text.replace(old, new)
    out = dest / example.path
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def run_mode(args: argparse.Namespace, file: Path, mode: str, data_root: Path,
             argv: tuple[str, ...] = (), import_roots: tuple[Path, ...] = ()) -> dict:
    options = None if mode.startswith("vanilla") else {**MODE_OPTIONS[mode], **args.options}
    cmd = [args.python, __file__, "--child", str(file), "--data-root", str(data_root),
           "--child-options", json.dumps(options), "--child-argv", json.dumps(list(argv)),
           "--child-roots", json.dumps([str(p) for p in import_roots])]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": os.pathsep.join(   # + the
        p for p in (str(args.gnnorch_src or ""), str(HERE),                       # stand-ins
                    os.environ.get("PYTHONPATH", "")) if p)}
    start = time.perf_counter()
    # A session of its own, so that a timeout ends the runtime's rank processes too.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=file.parent, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
        status = "ok" if proc.returncode == 0 else "failed"
        if proc.returncode < 0:   # (SIGKILL here: the kernel's out-of-memory killer)
            stderr += f"\nkilled by {signal.Signals(-proc.returncode).name}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        status = "timeout"
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:   # a process of another session holds the pipes
            proc.stdout.close()
            proc.stderr.close()
            stdout, stderr = "", "output lost: a process outside the run's session kept it open"
    return {"mode": mode, "status": status, "returncode": proc.returncode,
            "seconds": round(time.perf_counter() - start, 1), "stdout": stdout,
            "stderr_tail": stderr[-2000:]}


def study(args: argparse.Namespace, name: str, file: Path, data_root: Path,
          import_roots: tuple[Path, ...] = ()) -> dict:
    argv = EXAMPLES[name].argv
    runs = {mode: run_mode(args, file, mode, data_root, argv, import_roots)
            for mode in ("vanilla", "vanilla-again", *args.modes)}
    reference = runs["vanilla"]
    result = {"example": name, "path": EXAMPLES[name].path, "edits": EXAMPLES[name].why,
              "argv": list(argv), "seconds": {m: r["seconds"] for m, r in runs.items()},
              "runs": runs}
    if reference["status"] != "ok":
        return result
    lines = kept_lines(reference["stdout"])
    result["verdicts"] = {}
    for mode, run in runs.items():
        if mode == "vanilla":
            continue
        if run["status"] != "ok":
            result["verdicts"][mode] = {"verdict": run["status"],
                                        "error": error_line(run.get("stderr_tail"))}
        else:
            result["verdicts"][mode] = compare(lines, kept_lines(run["stdout"]))
    return result


def summary_line(text: str | None, key: str) -> str | None:
    """The line of gnnorch's end-of-run summary (on stderr) that starts with `key`."""
    found = [line.strip() for line in (text or "").splitlines() if line.strip().startswith(key)]
    return found[-1] if found else None


def rewrite_lines(result: dict) -> list[str | None]:
    """Each runtime mode's rewrite line: which layers ran reordered, in how many calls."""
    return [summary_line(run.get("stderr_tail"), "rewrite:")
            for mode, run in result["runs"].items() if not mode.startswith("vanilla")]


def failure(run: dict) -> str:
    """How a run that did not finish well ended: its status and its error line."""
    return f"{run['status']}: {error_line(run.get('stderr_tail'))}"


def error_line(text: str | None) -> str:
    """The error a failed run ended with (the last ``...Error: ...`` line), else its last
    line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if ERROR_LINE.match(line)]
    if not errors:
        return lines[-1][:200] if lines else ""
    i = errors[-1]
    return " ".join(lines[i:i + 2] if lines[i].endswith(":") else lines[i:i + 1])[:200]


def markdown(report: dict) -> str:
    modes = ["vanilla-again", *report["modes"]]
    out = [f"PyG examples at `{report['ref']}` run verbatim ({report['versions']}); runtime "
           f"options {json.dumps(report['options'])}.", "",
           "| example | edits | vanilla s | " + " | ".join(modes)
           + " | the runtime's rewrites |", "|---|---|---|" + "---|" * len(modes) + "---|"]
    for r in report["results"]:
        if "verdicts" not in r:
            cells = ([f"not compared: vanilla {md_cell(failure(r['runs']['vanilla']))}"]
                     + [""] * (len(modes) - 1))
        else:
            cells = [_cell(r["verdicts"][m], r["seconds"][m]) for m in modes]
        rewrites = "; ".join(sorted({line.removeprefix("rewrite: ") for line in rewrite_lines(r)
                                     if line}))
        changes = "; ".join(filter(None, (f"args `{' '.join(r['argv'])}`" if r.get("argv")
                                          else "", r["edits"])))
        out.append(f"| `{r['example']}` | {changes or '-'} | {r['seconds']['vanilla']} | "
                   + " | ".join(cells) + f" | {rewrites or '-'} |")
    return "\n".join(out) + "\n"


def md_cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|")


def _cell(verdict: dict, seconds: float) -> str:
    v = verdict["verdict"]
    if v == "identical":
        return f"identical ({verdict['lines']} lines, {seconds} s)"
    if v == "numbers differ":
        return f"numbers differ (max {verdict['max_abs_diff']:.3g}, {seconds} s)"
    if v == "text differs":
        return f"text differs: `{verdict['first']['other']}`"
    return f"{v}: {md_cell(verdict.get('error'))}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", nargs="+", default=list(EXAMPLES), metavar="NAME",
                   help=f"examples to run (default: all): {', '.join(EXAMPLES)}")
    p.add_argument("--modes", nargs="+", choices=list(MODE_OPTIONS), default=["runtime"],
                   help="modes compared with vanilla (default: runtime)")
    p.add_argument("--options", type=json.loads, default={},
                   help="extra gnnorch.Runtime options as JSON, added to every mode's")
    p.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR,
                   help="PyG's fetched bare repository (default: %(default)s)")
    p.add_argument("--ref", default=None,
                   help="git ref of the examples (default: the installed PyG's tag)")
    p.add_argument("--python", default=str(DEFAULT_PYTHON if DEFAULT_PYTHON.exists()
                                           else sys.executable),
                   help="interpreter with torch_geometric and gnnorch (default: %(default)s)")
    p.add_argument("--gnnorch-src", type=Path, default=None,
                   help="import gnnorch from this folder (put first on PYTHONPATH)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--out", type=Path, default=None, help="write the full results (JSON)")
    p.add_argument("--md", type=Path, default=None, help="write the Markdown table")
    p.add_argument("--report", type=Path, nargs="+", default=None, metavar="JSON",
                   help="run nothing: print (and --md) the table of these saved --out files, "
                        "in order (an example in a later file replaces its earlier result)")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--child-options", type=json.loads, help=argparse.SUPPRESS)
    p.add_argument("--child-argv", type=json.loads, default=[], help=argparse.SUPPRESS)
    p.add_argument("--child-roots", type=json.loads, default=[], help=argparse.SUPPRESS)
    p.add_argument("--data-root", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = [name for name in args.examples if name not in EXAMPLES]
    if unknown:
        p.error(f"unknown example(s) {', '.join(unknown)}; choose from {', '.join(EXAMPLES)}")
    if not isinstance(args.options, dict):
        p.error("--options must be a JSON object, e.g. '{\"cache\": true}'")
    # The children run in the example's folder: paths given relative to here made absolute
    # (not resolved: a virtual environment's python is a link that must stay one).
    python = args.python if os.sep in args.python else shutil.which(args.python)
    if python is None or not os.access(python, os.X_OK) or os.path.isdir(python):
        p.error(f"--python {args.python!r} is not an executable interpreter")
    args.python = str(Path(python).absolute())
    if args.gnnorch_src is not None:
        if not args.gnnorch_src.is_dir():
            p.error(f"--gnnorch-src {str(args.gnnorch_src)!r} is not a directory")
        args.gnnorch_src = args.gnnorch_src.absolute()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        run_child(args.child, args.child_options, args.data_root, args.child_argv,
                  args.child_roots)
        return 0
    if args.report:
        reports = [json.loads(path.read_text()) for path in args.report]
        if len({(r["ref"], tuple(r["modes"])) for r in reports}) > 1:
            raise SystemExit("--report: the files differ in ref or modes; render them apart")
        by_example = {x["example"]: x for r in reports for x in r["results"]}  # later wins
        merged = {**reports[0], "results": list(by_example.values())}
        return write_report(args, merged)
    if not (args.mirror / "HEAD").exists():
        raise SystemExit(f"--mirror {args.mirror}: not a git repository (fetch "
                         "github:pyg-team/pytorch_geometric first)")
    versions = probe_versions(args.python)
    ref = args.ref
    if ref is None:
        ref, warning = pick_ref(args.mirror, versions["torch_geometric"])
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    commit = subprocess.run(["git", "-C", str(args.mirror), "rev-parse", ref],
                            capture_output=True, text=True, check=True).stdout.strip()
    report = {"ref": f"{ref} ({commit[:12]})", "versions": ", ".join(
        f"{k} {v}" for k, v in versions.items() if v and k in ("torch", "torch_geometric",
                                                                "torch_sparse", "pyg_lib")),
        "options": args.options, "modes": args.modes, "date": time.strftime("%Y-%m-%d %H:%M"),
        "results": []}
    with tempfile.TemporaryDirectory(prefix="pyg-examples-") as work:
        work = Path(work)
        for name in args.examples:
            example = EXAMPLES[name]
            file = extract(args.mirror, commit, example, work / "pyg")
            roots = tuple(work / "pyg" / root for root in example.import_roots)
            result = study(args, name, file, work / "data", roots)
            report["results"].append(result)
            if args.out:   # after every example: a run stopped midway keeps what it did
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report, indent=1))
            verdicts = ({m: v["verdict"] for m, v in result["verdicts"].items()}
                        if "verdicts" in result
                        else f"not compared: vanilla {failure(result['runs']['vanilla'])}")
            print(f"{name}: vanilla {result['seconds']['vanilla']} s; {verdicts}", flush=True)
    return write_report(args, report)


def write_report(args: argparse.Namespace, report: dict) -> int:
    table = markdown(report)
    print(table)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
