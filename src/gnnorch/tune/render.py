"""How a tuning report looks: the table (``print(report)``, ``python -m gnnorch report``) and
the PNG (``report.plot(path)``, needs matplotlib)."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any


def cfg_text(config: dict | None) -> str:
    """A configuration as ``p=.. s=.. t=..`` (plus any further dimensions)."""
    if not config:
        return "-"
    text = f"p={config['processes']} s={config['sampler_cores']} t={config['threads']}"
    extra = {k: v for k, v in config.items()
             if k not in ("processes", "sampler_cores", "threads")}
    return text + "".join(f" {k}={v}" for k, v in extra.items())


def _cpus(cpus: list[int]) -> str:
    from ..launch.topology import format_cpulist

    return format_cpulist(cpus) if cpus else "-"


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def table(data: dict) -> str:
    """The report as a readable table (what `print(report)` shows)."""
    d = data
    pf = d["platform"]
    v = pf["versions"]
    lines = [f"gnnorch tuning report ({d['status']}, updated {d['updated']})"]
    numa = len(pf["numa_nodes"])
    lines.append(
        f"platform: {pf['usable_cores']} usable cores ({pf['physical_cores']} physical, "
        f"{'SMT' if pf['smt'] else 'no SMT'}, {numa} NUMA node{'s' if numa != 1 else ''}"
        f"{', cgroup quota %g' % pf['cpu_quota'] if pf['cpu_quota'] else ''}), "
        f"device {pf['device']}; python {v['python']}, torch {v['torch']}, "
        f"PyG {v['torch_geometric']}, scikit-optimize {v['scikit_optimize']}, "
        f"gnnorch {v['gnnorch']}")
    sp = d["space"]
    dims = ", ".join(f"{x['name']} {x['low']:g}..{x['high']:g}"
                     f"{' (log)' if x['prior'] == 'log-uniform' else ''}"
                     for x in sp["dimensions"]) or "none"
    fixed = ", ".join(f"{k}={val}" for k, val in sp["fixed"].items())
    tu = d["tuner"]
    lines.append(
        f"space: {dims}{'; fixed ' + fixed if fixed else ''}; "
        f"{'; '.join(sp['constraints'])}; "
        f"{sp['size'] if sp['size'] is not None else 'not enumerable:'} feasible points")
    lines.append(
        f"tuner: {tu['estimator']} + {tu['acq_func']}, budget {tu['budget']} probes, "
        f"{tu.get('n_initial_points_used') or tu['n_initial_points']} initial points, "
        f"seed {tu['seed']}, stop below {tu['min_gain']:.0%} expected gain; probe = "
        f"{tu['warmup_batches']} warm-up (+2 per sampler core) + {tu['probe_batches']} "
        f"measured steps")
    dec = d["decision"]
    lines.append(f"decision: {'tuned' if dec['tuned'] else 'not tuned'}: {dec['reason']}")
    if d["trials"]:
        lines.append("")
        header = ["#", "chosen by", "config", "cores (rank: trainer/sampler)", "batch/rank",
                  "seeds/s", "predicted", "probe s", "best so far", "status"]
        rows = [header]
        for t in d["trials"]:
            cores = "; ".join(
                f"{c['rank']}: {_cpus(c['trainer_cpus'])}/{_cpus(c['sampler_cpus'])}"
                for c in (t["cores"] or [])) or "unbound"
            pred = t["predicted"]
            rows.append([
                str(t["index"]), t["chosen_by"], cfg_text(t["config"]), cores,
                ",".join(str(b) for b in t["batch_size_per_rank"]) or "-",
                _num(t["throughput"]),
                f"{_num(pred['throughput'])} ({_num(pred['low'], 0)}-"
                f"{_num(pred['high'], 0)})" if pred else "-",
                _num(t["seconds"], 2), _num(t["best_so_far"]),
                t["status"] + (f": {t['error']}" if t["error"] else ""),
            ])
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for k, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        lines.append("")
    if d["stop_reason"]:
        lines.append(f"stopped: {d['stop_reason']}")
    conf = d.get("confirmation")
    if conf:
        parts = [f"{cfg_text(f['config'])} {_num(f['mean'])} "
                 f"(mean of {', '.join(_num(x, 0) for x in f['throughputs'])})"
                 for f in conf["finalists"]]
        lines.append(f"confirmed (finalists within {conf['margin']:.0%} of the best probe, "
                     f"probed again): {'; '.join(parts)}")
    best, default = d["best"], d["default"]
    if best["throughput"] is not None:
        sp_text = (f" = {d['speedup_over_default']:.2f}x the default "
                   f"({cfg_text(default['config'])}: {_num(default['throughput'])} seeds/s)"
                   if d["speedup_over_default"] is not None else "")
        lines.append(f"best: {cfg_text(best['config'])} at {_num(best['throughput'])} "
                     f"seeds/s{sp_text}")
    ov = d["overhead"]
    lines.append(f"overhead: BO {ov['bo_seconds']:.2f} s, probes {ov['probe_seconds']:.2f} s,"
                 f" tuning phase {ov['tuning_seconds']:.2f} s")
    run = d["run"]
    if run:
        epochs = run["epochs"]
        secs = [e["seconds"] for e in epochs]
        text = f"run: {cfg_text(run['config'])}, {len(epochs)} training epoch(s)"
        if secs:
            text += (f", epoch seconds {', '.join(f'{s:.2f}' for s in secs[:8])}"
                     f"{' ...' if len(secs) > 8 else ''} (mean {sum(secs) / len(secs):.2f})")
        if run["wall_seconds"] is not None:
            text += f", wall {run['wall_seconds']:.2f} s"
        lines.append(text)
    for note in d["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)



def plot(report: Any, path: str | os.PathLike) -> Path:
    """Write a PNG: measured throughput per trial (by who chose it), the best-so-far curve
    and the default's throughput. Needs matplotlib (``pip install gnnorch[plot]``)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("TuningReport.plot needs matplotlib: pip install matplotlib "
                          "(or gnnorch[plot])") from exc
    trials = report.trials
    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {"default": "tab:gray", "initial": "tab:blue", "tuner": "tab:orange",
              "confirm": "tab:purple"}
    for who, color in colors.items():
        xs = [t["index"] for t in trials if t["chosen_by"] == who and t["throughput"]]
        ys = [t["throughput"] for t in trials if t["chosen_by"] == who and t["throughput"]]
        if xs:
            ax.scatter(xs, ys, color=color, label=f"{who}", zorder=3)
    failed = [t["index"] for t in trials if t["throughput"] is None]
    if failed:
        ax.scatter(failed, [0] * len(failed), marker="x", color="tab:red", label="failed")
    curve = [(t["index"], t["best_so_far"]) for t in trials if t["best_so_far"] is not None]
    if curve:
        ax.step([c[0] for c in curve], [c[1] for c in curve], where="post",
                color="tab:green", label="best so far")
    if report.default["throughput"]:
        ax.axhline(report.default["throughput"], color="tab:gray", linestyle="--",
                   linewidth=1, label="default")
    for t in trials:
        if t["throughput"]:
            ax.annotate(cfg_text(t["config"]), (t["index"], t["throughput"]),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("training throughput (seeds/s)")
    ax.set_title(f"gnnorch tuning: best {cfg_text(report.best['config'])}"
                 + (f", {report.speedup:.2f}x default" if report.speedup else ""), fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
