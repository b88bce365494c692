"""The audited timeline (tilegen/backends/ascendc/timeline.py): the cost table's ranges, the copy ports
an AI Core's three cores share, the Fixpipe's overlapped write latency, GM bursts, atomic and
same-address accesses, UB bank conflicts and the chip's L2 floor, each on a trace small enough to add
up by hand; the bank rules against the examples of the asc-devkit guide that states them."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import NEUTRAL_AUDIT_COSTS

from tilegen.backends.ascendc.timeline import (
    Costs,
    Instr,
    _floored,
    bank_conflicts,
    l2_levels,
    simulate_block,
    ub_bank,
)
from tilegen.core.errors import TargetError
from tilegen.core.targets import load_target

# cycles and bytes per cycle; every audited mechanism neutral unless a test sets it
HAND = {
    "issue_cycles": 1,
    "flag_cycles": 3,
    "fix_startup_cycles": 4,
    "gm_l2_latency_cycles": 10,
    "gm_hbm_latency_cycles": 40,
    "fix_l2_bytes_per_cycle": 64,
    "mte2_l2_bytes_per_cycle": 128,
    "mte2_hbm_bytes_per_cycle": 32,
    "mte3_bytes_per_cycle": 64,
    "cross_core_flag_cycles": 20,
    "vector_startup_cycles": 2,
    "vector_repeat_cycles": 1,
    **NEUTRAL_AUDIT_COSTS,
    "ai_core_read_bytes_per_cycle": 128,
    "ai_core_write_bytes_per_cycle": 64,
}


def _load(nbytes: int = 4096, rows: int = 8, gm: int = 0x10000, ub: int = 0, level: int = 1) -> Instr:
    return Instr("MTE2", "DataCopyPad", nbytes, rows, level, (("U", ub, ub + nbytes),), (("G", gm, gm + nbytes),))


def _store(nbytes: int = 4096, rows: int = 8, gm: int = 0x20000, ub: int = 0) -> Instr:
    return Instr("MTE3", "DataCopyPad", nbytes, rows, 1, (("G", gm, gm + nbytes),), (("U", ub, ub + nbytes),))


def _item(s, core, kind, n=0):
    return [it for it in s.items if it.core == core and it.kind == kind][n]


def test_the_target_cost_table_gives_every_entry_a_source_and_a_range():
    """targets/ascend910b2.toml [timeline]: each entry cites its source (or says estimate) and gives the
    range it could take around its value."""
    tgt = load_target("ascend910b2")
    assert tgt.timeline
    for key, fig in tgt.timeline.items():
        assert fig.source.strip(), key
        assert fig.low is not None and fig.high is not None, key
        assert fig.low <= fig.value <= fig.high, key


def test_a_timeline_entry_without_a_range_is_one_line(tmp_path):
    text = load_target("ascend910b2").path
    src = open(text, encoding="utf-8").read()
    line = next(ln for ln in src.splitlines() if ln.startswith("flag_cycles"))
    bad = tmp_path / "t.toml"
    bad.write_text(src.replace(line, 'flag_cycles = { value = 4, estimate = true, source = "an assumption" }'), encoding="utf-8")
    with pytest.raises(TargetError, match=r"timeline\.flag_cycles gives no range") as e:
        load_target(str(bad))
    assert "\n" not in str(e.value)
    bad.write_text(src.replace(line, 'flag_cycles = { value = 4, low = 5, high = 8, source = "x" }'), encoding="utf-8")
    with pytest.raises(TargetError, match=r"the range \[5.0, 8.0\] must hold the value 4"):
        load_target(str(bad))


def test_the_ends_of_the_ranges():
    """fast: a rate at its high end, every other figure at its low end; slow: the reverse."""
    tgt = load_target("ascend910b2")
    central, fast, slow = (Costs(tgt.timeline, e) for e in ("central", "fast", "slow"))
    rate = tgt.timeline["mte2_l2_bytes_per_cycle"]
    cyc = tgt.timeline["cross_core_flag_cycles"]
    assert (fast["mte2_l2_bytes_per_cycle"], central["mte2_l2_bytes_per_cycle"], slow["mte2_l2_bytes_per_cycle"]) == (rate.high, rate.value, rate.low)
    assert (fast["cross_core_flag_cycles"], central["cross_core_flag_cycles"], slow["cross_core_flag_cycles"]) == (cyc.low, cyc.value, cyc.high)
    with pytest.raises(ValueError, match="end 'mid'"):
        Costs(tgt.timeline, "mid")


def test_the_cores_of_an_ai_core_share_its_read_port():
    """Both AIVs copy 4096 B from L2 at once: latency 10 each; with the port as fast as one engine
    (128 B/cycle) the data phases (4096 / 128 = 32 cycles) take it in turn: [11, 43] and [43, 75]; with a
    port of 256 B/cycle each holds it 16 cycles and runs 32 at its engine's rate: [11, 43], [27, 59]; the
    AIC's copy into L1 joins the same port."""
    s = simulate_block({"AIV0": [_load(gm=0x10000)], "AIV1": [_load(gm=0x30000)]}, Costs(HAND))
    a, b = _item(s, "AIV0", "DataCopyPad"), _item(s, "AIV1", "DataCopyPad")
    assert (a.start, a.end) == (1, 43)
    assert (b.start, b.end) == (1, 75)
    s = simulate_block({"AIV0": [_load(gm=0x10000)], "AIV1": [_load(gm=0x30000)]}, Costs(dict(HAND, ai_core_read_bytes_per_cycle=256)))
    assert _item(s, "AIV0", "DataCopyPad").end == 43 and _item(s, "AIV1", "DataCopyPad").end == 59
    l1 = Instr("MTE2", "DataCopy", 4096, 8, 1, (("1", 0, 4096),), (("G", 0x50000, 0x54096),))
    s = simulate_block({"AIV0": [_load(gm=0x10000)], "AIC": [l1]}, Costs(HAND))
    assert sorted(it.end for it in s.items if it.kind in ("DataCopy", "DataCopyPad")) == [43, 75]
    # a read and a write do not share a port: the store's data runs beside the load's
    s = simulate_block({"AIV0": [_load()], "AIV1": [_store()]}, Costs(HAND))
    assert _item(s, "AIV1", "DataCopyPad").end == 1 + 10 + 4096 / 64


