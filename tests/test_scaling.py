"""Ring attention on paper (``tilegen inspect --cp N``, :mod:`tilegen.harness.scaling`): bytes per step from
the shapes by hand, transfer times from the target files' interconnect figures, kernel times equal to
what ``tilegen inspect`` predicts for the step's block, and the one-line errors."""

from __future__ import annotations

import json

import pytest

import tilegen
from tilegen.cli import main
from tilegen.core.errors import SpecError
from tilegen.harness.scaling import cp_report, ring_sizes
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import load_target


def _spec(**kw):
    base = dict(batch=1, heads_q=4, heads_kv=2, seq_q=512, seq_k=512, head_dim_qk=64, head_dim_v=64, dtype="bf16", window=(-1, 0), name="cp")
    base.update(kw)
    return AttentionSpec(**base)


def test_ring_sizes():
    assert ring_sizes(64) == [2, 4, 8, 16, 32, 64]
    assert ring_sizes(12) == [2, 4, 8, 12]
    assert ring_sizes(2) == [2]


def test_bytes_and_transfer_times_by_hand():
    spec = _spec()
    r = cp_report(spec, "h200", 16)
    assert [row["devices"] for row in r["rows"]] == [2, 4, 8, 16]
    for row in r["rows"]:
        w = row["devices"]
        n = 512 // w
        kv = 1 * 2 * n * (64 + 64)  # B · Hkv · n_k · (Dqk + Dv) elements
        assert row["fwd_bytes"] == kv * 2  # bf16
        assert row["bwd_bytes"] == kv * 2 + kv * 4  # and the fp32 dK/dV accumulators
        gbps = 450 if w <= 8 else 50  # NVLink per direction inside a node of 8; the network beyond
        assert row["link"] == ("interconnect" if w <= 8 else "network")
        assert row["fwd_transfer_s"] == pytest.approx(kv * 2 / (gbps * 1e9) + 5e-6)
        assert row["bwd_transfer_s"] == pytest.approx(kv * 6 / (gbps * 1e9) + 5e-6)
        assert row["fwd_hidden"] == (row["fwd_transfer_s"] <= row["fwd_kernel_s"])


def test_kernel_times_are_the_blocks_inspect_predictions():
    """Zigzag causal: every later step is a full n × n/2 block, step 0 the causal n × n block."""
    r = cp_report(_spec(), "ascend910b2", 4)
    row = r["rows"][-1]
    later = _spec(seq_q=128, seq_k=64, window=(-1, -1), name="later")
    first = _spec(seq_q=128, seq_k=128, name="first")
    assert row["fwd_kernel_s"] == pytest.approx(tilegen.inspect(later, "ascend910b2").predicted_s("forward"))
    assert row["bwd_kernel_s"] == pytest.approx(tilegen.inspect(later, "ascend910b2").predicted_s("backward"))
    assert row["fwd_kernel_first_s"] == pytest.approx(tilegen.inspect(first, "ascend910b2").predicted_s("forward"))
    assert r["figures"]["interconnect"]["estimate"] and load_target("ascend910b2").bandwidth["interconnect"].source


def test_full_mask_steps_are_whole_blocks():
    r = cp_report(_spec(window=(-1, -1)), "h200", 2)
    row = r["rows"][0]
    assert r["balance"] == "plain" and row["fwd_kernel_s"] == row["fwd_kernel_first_s"]
    assert row["fwd_kernel_s"] == pytest.approx(tilegen.inspect(_spec(seq_q=256, seq_k=256, window=(-1, -1)), "h200").predicted_s("forward"))


def test_refusals_name_the_argument():
    with pytest.raises(SpecError, match=r"^window = \(3, 0\) is invalid; accepted: \(-1, -1\) or causal"):
        cp_report(_spec(window=(3, 0)), "h200", 4)
    with pytest.raises(SpecError, match="^--target = 'ascend910' is invalid; accepted: a target file with bandwidth.interconnect"):
        cp_report(_spec(), "ascend910", 4)
    with pytest.raises(SpecError, match="^seq_q = 512 is invalid; accepted: a length divisible by 1024 for a ring of 512 devices"):
        cp_report(_spec(), "h200", 512)


def test_inspect_cp_prints_the_predicted_table(capsys):
    assert main(["inspect", "--spec", "tiny", "--seq", "256", "--target", "h200", "--cp", "4"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED" in out and "not measured" in out
    rows = [line for line in out.splitlines() if line.strip().startswith(("2 ", "4 "))]
    assert len(rows) == 2 and all("node" in line for line in rows)
    assert main(["inspect", "--spec", "tiny", "--seq", "256", "--target", "h200", "--cp", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prediction"] is True and [row["devices"] for row in data["rows"]] == [2, 4]


def test_inspect_cp_errors_are_one_line(capsys):
    assert main(["inspect", "--spec", "tiny", "--cp", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--target" in err
    assert main(["inspect", "--spec", "tiny", "--target", "h200", "--cp", "4"]) == 2  # 70 does not split into 8 chunks
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seq_q = 70" in err


@pytest.mark.parametrize("name", ["h200", "ascend910b1", "ascend910b2", "ascend910b3", "ascend910b4"])
def test_ring_figures_load_with_sources(name):
    tgt = load_target(name)
    figs = [tgt.bandwidth["interconnect"], tgt.bandwidth["network"], tgt.cores["node_devices"], tgt.overhead["p2p_latency_us"]]
    assert all(f.value > 0 and f.source for f in figs)
    assert tgt.bandwidth["interconnect"].estimate == name.startswith("ascend")  # NVLink: datasheet; HCCS: no official figure
    assert tgt.bandwidth["network"].estimate and tgt.overhead["p2p_latency_us"].estimate
