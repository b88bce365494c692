"""Ring (context-parallel) attention on paper: per ring step, the bytes a rank sends and their time
against the kernel time the cost model predicts, for W devices (``tilegen inspect --cp N``).

Everything here is a prediction: kernel times are :mod:`tilegen.models.cost`'s roofline (the programs
``tilegen inspect`` shows for the step's block), transfer times are bytes over the target file's
``bandwidth.interconnect`` (inside a node of ``cores.node_devices`` devices) or ``bandwidth.network``
(a ring wider than a node: its node-crossing links set the pace of every step), per direction, plus
``overhead.p2p_latency_us``. None of it is measured.

The ring is :mod:`tilegen.distributed`'s: global lengths Sq, Sk over W ranks, local n_q = Sq/W and
n_k = Sk/W. Per step a rank sends one K/V block, B·Hkv·n_k·(Dqk + Dv) elements in the input dtype; in
the backward it also sends the block's dK/dV accumulators, the same count in fp32. Causal specs use the
zigzag balance: step 0 is the causal n_q × n_k block; every later step is a full block of n_q × n_k/2
(or n_q/2 × n_k, the same work), so each step does half a full block's work and the steps are equal.
A full mask (no window) is a full n_q × n_k block every step. The transfer of step t+1's block runs
under step t's kernel: a step takes max(kernel, transfer), the last forward step no transfer and the
last backward step the dK/dV return on top. The transfer hides while its time stays under the kernel's.
Windowed masks are not modelled (their steps differ from rank to rank).
"""

from __future__ import annotations

from tilegen.core.errors import SpecError
from tilegen.harness.memory import format_bytes, format_seconds
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import load_target

FIGURES = (("bandwidth", "interconnect"), ("bandwidth", "network"), ("cores", "node_devices"), ("overhead", "p2p_latency_us"))


def _figure(tgt, section: str, key: str):
    table = getattr(tgt, section)
    if key not in table:
        raise SpecError("--target", tgt.name, f"a target file with {section}.{key} for --cp (h100, h200, ascend910b1..b4)")
    return table[key]


def _kernel_times(spec: AttentionSpec, target, dq_strategy: str) -> tuple[float, float]:
    """Predicted forward and backward seconds of one block (the programs ``tilegen inspect`` shows)."""
    from tilegen.harness.report import inspect_report

    report = inspect_report(spec, target, dq_strategy=dq_strategy)
    times = []
    for prog in report["programs"]:
        if "error" in prog:
            raise SpecError("--cp", spec.seq_q, f"a block that fits the target ({prog['error']})")
        times.append(prog["prediction"]["time_s"])
    return times[0], times[1]


def ring_sizes(devices: int) -> list[int]:
    """The ring sizes a ``--cp N`` table shows: the powers of two from 2 below N, and N."""
    sizes, w = [], 2
    while w < devices:
        sizes.append(w)
        w *= 2
    return sizes + [devices]