def test_a_fixpipe_overlaps_the_write_latency_of_the_one_before():
    """Fixpipe: start-up 4 and data 4096 / 64 = 64 on FIX, the write landing 10 later. The second
    Fixpipe starts when the pipe is free (the first's data done), not when its write lands; a flag set
    on FIX after them fires when the last write has landed."""
    fix = lambda gm: Instr("FIX", "Fixpipe", 4096, 8, 1, (("G", gm, gm + 4096),), (("C", 0, 4096),))  # noqa: E731
    s = simulate_block({"AIC": [fix(0x10000), fix(0x20000), Instr("FIX", "CrossCoreSetFlag", 2, 0, 0)]}, Costs(HAND))
    one, two = _item(s, "AIC", "Fixpipe", 0), _item(s, "AIC", "Fixpipe", 1)
    assert (one.start, one.end) == (1, 1 + 4 + 64 + 10)
    assert (two.start, two.end) == (1 + 68, 1 + 68 + 68 + 10)
    assert _item(s, "AIC", "CrossCoreSetFlag").start == two.end
    assert s.busy[("AIC", "FIX")] == 2 * 68


@pytest.mark.parametrize(
    "rows, least, moved",
    [
        (8, 128, 4096),  # 512-B rows: whole bursts
        (16, 128, 4096),  # 256-B rows: one 256-B burst each
        (32, 128, 4096),  # 128-B rows: one 128-B burst each
        (64, 128, 8192),  # 64-B rows rounded up to a 128-B burst
        (32, 512, 16384),  # 128-B rows, each at least a 512-B burst's time
        (5, 128, 5 * 1024),  # 819.2-B rows: a 512-B burst, then 307.2 B rounded up to 512
        (3, 128, 3 * 1536),  # 1365.3-B rows: two 512-B bursts, then 341.3 B rounded up to 512
    ],
)
def test_gm_bursts(rows, least, moved):
    """Copies are split into 128/256/512-B bursts, a partial one rounded up (asc-devkit 硬件约束/
    NPU架构版本2201.md), a row under a burst at least gm_min_run_bytes."""
    costs = Costs(dict(HAND, gm_burst_granule_bytes=128, gm_min_run_bytes=least))
    assert costs.burst_bytes(4096, rows) == pytest.approx(moved)
    strided = dataclasses.replace(_load(4096, rows), reads=(("G", 0x10000, 0x10000 + 8192),))  # rows apart in GM
    assert costs.duration(strided) == pytest.approx(10 + moved / 128)


