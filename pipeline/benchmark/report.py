"""The bench's figures and table: per-step medians and spreads, ratios with ties, markdown and a chart.

Pure functions over the rows' raw measurements (pipeline.bench runs the rows). A row's speed is the
median of its timed optimizer steps; its spread is the range of those steps. A speed ratio A/B is
given with the interval it can take when A's and B's steps are paired worst with best
([A slowest / B fastest, A fastest / B slowest]); when that interval holds 1 the two are a tie.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.benchmark.rows import BASELINE

FLOOR_BYTES = 16  # fp32 weight 4 + gradient 4 + AdamW exp_avg 4 + exp_avg_sq 4, per trainable parameter


def train_flops_per_token(config, seq_len: int, frozen: bool = False) -> float:
    """Model FLOPs of one training token of a transformer encoder at `seq_len`: three forwards (the forward
    and a backward of twice its cost), each 2 FLOPs a weight of the layers' matrix products (Q, K, V, the
    output projection and the two FFN matrices) plus the attention's own products (scores and their mix,
    4 x seq_len x hidden a layer). With the matrices `frozen` (LoRA's base) their backward computes no weight
    gradient: two forwards for them, and the adapters' products (r x (in + out) a projection) next to nothing.
    Recomputation by checkpointing is not counted: it is work, not model FLOPs (the MFU convention), so a row that
    recomputes shows it as a lower share of a peak. Embedding lookups and the head are left out (no or next to no
    FLOPs)."""
    h, n = config.hidden_size, config.num_hidden_layers
    ffn = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 4 * h)  # DistilBERT: hidden_dim
    weights, attention = n * 2 * (4 * h * h + 2 * h * ffn), n * 4 * seq_len * h
    # frozen weights: a backward of the input gradients alone; attention's products have no weight, both their
    # inputs want gradients still
    return (2.0 if frozen else 3.0) * weights + 3.0 * attention


def achieved_flops(row: dict, seq_len: int) -> float:
    """A row's model FLOP/s at its median step: FLOPs a token x tokens a second."""
    return row["flops_per_token"] * seq_len * row["samples_per_second"]


# ---------------------------------------------------------------- median, spread, ties


def step_stats(step_seconds: list[float], examples_per_step: int) -> dict:
    """Samples per second at the median step, at the slowest and the fastest, and the spread (range / median)."""
    s = np.asarray(step_seconds, dtype=float)
    if len(s) == 0 or (s <= 0).any():
        raise ValueError(f"step times must be positive, got {list(step_seconds)}")
    median = float(np.median(s))
    return {
        "step_seconds": [float(x) for x in s],
        "median_step_s": median,
        "samples_per_second": examples_per_step / median,
        "sps_low": examples_per_step / float(s.max()),
        "sps_high": examples_per_step / float(s.min()),
        "spread": float(s.max() - s.min()) / median,
    }


def speed_ratio(a: dict, b: dict) -> dict:
    """A's speed over B's: the ratio of medians, its interval from the spreads, and the verdict."""
    ratio = a["samples_per_second"] / b["samples_per_second"]
    low, high = a["sps_low"] / b["sps_high"], a["sps_high"] / b["sps_low"]
    return {"ratio": ratio, "low": low, "high": high, "verdict": verdict(low, high)}


def verdict(low: float, high: float) -> str:
    """'tie' when the interval holds 1 (the difference is within the spread), else 'faster' or 'slower'."""
    if low <= 1.0 <= high:
        return "tie"
    return "faster" if low > 1.0 else "slower"


# ---------------------------------------------------------------- the summary


def _ok(r: dict | None) -> bool:
    return r is not None and "peak_mb" in r


def summarize(results: list[dict], peaks: dict[str, float] | None = None, seq_len: int = 0,
              spec: dict | None = None) -> dict:  # fmt: skip
    """Ratios to the baseline (the row keyed `fp32`; none without it), to the floor, and ours / Trainer, added to
    each row; with this machine's measured matmul `peaks` (FLOP/s by precision), each row's model FLOP/s and its
    share of them (`of_matmul`), and of the hardware's `spec` peak where it is known (peaks.spec_peaks: `of_spec`)."""
    # found by its key, not its place: with bench.baseline=false no other row may silently become the baseline
    baseline = next((r for r in results if r["spec"]["key"] == BASELINE), None)
    base = baseline["ours"] if baseline else None
    params = next((r["ours"]["parameters"] for r in results if _ok(r["ours"])), 0)
    floor_mb = FLOOR_BYTES * params / 2**20
    for r in results:
        o, t = r["ours"], r["trainer"]
        if not _ok(o):
            continue
        r["floor_mb"] = FLOOR_BYTES * o["trained_parameters"] / 2**20
        if peaks and "flops_per_token" in o and o.get("precision") in peaks:
            r["tflops"] = achieved_flops(o, seq_len) / 1e12
            r["of_matmul"] = achieved_flops(o, seq_len) / peaks[o["precision"]]
            if o["precision"] in (spec or {}).get("peaks", {}):
                r["of_spec"] = achieved_flops(o, seq_len) / spec["peaks"][o["precision"]]
        r["mem_vs_floor"] = o["peak_mb"] / floor_mb
        if r is baseline:
            r["speed_vs_base"] = {"ratio": 1.0, "low": 1.0, "high": 1.0, "verdict": "baseline"}
        elif _ok(base):
            r["speed_vs_base"] = speed_ratio(o, base)
            if base["peak_mb"] > 0:  # a tiny model's peak can round to nothing
                r["mem_vs_base"] = o["peak_mb"] / base["peak_mb"]
        if _ok(t):
            r["speed_vs_trainer"] = speed_ratio(o, t)
            if t["peak_mb"] > 0:
                r["mem_vs_trainer"] = o["peak_mb"] / t["peak_mb"]
    return {"parameters": params, "floor_mb": floor_mb, "rows": results, "peaks": peaks or {}, "spec": spec or {}}


def ties(summary: dict) -> list[str]:
    """Labels of the rows whose speed ours / Trainer is a tie."""
    return [r["spec"]["label"] for r in summary["rows"] if r.get("speed_vs_trainer", {}).get("verdict") == "tie"]


# ---------------------------------------------------------------- the table


def _cell(r: dict | None, key: str, fmt: str) -> str:
    if r is None:
        return "-"
    if "na" in r:
        return "n/a"
    if "failed" in r:
        return "failed"
    return format(r[key], fmt) if key in r else "-"


def speed_cell(r: dict | None) -> str:
    """Samples/s at the median step and the spread, e.g. `2.31 ±4%` (half the range, over the median)."""
    if not _ok(r):
        return _cell(r, "samples_per_second", ".2f")
    return f"{r['samples_per_second']:.2f} ±{50 * r['spread']:.0f}%"


def ratio_cell(ratio: dict | None) -> str:
    """`1.15 (1.08-1.22) faster`, or `tie` in bold when the interval holds 1."""
    if not ratio:
        return "-"
    if ratio["verdict"] == "baseline":
        return "1.00"
    word = "**tie**" if ratio["verdict"] == "tie" else ratio["verdict"]
    return f"{ratio['ratio']:.2f} ({ratio['low']:.2f}-{ratio['high']:.2f}) {word}"


def share_cell(r: dict, key: str) -> str:
    """A share of a peak: `45%`, `3.2%` below a tenth; `unknown` for a timed row whose peak is not known."""
    if key not in r:
        return "unknown" if "tflops" in r else "-"
    return f"{r[key]:.0%}" if r[key] >= 0.1 else f"{r[key]:.1%}"


def _row_line(r: dict, cuda: bool) -> str:
    o, t = r["ours"], r["trainer"]
    shape = f"{o['micro']} x {o['accumulation']}" if "micro" in o else "-"
    peak = _cell(o, "peak_mb", ",.0f")
    if cuda and _ok(o):
        peak += f" ({o['reserved_mb']:,.0f} reserved)"
    tpeak = _cell(t, "peak_mb", ",.0f")
    if cuda and _ok(t):
        tpeak += f" ({t['reserved_mb']:,.0f} reserved)"
    return (
        f"| {r['spec']['label']} | {r['spec'].get('only_ours', '-')} | {shape} | {peak} | "
        f"{_cell(r, 'mem_vs_base', '.2f')} | {_cell(r, 'mem_vs_floor', '.2f')} | "
        f"{speed_cell(o)} | {ratio_cell(r.get('speed_vs_base'))} | {tpeak} | {speed_cell(t)} | "
        f"{_cell(r, 'mem_vs_trainer', '.2f')} | {ratio_cell(r.get('speed_vs_trainer'))} | "
        f"{_cell(r, 'tflops', '.3f')} | {share_cell(r, 'of_matmul')} | {share_cell(r, 'of_spec')} |"
    )


def trainer_notes(rows: list[dict]) -> list[str]:
    """Trainer's exact settings, read back from the TrainingArguments each Trainer row built.

    One note with what every row shares, then one per row with what differs from that.
    """
    runs = [(r["spec"]["label"], r["trainer"]["trainer_args"]) for r in rows if "trainer_args" in (r["trainer"] or {})]
    if not runs:
        return []
    common = {k: v for k, v in runs[0][1].items() if all(s.get(k) == v for _, s in runs)}
    version = common.pop("transformers", "?")
    notes = [f"Trainer (transformers {version}), TrainingArguments in every row: " + _kv(common) + "."]
    for label, s in runs:
        own = {k: v for k, v in s.items() if k not in common and k != "transformers"}
        notes.append(f"Trainer, {label}: {_kv(own)}.")
    return notes


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def cpu_note(rows: list[dict], precision: str) -> str:
    """Whether this CPU computes bf16 natively: emulated bf16 is slower than fp32, which the table would hide."""
    native = next((r["ours"]["cpu_bf16_native"] for r in rows if "cpu_bf16_native" in r["ours"]), None)
    if precision != "bf16" or native is None:
        return ""
    if native:
        return ", computed natively by this CPU (AVX512-BF16 or AMX)"
    return ", emulated on this CPU (no AVX512-BF16 or AMX): slower than fp32"


def row_notes(rows: list[dict]) -> list[str]:
    """What happened to single rows: the auto-fit's pick, out-of-memory halvings, rows not run or failed."""
    notes = []
    for r in rows:
        o = r["ours"]
        if "autofit" in o:
            notes.append(f"Auto-fit picked micro-batch {o['micro']}: {o['autofit']}. Trainer got the same micro-batch.")
        if o.get("halvings"):
            notes.append(f"{r['spec']['label']}: out of memory, micro-batch halved {o['halvings']} time(s) to fit.")
        for who in ("ours", "trainer"):
            x = r[who] or {}
            if "na" in x or "failed" in x:
                notes.append(f"{r['spec']['label']} ({who}): {x.get('na') or 'failed, ' + x['failed']}.")
    if any((r["ours"] or {}).get("profile") for r in rows):
        notes.append("Profiled (bench.profile=true): the profiler slows every step; take speeds from a run without it.")
    return notes


def bench_table(bench, summary: dict, explain: list[str] = ()) -> str:
    """The markdown table and its notes; `bench` is the BenchConfig, `explain` extra notes to append."""
    rows = summary["rows"]
    device = next((r["ours"]["device"] for r in rows if "device" in r["ours"]), "?")
    cuda = device.startswith("cuda")
    # the mixed precision the rows resolved to: any row's but the fp32 baseline's, which may be absent or anywhere
    mixed = [r["ours"] for r in rows if r["spec"]["key"] != BASELINE]
    precision = next((o["precision"] for o in mixed if "precision" in o), "?")
    attention = next((r["ours"]["attention"] for r in rows if "attention" in r["ours"]), "?")
    head = (
        f"# make bench: {bench.model}, sequence length {bench.seq_len}, effective batch {bench.effective_batch}, "
        f"{bench.steps} timed optimizer steps per row after a warm-up, {device}, attention {attention}\n\n"
        "| row | switches Trainer lacks | micro x accum | peak MB | x baseline | x floor | samples/s | x baseline | "
        "Trainer peak MB | Trainer samples/s | memory ours/Trainer | speed ours/Trainer | TFLOP/s | "
        "of measured matmul | of spec peak |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = [_row_line(r, cuda) for r in rows]
    notes = [
        f"Floor: weights + gradients + AdamW state = {FLOOR_BYTES} bytes x {summary['parameters']:,} trainable "
        f"parameters = {summary['floor_mb']:,.0f} MB; 'x floor' is each row's peak divided by it.",
        "samples/s: at the median timed optimizer step, ± half the range of the steps (the spread). A ratio is "
        "the ratio of medians, with in brackets the range it takes when one side's slowest step meets the "
        "other's fastest; a range that holds 1.00 is a **tie**: the difference is within the spread.",
        f"Mixed precision here is {precision} autocast (fp32 master weights){cpu_note(rows, precision)}; "
        f"every row sees the same {bench.effective_batch * bench.steps} rows per timed run, random token ids at "
        "full length, random weights.",
        "Peak memory: "
        + (
            "torch.cuda.max_memory_allocated (max_memory_reserved in brackets), over the whole row."
            if cuda
            else "peak resident memory of the row's own process minus its resident memory before the model "
            "existed (Linux VmHWM, reset at that point)."
        ),
        "Ours is pipeline.loop.train_epoch with optim.make_training (torch AdamW, fused) and, "
        + (
            "as `make train` does in one process, sparse word-embedding gradients (a switch Trainer lacks: its "
            "embedding gradient is dense, vocabulary x hidden, in every row)."
            if bench.sparse
            else "with bench.sparse=false, dense word-embedding gradients, as Trainer's."
        ),
    ]
    if summary.get("peaks"):
        notes.append(flops_note(summary))
    notes += trainer_notes(rows)
    notes.append(
        f"Trimming keeps the {bench.vocab_used:,} ids the data is drawn from (a stand-in for the distinct "
        "XLM-R ids of the competition's texts; override with bench.vocab_used). Trainer has no such switch: "
        "its trimming row trains the full vocabulary, as a Trainer user would."
    )
    notes += lora_notes(rows) + row_notes(rows) + list(explain)
    return head + "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def lora_notes(rows: list[dict]) -> list[str]:
    """What a LoRA row trains, and what its 'x floor' and FLOPs count (only for a table that has one)."""
    found = [r for r in rows if r["spec"].get("lora")]
    if not found:
        return []
    o = next((r["ours"] for r in found if _ok(r["ours"])), None)
    trained = f" ({o['trained_parameters']:,} trained parameters)" if o else ""
    return [
        f"LoRA rows: the encoder frozen in the row's mixed precision (bf16 or fp16: 2 bytes a parameter, no "
        f"gradient, no AdamW state), adapters of rank {found[0]['spec']['lora']} on its attention and feed-forward "
        f"projections and the head trained in fp32{trained}; 'x floor' is still to the full fine-tuning floor, and "
        "their FLOPs a token count two forwards for the frozen matrices (no weight gradients). Trainer trains the "
        "same model, adapters on, in its own loop."
    ]


def flops_note(summary: dict) -> str:
    """What TFLOP/s and the two shares divide by: the measured matmul throughput, and the spec peak or why not."""
    said = ", ".join(f"{p} {v / 1e12:.2f} TFLOP/s" for p, v in summary["peaks"].items())
    spec = summary.get("spec") or {}
    known = ", ".join(f"{p} {v / 1e12:g} TFLOP/s" for p, v in spec.get("peaks", {}).items())
    of_spec = f"{spec.get('device')}'s dense spec peak ({known})" if known else "the hardware's spec peak"
    return (
        "TFLOP/s: ours' model FLOPs at the median step (3 forwards a token: 2 FLOPs a weight of the layers' "
        "matrices plus attention's own products; recomputation not counted). of measured matmul: that over the "
        f"fastest of ten 2048 x 2048 products measured in the same run ({said}), a share of what this machine "
        f"reached in one large product, not of its hardware peak. of spec peak (MFU): that over {of_spec}; "
        f"unknown where it is not known: {spec.get('why', 'no spec peak was looked up')}."
    )


def format_profiles(summary: dict) -> str:
    """The ops that took the most time in each row's timed steps (`bench.profile=true`), ours beside Trainer."""
    out = ["# Where the time goes: torch.profiler over each row's timed steps (self time, top ops)\n"]
    for r in summary["rows"]:
        for who in ("ours", "trainer"):
            x = r[who] or {}
            if not x.get("profile"):
                continue
            total = sum(p["self_ms"] for p in x["profile"])
            out.append(
                f"## {r['spec']['label']} ({who})\n\n| op | self ms | calls | share of these |\n|---|---:|---:|---:|"
            )
            out += [
                f"| {p['op']} | {p['self_ms']:,.0f} | {p['calls']} | {p['self_ms'] / total:.0%} |" for p in x["profile"]
            ]
            out.append("")
    return "\n".join(out) + "\n"


def plot_bench(summary: dict, path: Path, title: str) -> None:
    """Bar chart: peak memory and samples per second (median, spread as error bars), ours beside Trainer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    labels = [r["spec"]["label"] for r in rows]
    y = np.arange(len(rows))

    def values(who: str, key: str) -> list[float]:
        return [r[who][key] if _ok(r[who]) else 0.0 for r in rows]

    def errors(who: str) -> list[list[float]]:
        med = values(who, "samples_per_second")
        lo = [m - r[who]["sps_low"] if _ok(r[who]) else 0.0 for m, r in zip(med, rows, strict=True)]
        hi = [r[who]["sps_high"] - m if _ok(r[who]) else 0.0 for m, r in zip(med, rows, strict=True)]
        # lists, not a 2 x rows array: for a one-row table (bench.baseline=false, one row chosen) matplotlib
        # would read the array's (1,) rows as scalars, which numpy deprecates
        return [lo, hi]

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * len(rows) + 1.8), sharey=True)
    for who, dy, name in (("ours", -0.2, "ours"), ("trainer", 0.2, "HF Trainer")):
        axes[0].barh(y + dy, values(who, "peak_mb"), 0.4, label=name)
        axes[1].barh(y + dy, values(who, "samples_per_second"), 0.4, xerr=errors(who), capsize=2)
    axes[0].set_xlabel("peak memory (MB)")
    axes[1].set_xlabel("samples/s (median step, bars: slowest to fastest)")
    axes[0].axvline(summary["floor_mb"], color="k", ls="--", lw=1, label="floor (16 B/param)")
    axes[0].set_yticks(y, labels)
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper right", ncol=3, fontsize=8)  # clear of the bars
    fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