def cp_report(spec: AttentionSpec, target: str, devices: int, *, dq_strategy: str = "atomic") -> dict:
    """The per-step table of ring attention of ``spec`` (the global problem) over 2..``devices`` ranks.

    Returns plain data: the figures used (with sources and estimate flags), and per ring size W the
    local lengths, the step's kernel times (s), bytes per step (forward: K/V; backward: K/V and fp32
    dK/dV), transfer times (s), whether each transfer hides, the predicted ring totals (s) and the
    single-device times divided by W for comparison.

    Raises:
        SpecError: a windowed mask, sizes that do not split over the ranks, a target without the
            interconnect figures, ``devices`` below 2.
    """
    if not isinstance(devices, int) or devices < 2:
        raise SpecError("--cp", devices, "a ring of at least 2 devices")
    causal = spec.window == (-1, 0) and spec.seq_q == spec.seq_k
    if spec.window != (-1, -1) and not causal:
        raise SpecError("window", spec.window, "(-1, -1) or causal (-1, 0) with seq_q = seq_k for --cp (windowed rings are not modelled)")
    tgt = load_target(target)
    figs = {key: _figure(tgt, section, key) for section, key in FIGURES}
    parts = 2 if causal else 1
    for w in ring_sizes(devices):
        for name, n in (("seq_q", spec.seq_q), ("seq_k", spec.seq_k)):
            if n % (parts * w):
                raise SpecError(name, n, f"a length divisible by {parts * w} for a ring of {w} devices ({'zigzag: 2 chunks per rank' if causal else 'one chunk per rank'})")
    item = {"fp16": 2, "bf16": 2, "fp32": 4}[spec.dtype]
    node = int(figs["node_devices"].value)
    latency = figs["p2p_latency_us"].value * 1e-6
    whole_fwd, whole_bwd = _kernel_times(spec, tgt, dq_strategy)
    rows = []
    for w in ring_sizes(devices):
        nq, nk = spec.seq_q // w, spec.seq_k // w
        if causal:
            first = _kernel_times(spec.replace(seq_q=nq, seq_k=nk, window=(-1, 0), name=f"{spec.name}-cp{w}-diag"), tgt, dq_strategy)
            later = _kernel_times(spec.replace(seq_q=nq, seq_k=nk // 2, window=(-1, -1), name=f"{spec.name}-cp{w}-half"), tgt, dq_strategy)
        else:
            first = later = _kernel_times(spec.replace(seq_q=nq, seq_k=nk, name=f"{spec.name}-cp{w}"), tgt, dq_strategy)
        link = "interconnect" if w <= node else "network"  # a wider ring crosses nodes: those links set the pace
        bw = figs[link].value * 1e9
        kv = spec.batch * spec.heads_kv * nk * (spec.head_dim_qk + spec.head_dim_v)
        fwd_bytes, grad_bytes = kv * item, kv * 4
        fwd_comm = fwd_bytes / bw + latency
        bwd_comm = (fwd_bytes + grad_bytes) / bw + latency
        grad_comm = grad_bytes / bw + latency
        fwd_total = max(first[0], fwd_comm) + (w - 2) * max(later[0], fwd_comm) + later[0]
        bwd_total = max(first[1], bwd_comm) + (w - 2) * max(later[1], bwd_comm) + max(later[1], grad_comm) + grad_comm
        rows.append(
            {
                "devices": w,
                "link": link,
                "local_seq_q": nq,
                "local_seq_k": nk,
                "fwd_kernel_s": later[0],
                "fwd_kernel_first_s": first[0],
                "fwd_bytes": fwd_bytes,
                "fwd_transfer_s": fwd_comm,
                "fwd_hidden": fwd_comm <= later[0],
                "bwd_kernel_s": later[1],
                "bwd_kernel_first_s": first[1],
                "bwd_bytes": fwd_bytes + grad_bytes,
                "bwd_transfer_s": bwd_comm,
                "bwd_hidden": bwd_comm <= later[1],
                "ring_fwd_s": fwd_total,
                "ring_bwd_s": bwd_total,
                "one_device_over_w_s": (whole_fwd + whole_bwd) / w,
            }
        )
    return {
        "spec": spec.to_dict(),
        "target": tgt.name,
        "balance": "zigzag" if causal else "plain",
        "mask": "causal" if causal else "full",
        "figures": {k: {"value": f.value, "source": f.source, "estimate": f.estimate} for k, f in figs.items()},
        "one_device_s": {"fwd": whole_fwd, "bwd": whole_bwd},
        "rows": rows,
        "prediction": True,
    }


def format_cp(r: dict) -> str:
    """The ``--cp`` table as text; every time is a prediction of the cost model."""
    s, f = r["spec"], r["figures"]
    est = lambda k: " (estimate)" if f[k]["estimate"] else ""  # noqa: E731
    lines = [
        f"ring attention over W devices, PREDICTED (cost model and target figures, not measured): {s['name']} "
        f"(B={s['batch']}, Hq={s['heads_q']}, Hkv={s['heads_kv']}, Sq={s['seq_q']}, Sk={s['seq_k']}, D={s['head_dim_qk']}, "
        f"{s['dtype']}, {r['mask']} mask, {r['balance']} balance) on {r['target']}",
        f"links per direction: {f['interconnect']['value']:.0f} GB/s inside a node of {f['node_devices']['value']:.0f}"
        f"{est('interconnect')}, {f['network']['value']:.0f} GB/s between nodes{est('network')}; "
        f"{f['p2p_latency_us']['value']:g} us per transfer{est('p2p_latency_us')}",
        f"one device, whole sequence: fwd {format_seconds(r['one_device_s']['fwd'])}, bwd {format_seconds(r['one_device_s']['bwd'])}",
        "per step: the kernel on the step's block against the transfer of the next block (fwd: K/V; bwd: K/V and fp32 dK/dV)",
        "",
        f"{'W':>4} {'link':>7} {'local':>7} | {'fwd kernel':>10} {'K/V':>9} {'transfer':>9} {'':>7} | "
        f"{'bwd kernel':>10} {'+dK/dV':>9} {'transfer':>9} {'':>7} | {'ring f+b':>9} {'1 dev / W':>9}",
    ]
    for row in r["rows"]:
        verdict = lambda ok: "hidden" if ok else "EXPOSED"  # noqa: E731
        lines.append(
            f"{row['devices']:>4} {'node' if row['link'] == 'interconnect' else 'network':>7} {row['local_seq_q']:>7} | {format_seconds(row['fwd_kernel_s']):>10} "
            f"{format_bytes(row['fwd_bytes']):>9} {format_seconds(row['fwd_transfer_s']):>9} {verdict(row['fwd_hidden']):>7} | "
            f"{format_seconds(row['bwd_kernel_s']):>10} {format_bytes(row['bwd_bytes']):>9} {format_seconds(row['bwd_transfer_s']):>9} "
            f"{verdict(row['bwd_hidden']):>7} | {format_seconds(row['ring_fwd_s'] + row['ring_bwd_s']):>9} {format_seconds(row['one_device_over_w_s']):>9}"
        )
    hidden = [row["devices"] for row in r["rows"] if row["fwd_hidden"] and row["bwd_hidden"]]
    exposed = [row["devices"] for row in r["rows"] if not (row["fwd_hidden"] and row["bwd_hidden"])]
    lines.append("")
    if not exposed:
        lines.append(f"the transfer hides under the kernel at every W up to {r['rows'][-1]['devices']} (predicted)")
    elif not hidden:
        lines.append("the transfer does not hide at any W shown (predicted): the per-step block is too small for the link")
    else:
        lines.append(f"the transfer hides up to W = {max(hidden)} and stops hiding from W = {min(w for w in exposed if w > max(hidden)) if any(w > max(hidden) for w in exposed) else min(exposed)} (predicted)")
    lines.append("kernel work per step falls as 1/W^2, bytes per step as 1/W: past the crossover the ring is link-bound.")
    return "\n".join(lines) + "\n"