def test_atomic_stores_and_shared_bytes_cost_their_factors():
    """A store after SetAtomic (a = 1) costs atomic_rmw_factor times its data phase and counts twice
    in the bytes through the L2; after SetAtomic a = 0 it is plain again. A copy of bytes another block
    also copies is marked shared by l2_levels and costs same_address_factor times."""
    costs = Costs(dict(HAND, atomic_rmw_factor=2, same_address_factor=1.5))
    on, off = Instr("S", "SetAtomic", 1, 0, 0), Instr("S", "SetAtomic", 0, 0, 0)
    s = simulate_block({"AIV0": [on, _store(), off, _store(gm=0x30000)]}, costs)
    first, second = _item(s, "AIV0", "DataCopyPad", 0), _item(s, "AIV0", "DataCopyPad", 1)
    assert first.end - first.start == 10 + 2 * 4096 / 64
    assert second.end - second.start == 10 + 4096 / 64
    assert s.gm_bytes == 3 * 4096
    # block 0 and 1 read the same K tile, block 0 alone its Q tile
    blocks = l2_levels({0: {"AIV0": [_load(gm=0x10000), _load(gm=0x50000)]}, 1: {"AIV0": [_load(gm=0x10000)]}}, l2=False)
    assert [i.shared for i in blocks[0]["AIV0"]] == [True, False]
    assert costs.duration(blocks[0]["AIV0"][0]) == 10 + 4096 / 128  # duration: alone, no factor
    s = simulate_block(blocks[0], costs)
    assert _item(s, "AIV0", "DataCopyPad", 0).end == 1 + 10 + 1.5 * 4096 / 128


def _add(src0: int, src1: int, dst: int, repeats: int = 64) -> Instr:
    n = 256 * repeats
    return Instr("V", "Add", repeats, 0, 0, (("U", dst, dst + n),), (("U", src0, src0 + n), ("U", src1, src1 + n)))


# asc-devkit examples/01_simd_cpp_api/05_best_practices/04_memory_access/bank_conflict_ub (README, A2/A3):
# dst = src0 + src1 over 4096 floats (64 repeats of 256 B, block stride 1), src0 / src1 / dst start
# addresses, and the measured time of 1000 such Adds (GetSystemCycle ticks)
SAMPLE = {
    1: ((0x0, 0x10100, 0x20000), (0, 0), 2390),
    2: ((0x0, 0x4000, 0x10000), (1, 0), 4167),  # sources in one bank: read-read
    3: ((0x0, 0x10000, 0x14100), (1, 0), 4167),  # sources in one bank group: read-read
    4: ((0x0, 0x10100, 0x4000), (0, 0), 2389),  # src0 and dst start in one bank: the write is delayed, none
    5: ((0x0, 0x10100, 0x4020), (0, 1), 3751),  # dst's blocks share src0's banks, starting apart: read-write
    6: ((0x0, 0x10100, 0x10100), (0, 0), 2390),  # in place
}


@pytest.mark.parametrize("scenario", sorted(SAMPLE))
def test_ub_bank_conflicts_against_the_measured_sample(scenario):
    """Each of the sample's scenarios is found conflicting as the sample says, and priced by the target's
    table its Add takes the measured time relative to scenario 1 within 2% (the sample's ticks are
    wall time of 1000 back-to-back Adds; the start-up, repeat and conflict figures of the table
    reproduce their ratios)."""
    addrs, conflicts, ticks = SAMPLE[scenario]
    ins = _add(*addrs)
    assert bank_conflicts(ins) == conflicts
    costs = Costs(load_target("ascend910b2").timeline)
    base = simulate_block({"AIV0": [_add(*SAMPLE[1][0])]}, costs)
    s = simulate_block({"AIV0": [ins]}, costs)
    took = lambda sched: _item(sched, "AIV0", "Add").end - _item(sched, "AIV0", "Add").start  # noqa: E731
    assert took(s) / took(base) == pytest.approx(ticks / SAMPLE[1][2], rel=0.02)


def test_ub_bank_groups_as_the_guide_numbers_them():
    """The guide's addresses (避免bank冲突（NPU架构版本2201）.md): 0x10000 in bank 16, 0x10020 and 0x10E20
    in bank 17, 0x20020 in bank 33; banks 15, 31 and 47 form group 15. Its read-read examples: sources
    at 0x10020 and 0x20020 conflict, at 0x10020 and 0x10000 they do not."""
    assert ub_bank(0x10000) == (0, 16) and ub_bank(0x10020) == (1, 17) and ub_bank(0x10E20) == (1, 17) and ub_bank(0x20020) == (1, 33)
    assert {ub_bank(a) for a in (15 * 32, 0x10000 + 15 * 32, 0x20000 + 15 * 32)} == {(15, 15), (15, 31), (15, 47)}
    assert bank_conflicts(_add(0x10020, 0x20020, 0x0400))[0] == 1
    assert bank_conflicts(_add(0x10020, 0x10000, 0x0400))[0] == 0


