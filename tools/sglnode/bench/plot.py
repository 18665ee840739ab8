"""PNG plot of a sweep: throughput and latency percentiles against concurrency (or rate)."""

from __future__ import annotations

from pathlib import Path


def _x(stage: dict[str, object]) -> float:
    value = stage["concurrency"] if stage["concurrency"] is not None else stage["request_rate"]
    return float(value)  # type: ignore[arg-type]


def plot_sweep(stages: list[dict[str, object]], path: Path, simulated: bool) -> None:
    import matplotlib  # noqa: PLC0415 - plotting is optional; import only when asked

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    xs = [_x(s) for s in stages]
    xlabel = "concurrency" if stages and stages[0]["concurrency"] is not None else "request rate (req/s)"
    fig, (ax_tput, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax_tput.plot(xs, [s["output_tok_s"] for s in stages], marker="o", label="measured")
    roof = [
        (x, s["roofline"]["roofline_decode_tok_s"]) for x, s in zip(xs, stages, strict=True) if s["roofline"]
    ]  # type: ignore[index]
    if roof:
        ax_tput.plot([r[0] for r in roof], [r[1] for r in roof], linestyle="--", label="roofline (plan)")
    ax_tput.set_xlabel(xlabel)
    ax_tput.set_ylabel("output tok/s")
    ax_tput.legend()
    for key, style in (("ttft_ms", "-"), ("itl_ms", "--"), ("tpot_ms", ":")):
        for pct in ("p50", "p99"):
            ys = [(s[key] or {}).get(pct) for s in stages]  # type: ignore[union-attr]
            ax_lat.plot(xs, ys, linestyle=style, marker=".", label=f"{key[:-3].upper()} {pct}")
    ax_lat.set_xlabel(xlabel)
    ax_lat.set_ylabel("ms")
    ax_lat.set_yscale("log")
    ax_lat.legend(fontsize="small")
    title = "sglnode bench"
    if simulated:
        title += "  --  SIMULATED TARGET, NOT A MEASUREMENT OF SGLANG"
    fig.suptitle(title, color="red" if simulated else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
