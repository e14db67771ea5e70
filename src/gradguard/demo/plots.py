"""The demo's figures: each with a title, axis labels with units, a legend, plain tick labels."""

from __future__ import annotations

from pathlib import Path
from typing import List

from .exactness import DIVIDE, FULL, GRADGUARD, REORDERED, WINDOW, run_name

#: float64's unit roundoff 2**-53: a relative difference at this level is rounding, nothing else.
ROUNDOFF = 2.0**-53
_LABEL = {
    FULL: "full batch (K = 1)",
    DIVIDE: "divide-by-K: loss / K per micro-batch (what Accelerate, Lightning, DeepSpeed do)",
    GRADGUARD: "gradguard Accumulator (count = tokens)",
    REORDERED: "full batch, paragraphs reversed: rounding alone",
}
# Two shades per scheme: the lighter for K = 4, the darker for K = 16.
_COLORS = {DIVIDE: ("#f5a142", "#b34700"), GRADGUARD: ("#5fa8e8", "#0b3d91")}


def _plain_log(value, _pos) -> str:
    """``1``, ``1e-4``: plain numbers on a log axis, not 10^k."""
    return f"{value:g}" if value >= 1 else f"{value:.0e}".replace("e-0", "e-")


def write_plots(out: Path, results: dict) -> List[Path]:
    """Write ``loss_curves.png``, ``weight_distance.png`` and ``gradient_error.png`` into ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    curves = results["curves"]
    ks = [row["K"] for row in results["table"]]
    steps = curves["eval_steps"]
    paths = []

    # 1. Held-out loss: the curves, and below them their difference from the full batch's (at loss
    #    scale the curves overlap).
    fig, axes = plt.subplots(2, len(ks), figsize=(5.4 * len(ks), 7.6), sharex=True, squeeze=False)
    full = curves["heldout_loss"][FULL]
    for col, k in enumerate(ks):
        top, bottom = axes[0][col], axes[1][col]
        top.plot(steps, full, color="black", lw=5, alpha=0.3, label=_LABEL[FULL])
        bottom.axhline(0.0, color="black", lw=5, alpha=0.3)
        for scheme, style in ((DIVIDE, "-"), (GRADGUARD, "--")):
            values = curves["heldout_loss"][run_name(scheme, k)]
            color = _COLORS[scheme][1]
            top.plot(steps, values, style, color=color, marker="o", ms=3.5, label=_LABEL[scheme])
            bottom.plot(steps, [v - f for v, f in zip(values, full)], style, color=color, marker="o", ms=3.5)
        each = WINDOW // k
        top.set_title(f"K = {k} micro-batches of {each} paragraph{'s' if each > 1 else ''}")
        top.set_ylabel("held-out loss (nats per byte)")
        bottom.set_title(f"K = {k}: held-out loss minus the full batch's")
        bottom.set_ylabel("loss difference (nats per byte)")
        bottom.set_xlabel(f"optimizer step ({WINDOW} paragraphs each)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=1, bbox_to_anchor=(0.5, 0.955), fontsize=9, frameon=False)
    fig.suptitle("Held-out loss of a byte-level transformer on Python's documentation (float64)")
    fig.tight_layout(rect=(0, 0, 1, 0.87))
    paths.append(_save(fig, out / "loss_curves.png", plt))

    # 2. Weight distance from the full-batch run after each step: where rounding cannot hide a difference.
    fig, ax = plt.subplots(figsize=(8.6, 5.4))
    n = len(curves["weight_distance"][REORDERED])
    x = range(1, n + 1)
    for scheme, style in ((DIVIDE, "-"), (GRADGUARD, "--")):
        for k, color, marker in zip(ks, _COLORS[scheme], "os"):
            values = [max(v, ROUNDOFF / 10) for v in curves["weight_distance"][run_name(scheme, k)]]
            ax.plot(x, values, style, color=color, lw=1.8, marker=marker, ms=4, markevery=max(1, n // 8),
                    label=f"{_LABEL[scheme]}, K = {k}")
    ax.plot(x, [max(v, ROUNDOFF / 10) for v in curves["weight_distance"][REORDERED]], color="gray", lw=1.2, label=_LABEL[REORDERED])
    ax.axhline(ROUNDOFF, color="gray", ls=":", label="float64 rounding unit, 1.1e-16")
    _log_axis(ax, FuncFormatter(_plain_log))
    ax.set_xlim(0, n + 1)
    ax.set_xlabel(f"optimizer step ({WINDOW} paragraphs each)")
    ax.set_ylabel("||w - w_full|| / ||w_full||  (relative, log scale)")
    ax.set_title("How far each run's weights are from the full-batch run's (float64)")
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    paths.append(_save(fig, out / "weight_distance.png", plt))

    # 3. Gradient error against the full batch, by number of micro-batches.
    sweep = results["gradient_error_sweep"]
    fig, ax = plt.subplots(figsize=(8, 5))
    for scheme, style in ((DIVIDE, "-"), (GRADGUARD, "--")):
        values = [max(v, ROUNDOFF / 10) for v in sweep[scheme]]
        color = _COLORS[scheme][1]
        ax.plot(sweep["K"], values, style, marker="o", color=color, label=_LABEL[scheme])
        for k, v in zip(sweep["K"], values):
            ax.annotate(f"{v:.1e}", (k, v), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=8, color=color)
    ax.axhline(sweep[REORDERED], color="gray", lw=1.2, label=_LABEL[REORDERED])
    ax.axhline(ROUNDOFF, color="gray", ls=":", label="float64 rounding unit, 1.1e-16")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sweep["K"], [str(k) for k in sweep["K"]])
    ax.minorticks_off()
    _log_axis(ax, FuncFormatter(_plain_log))
    ax.set_xlabel(f"micro-batches per optimizer step, K ({WINDOW} paragraphs in all)")
    ax.set_ylabel("||g - g_full|| / ||g_full||  (relative, log scale)")
    ax.set_title(f"Gradient error against the full batch\n(float64, initial weights, mean over the first {sweep['windows']} steps' paragraphs)")
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    paths.append(_save(fig, out / "gradient_error.png", plt))
    return paths


def _log_axis(ax, formatter) -> None:
    ax.set_yscale("log")
    ax.set_ylim(ROUNDOFF / 10, 5.0)
    ax.set_yticks([10.0**e for e in range(-16, 1, 2)])
    ax.yaxis.set_major_formatter(formatter)
    ax.yaxis.set_minor_formatter(formatter.__class__(lambda *_: ""))
    ax.grid(alpha=0.3, which="major")


def _save(fig, path: Path, plt) -> Path:
    from .._files import replacing

    try:
        # a name the demo chose inside its folder: a link planted there is replaced, never followed
        with replacing(path, follow_links=False) as fh:
            fig.savefig(fh, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path