def test_the_chip_l2_floor():
    """A launch whose copies move more bytes through the L2 than the chip's L2 rate allows in its
    scheduled time takes the L2's time, and says so."""
    costs = Costs(dict(HAND, chip_l2_bytes_per_cycle=100))
    assert _floored(1000.0, 0.0, 1e9, 50_000.0, costs)[0] == 1000.0
    end, note = _floored(1000.0, 0.0, 1e9, 200_000.0, costs)
    assert end == 2000.0 and "L2 bandwidth" in note
    end, note = _floored(1000.0, 3e-6, 1e9, 200_000.0, costs)  # the HBM floor above both
    assert end == 3000.0 and "HBM" in note


def test_a_copy_of_back_to_back_rows_is_one_gm_run():
    """A copy whose recorded GM range is exactly its bytes moves as one run (no per-row rounding); one of
    the same rows apart in GM pays each row's bursts."""
    costs = Costs(dict(HAND, gm_burst_granule_bytes=128, gm_min_run_bytes=512))
    together = _load(4096, 32, gm=0x10000)  # 32 rows of 128 B back to back
    apart = dataclasses.replace(together, reads=(("G", 0x10000, 0x10000 + 2 * 4096 - 128),))  # rows 256 B apart
    assert costs.duration(together) == pytest.approx(10 + 4096 / 128)
    assert costs.duration(apart) == pytest.approx(10 + 32 * 512 / 128)


def test_short_operands_do_not_conflict_beyond_their_blocks():
    """A Brcb's source holds 8 values (32 B, one block in bank 0); its destination from 0x20 covers banks
    1-8: no bank shared, no conflict. A 32-B mask beside two sources does not count as a third source."""
    brcb = Instr("V", "Brcb", 1, 0, 0, (("U", 0x20, 0x20 + 256),), (("U", 0x0, 0x20),))
    assert bank_conflicts(brcb) == (0, 0)
    select = Instr("V", "Select", 1, 0, 0, (("U", 0x20000, 0x20100),), (("U", 0x0, 0x100), ("U", 0x10100, 0x10200), ("U", 0x200, 0x220)))
    assert bank_conflicts(select) == (0, 0)


def test_a_flag_after_fixpipes_names_the_one_that_lands_last():
    """An HBM Fixpipe (latency 40) then an L2 one (latency 10): a flag set on FIX after both fires when the
    first lands, and the critical path goes through it."""
    hbm = Instr("FIX", "Fixpipe", 640, 1, 0, (("G", 0x10000, 0x10000 + 640),), (("C", 0, 640),))
    l2 = Instr("FIX", "Fixpipe", 640, 1, 1, (("G", 0x20000, 0x20000 + 640),), (("C", 0, 640),))
    costs = Costs(dict(HAND, fix_hbm_bytes_per_cycle=64))
    s = simulate_block({"AIC": [hbm, l2, Instr("FIX", "CrossCoreSetFlag", 2, 0, 0)]}, costs)
    first = next(n for n, it in enumerate(s.items) if it.kind == "Fixpipe")
    flag = next(it for it in s.items if it.kind == "CrossCoreSetFlag")
    assert flag.start == s.items[first].end and flag.pred == first


def test_the_trace_memo_keeps_apart_runs_under_another_twin_environment(monkeypatch):
    """trace_run keeps its last traces (one trace scheduled at three ends), but a run under another TWIN_*
    setting (TWIN_ORDER_CHECK=0 lets a test trace an unordered kernel) runs the twin again."""
    from tilegen import builtin_spec
    from tilegen.backends.ascendc import timeline, twin

    runs = []
    monkeypatch.setattr(twin, "run_program", lambda *a, **k: runs.append(1))
    monkeypatch.setattr(timeline, "_TRACES", {})
    spec = builtin_spec("tiny")
    timeline.trace_run("/nonexistent/exe", spec, "fwd", 1)
    timeline.trace_run("/nonexistent/exe", spec, "fwd", 1)
    assert len(runs) == 1
    monkeypatch.setenv("TWIN_ORDER_CHECK", "0")
    timeline.trace_run("/nonexistent/exe", spec, "fwd", 1)
    assert len(runs) == 2
