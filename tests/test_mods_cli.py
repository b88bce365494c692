"""Score and mask mods through the command line: run, inspect (block classes, --tiles-map), generate.

Block classes are checked against a brute-force count written here: the dense [Sq, Sk] visibility of
the spec (DESIGN §3's window and the mask written as NumPy over every (query, key) pair), padded to
whole tiles with invisible pairs, then per tile: empty (no visible pair), full (every pair of the
whole tile visible), partial. The static counts (visited tiles, FLOPs) are checked against the same
brute force and against what the interpreter measures. The reference `run` uses
(:func:`tilegen.core.reference.mod_attention`) is checked against tests/mod_reference.py, the torch
reference written with no tilegen.mods import.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilegen.models import analysis
from tilegen.core import reference
from tilegen.models.analysis import count, total
from tilegen.backends.interp import interpret
from tilegen.cli import main
from tilegen.harness.runner import mod_params, random_inputs
from tilegen.core.spec import builtin_spec, load_spec
from tilegen.backends import compile_backward, compile_forward

import mod_reference

MOD_SPECS = ("softcap", "alibi", "document", "prefix-lm")

DOC = [0] * 30 + [1] * 22 + [2] * 28  # the document spec's ids (3 documents, 80 tokens)


def _cli(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tilegen: error: ") and "Traceback" not in err, err
    return lines[0]


# --- run ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MOD_SPECS)
def test_run_passes_on_each_builtin_mod_spec(name, capsys):
    rc, out, _ = _cli(capsys, "run", "--spec", name)
    assert rc == 0 and "check: passed" in out, out
    assert "mods: " in out and "reference: dense float64 in torch" in out
    if name == "alibi":
        assert "slopes [4] from the spec's generator alibi = true" in out
        assert "dslopes " in out and "dslopes*" in out  # the slopes' gradient, fused and unfused
    if name == "document":
        assert "doc [80] from the spec's generator documents = [30, 22, 28]" in out


def _write(tmp_path, text: str, name: str = "m.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


COMBINED = """
name = "combined"
batch = 2
heads_q = 4
heads_kv = 2
seq = 56
head_dim = 16
dtype = "fp32"
mask = "window"
window = [20, 0]
score_mod = "score + bias[h, q_idx - kv_idx + Sk - 1]"
mask_mod = "doc[b, q_idx] == doc[b, kv_idx]"

[params.bias]
shape = ["Hq", "Sq + Sk - 1"]
dtype = "fp32"

[params.doc]
shape = ["B", "Sk"]
dtype = "int32"
"""


def test_run_generates_parameters_and_checks_their_gradient(tmp_path, capsys):
    """A user-written mod: a relative bias (fp32, generated N(0, 0.1²)), a per-batch document mask
    (int32, generated sorted ids) and a window, and-ed."""
    path = _write(tmp_path, COMBINED)
    rc, out, _ = _cli(capsys, "run", path, "--tiles", "16x16")
    assert rc == 0 and "check: passed" in out, out
    assert "bias [4, 111] random N(0, 0.1^2)" in out
    assert "doc [2, 56] random sorted document ids (" in out
    assert "dbias " in out
    spec = load_spec(path)
    params, _ = mod_params(spec, 0)
    ids = params["doc"]
    assert ids.dtype == np.int32 and (np.diff(ids, axis=1) >= 0).all() and ids[:, 0].tolist() == [0, 0]
    assert 1 <= len(np.unique(ids[0])) <= 4


def test_run_alibi_on_small_tiles_reduces_only_visited_tiles(capsys):
    """With 16 x 16 tiles the causal loops skip tiles whose gradient partials are never written: the
    reduction must see zeros there (the interpreter once left them NaN)."""
    rc, out, _ = _cli(capsys, "run", "--spec", "alibi", "--tiles", "16x16", "--unfused")
    assert rc == 0 and "check: passed" in out, out


def test_run_json_carries_the_parameter_note(capsys):
    rc, out, _ = _cli(capsys, "run", "--spec", "alibi", "--unfused", "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] and "slopes" in data["params"]
    assert any(c["name"] == "dslopes" for c in data["comparisons"])


def test_window_overrides_are_anded_with_the_mask_mod(capsys):
    """--window / --no-mask replace the window, the mask mod stays: the run passes and the block
    counts are those of doc ∧ the new window (brute force)."""
    rc, out, _ = _cli(capsys, "run", "--spec", "document", "--window", "10,0", "--unfused")
    assert rc == 0 and "check: passed" in out and "window(10, 0)" in out
    for flags, window in (([], (-1, 0)), (["--no-mask"], (-1, -1)), (["--window", "10,0"], (10, 0)), (["--causal"], (-1, 0))):
        rc, out, _ = _cli(capsys, "inspect", "--spec", "document", "--tiles", "16x16", "--program", "fwd", "--json", *flags)
        blk = json.loads(out)["programs"][0]["block_classes"]
        assert _brute_counts(80, 80, 16, 16, window, 0, lambda q, k: np.asarray(DOC)[q] == np.asarray(DOC)[k]) == _counts(blk), flags


def test_reference_matches_the_independent_torch_reference(tmp_path):
    """The float64 reference of `run` against tests/mod_reference.py (mods written as torch functions,
    no tilegen.mods), on the combined bias ∧ document ∧ window spec, every output and gradient."""
    spec = load_spec(_write(tmp_path, COMBINED))
    data = random_inputs(spec, 3)
    params, _ = mod_params(spec, 3)
    ours = reference.mod_attention(spec, data["Q"], data["K"], data["V"], data["dO"], params)
    sk = spec.seq_k

    def score_fn(s, b, h, q, k, bias, doc):
        return s + bias[h, q - k + sk - 1]

    def mask_fn(b, h, q, k, bias, doc):
        return doc[b, q] == doc[b, k]

    o, lse, grads = mod_reference.dense(
        data["Q"], data["K"], data["V"], data["dO"], scale=spec.softmax_scale, score_fn=score_fn, mask_fn=mask_fn,
        window=spec.window, params=params,
    )
    np.testing.assert_allclose(ours["O"], o, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(ours["L"]), np.isinf(lse))
    np.testing.assert_allclose(ours["L"][np.isfinite(lse)], lse[np.isfinite(lse)], rtol=1e-13)
    for name in ("dQ", "dK", "dV"):
        np.testing.assert_allclose(ours[name], grads[name], rtol=0, atol=1e-11)
    np.testing.assert_allclose(ours["dparams"]["bias"], grads["dbias"], rtol=0, atol=1e-10)


# --- block classes ---------------------------------------------------------------------------------------


def _brute_counts(sq, sk, br, bc, window, offset, mask) -> dict:
    """Empty / partial / full tile pairs from the dense visibility of every (q, kv) pair (mask(q, kv)
    on index grids), padded to whole tiles with invisible pairs."""
    q = np.arange(sq)[:, None]
    k = np.arange(sk)[None, :]
    vis = np.broadcast_to(np.asarray(mask(q, k), dtype=bool), (sq, sk)).copy()
    left, right = window
    if left >= 0:
        vis &= k >= q + offset - left
    if right >= 0:
        vis &= k <= q + offset + right
    nq, nk = -(-sq // br), -(-sk // bc)
    pad = np.zeros((nq * br, nk * bc), dtype=bool)
    pad[:sq, :sk] = vis
    tiles = pad.reshape(nq, br, nk, bc).transpose(0, 2, 1, 3).reshape(nq, nk, -1)
    anyv, allv = tiles.any(-1), tiles.all(-1)
    return {"empty": int((~anyv).sum()), "partial": int((anyv & ~allv).sum()), "full": int(allv.sum())}


def _counts(blk: dict) -> dict:
    return {k: blk[k] for k in ("empty", "partial", "full")}


CASES = [
    # (name, spec text fields, window, mask on index grids (q, kv), q/kv sizes)
    ("prefix", 'mask_mod = "(kv_idx < 24) | (kv_idx <= q_idx + Sk - Sq)"', (-1, -1), lambda q, k, sq, sk: (k < 24) | (k <= q + sk - sq)),
    ("band", 'mask_mod = "abs(q_idx - kv_idx) <= 9"\nmask = "causal"', (-1, 0), lambda q, k, sq, sk: np.abs(q - k) <= 9),
    ("stride", 'mask_mod = "kv_idx % 3 == 0"\nmask = "window"\nwindow = [40, 5]', (40, 5), lambda q, k, sq, sk: k % 3 == 0),
    ("not", 'mask_mod = "~(kv_idx > q_idx + Sk - Sq) & (q_idx >= 7)"', (-1, -1), lambda q, k, sq, sk: ~(k > q + sk - sq) & (q >= 7)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("sizes", [(70, 70), (45, 83)])
@pytest.mark.parametrize("tiles", [(16, 16), (32, 16), (16, 48)])
def test_block_counts_match_the_brute_force(case, sizes, tiles, tmp_path, capsys):
    name, fields, window, mask = case
    sq, sk = sizes
    text = f'name = "{name}"\nbatch = 1\nheads = 2\nseq_q = {sq}\nseq_k = {sk}\nhead_dim = 16\n{fields}\n'
    path = _write(tmp_path, text)
    rc, out, err = _cli(capsys, "inspect", path, "--tiles", f"{tiles[0]}x{tiles[1]}", "--program", "fwd", "--json")
    assert rc == 0, err
    blk = json.loads(out)["programs"][0]["block_classes"]
    assert blk["source"].startswith("compile time")
    assert _counts(blk) == _brute_counts(sq, sk, *tiles, window, sk - sq, lambda q, k: mask(q, k, sq, sk))
    assert blk["visited"] == blk["partial"] + blk["full"] and blk["total"] == sum(_counts(blk).values())


@pytest.mark.parametrize("tiles", [(32, 16), (16, 48), (48, 32), (24, 40)])
def test_document_block_counts_from_small_tiles_match_the_brute_force(tiles, capsys):
    """Classes of a mask of parameters at multiples of 16 are aggregated from one 16 x 16 table; other
    sizes are evaluated directly: both against the brute force."""
    rc, out, _ = _cli(capsys, "inspect", "--spec", "document", "--tiles", f"{tiles[0]}x{tiles[1]}", "--program", "fwd", "--json")
    blk = json.loads(out)["programs"][0]["block_classes"]
    assert rc == 0 and _counts(blk) == _brute_counts(80, 80, *tiles, (-1, 0), 0, lambda q, k: np.asarray(DOC)[q] == np.asarray(DOC)[k])


def test_block_classes_per_head_and_top_left(tmp_path):
    """A mask that reads h has one table per head; top-left alignment moves the window's diagonal."""
    text = 'name = "heads"\nbatch = 1\nheads = 3\nseq_q = 40\nseq_k = 72\nhead_dim = 16\nmask = "causal"\nalignment = "top_left"\n'
    text += 'mask_mod = "(h == 1) | (kv_idx >= q_idx - 5)"\n'
    spec = load_spec(_write(tmp_path, text))
    program = compile_forward(spec, tile_sizes=(16, 16))
    classes = analysis.program_block_classes(program)
    assert classes.table.shape == (1, 3, 3, 5) and classes.scale == 1
    for h in range(3):
        n = np.bincount(classes.table[0, h].reshape(-1), minlength=3)
        want = _brute_counts(40, 72, 16, 16, (-1, 0), 0, lambda q, k: (h == 1) | (k >= q - 5))
        assert dict(zip(("empty", "partial", "full"), n.tolist())) == want, h


def test_document_mask_counts_from_the_spec_values_and_run_time_without(tmp_path, capsys):
    rc, out, _ = _cli(capsys, "inspect", "--spec", "document", "--tiles", "16x16")
    assert rc == 0
    want = _brute_counts(80, 80, 16, 16, (-1, 0), 0, lambda q, k: np.asarray(DOC)[q] == np.asarray(DOC)[k])
    assert f"{want['empty']} empty" in out and f"{want['partial']} partial" in out and "counted from the spec's values of doc (at run time the device counts them again)" in out
    text = 'name = "docs"\nbatch = 1\nheads = 2\nseq = 64\nhead_dim = 16\nmask_mod = "doc[q_idx] == doc[kv_idx]"\n[params.doc]\nshape = ["Sk"]\ndtype = "int32"\n'
    rc, out, _ = _cli(capsys, "inspect", _write(tmp_path, text), "--json", "--program", "fwd")
    blk = json.loads(out)["programs"][0]["block_classes"]
    assert rc == 0 and blk["source"] == "run-time (depends on doc)" and blk["empty"] is None


def test_document_mask_block_counts_at_4k():
    """A 4096-token packed batch of 7 documents with a causal mask, 128 x 128 tiles, against the brute
    force; the classes take well under the time budget of a 16k spec."""
    from tilegen.core import mods as M

    rng = np.random.default_rng(5)
    cuts = np.sort(rng.choice(np.arange(1, 4096), 6, replace=False))
    ids = np.searchsorted(cuts, np.arange(4096), side="right").astype(np.int32)
    doc = M.ParamDecl("doc", (M.SIZE_SYMBOLS["Sk"],), "int32")
    mods = M.ModSet(mask=M.parse("doc[q_idx] == doc[kv_idx]", "mask", {"doc": doc}), params=(doc,))
    sizes = {"B": 1, "Hq": 8, "Hkv": 8, "Sq": 4096, "Sk": 4096}
    got = analysis.block_classes(mods, sizes=sizes, window=(-1, 0), offset=0, br=128, bc=128, params={"doc": ids}).counts()
    want = _brute_counts(4096, 4096, 128, 128, (-1, 0), 0, lambda q, k: ids[q] == ids[k])
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("name", ["document", "prefix-lm", "alibi"])
def test_static_counts_skip_empty_tiles_as_the_interpreter_does(name):
    """Bytes and FLOPs of the analysis equal the interpreter's measurement (forward and both
    backwards); the forward's matmul FLOPs are the brute-force visited tiles × 2·Br·Bc·(Dqk + Dv)."""
    spec = builtin_spec(name)
    data = random_inputs(spec, 0)
    params, _ = mod_params(spec, 0)
    for tiles in ((16, 16),) if name == "alibi" else ((16, 16), (32, 16)):
        fwd = compile_forward(spec, tile_sizes=tiles)
        out, measured = interpret(fwd, {"Q": data["Q"], "K": data["K"], "V": data["V"], **params})
        counted = total(count(fwd))
        assert dict(measured.bytes_read) == dict(counted.bytes_read)
        assert dict(measured.flops) == dict(counted.flops)
        if name == "document":
            visited = sum(v for k, v in _brute_counts(80, 80, *tiles, (-1, 0), 0, lambda q, k: np.asarray(DOC)[q] == np.asarray(DOC)[k]).items() if k != "empty")
            dims = spec.head_dim_qk + spec.head_dim_v
            assert counted.flops["matmul"] == visited * 2 * tiles[0] * tiles[1] * dims * spec.batch * spec.heads_q
        feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": out["O"], "L": out["L"], "dO": data["dO"], **params}
        for fused in (True, False):
            bwd = compile_backward(spec, fused=fused, tile_sizes=tiles)
            _, measured = interpret(bwd, feeds)
            counted = total(count(bwd))
            assert dict(measured.bytes_read) == dict(counted.bytes_read) and dict(measured.bytes_written) == dict(counted.bytes_written)
            assert dict(measured.flops) == dict(counted.flops)


def test_cost_model_uses_the_visible_tiles(capsys):
    """The prediction on h200 counts only the non-empty tiles: with the document mask the forward's
    matmul FLOPs are the visited tiles' (brute force), below the causal window's."""
    rc, out, _ = _cli(capsys, "inspect", "--spec", "document", "--target", "h200", "--tiles", "16x16", "--program", "fwd", "--json")
    assert rc == 0
    prog = json.loads(out)["programs"][0]
    visited = prog["block_classes"]["visited"]
    assert prog["prediction"]["matmul_flops"] == visited * 2 * 16 * 16 * 64 * 2
    causal = _brute_counts(80, 80, 16, 16, (-1, 0), 0, lambda q, k: True)
    assert visited < causal["partial"] + causal["full"]


# --- --tiles-map --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", ["svg", "png"])
def test_tiles_map_is_written(ext, tmp_path, capsys):
    path = tmp_path / f"tiles.{ext}"
    rc, out, err = _cli(capsys, "inspect", "--spec", "document", "--tiles", "16x16", "--no-nest", "--tiles-map", str(path))
    assert rc == 0, err
    assert f"wrote {path}" in out and path.stat().st_size > 1000
    if ext == "svg":
        text = path.read_text()
        assert "Q tile" in text and "K/V tile" in text and "empty: skipped" in text and "full: no mask arithmetic" in text


def test_tiles_map_errors_are_one_line(tmp_path, capsys):
    rc, _, err = _cli(capsys, "inspect", "--spec", "document", "--tiles-map", str(tmp_path / "x.pdf"))
    assert rc == 2 and "--tiles-map" in _one_line_error(err)
    rc, _, err = _cli(capsys, "inspect", "--spec", "document", "--tiles-map", str(tmp_path / "x.svg"), "--tiles-at", "0,9")
    assert rc == 2 and "--tiles-at" in _one_line_error(err)
    text = 'name = "docs"\nbatch = 1\nheads = 2\nseq = 64\nhead_dim = 16\nmask_mod = "doc[q_idx] == doc[kv_idx]"\n[params.doc]\nshape = ["Sk"]\ndtype = "int32"\n'
    rc, _, err = _cli(capsys, "inspect", _write(tmp_path, text), "--tiles-map", str(tmp_path / "x.svg"))
    assert rc == 2 and "run-time (depends on doc)" in _one_line_error(err)


# --- generate ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MOD_SPECS)
@pytest.mark.parametrize("target", ["h200", "ascend910b2"])
def test_generate_writes_files_or_refuses_in_one_line(name, target, tmp_path, capsys):
    """A backend emits a spec's mods or refuses them with a one-line error (no traceback)."""
    rc, out, err = _cli(capsys, "generate", "--spec", name, "--target", target, "-o", str(tmp_path / "out"))
    if rc == 0:
        assert "wrote" in out and any((tmp_path / "out").iterdir())
    else:
        assert rc == 2
        _one_line_error(err)


@pytest.mark.parametrize("name", MOD_SPECS)
def test_inspect_shows_the_mods(name, capsys):
    rc, out, _ = _cli(capsys, "inspect", "--spec", name, "--no-nest")
    assert rc == 0 and "with mods" in out
    assert ("score_mod:" in out) == (name in ("softcap", "alibi"))
    assert ("tile pairs (" in out) == (name in ("document", "prefix-lm"))


# --- bad spec files ------------------------------------------------------------------------------------

BASE = 'name = "bad"\nbatch = 1\nheads = 2\nseq = 32\nhead_dim = 16\n'


@pytest.mark.parametrize(
    "extra, field, words",
    [
        ('score_mod = "softcapp(score)"', "score_mod", "unknown function 'softcapp'"),
        ('mask_mod = "kv_idx <= q_idx + n"', "mask_mod", "unknown name 'n'"),
        ('score_mod = "score - slopes[h, q_idx]"\n[params.slopes]\nshape = ["Hq"]', "score_mod", "2 indices"),
        ('score_mod = "score - slopes[h]"\n[params.slopes]\nshape = [0]', "params.slopes.shape", "positive"),
        ('score_mod = "score - slopes[h]"\n[params.slopes]\nshape = ["Hq"]\nvalues = [0.5, 0.25, 0.125]', "params.slopes.values", "2 values"),
        ('mask_mod = "doc[q_idx] == doc[kv_idx]"\n[params.doc]\nshape = ["Sk"]\ndtype = "int64"', "params.doc.dtype", "int32"),
    ],
)
@pytest.mark.parametrize("verb", ["inspect", "run", "generate"])
def test_bad_mod_spec_files_fail_in_one_line_naming_the_field(extra, field, words, verb, tmp_path, capsys):
    path = _write(tmp_path, BASE + extra + "\n")
    argv = [verb, path] + (["-o", str(tmp_path / "o")] if verb == "generate" else [])
    rc, _, err = _cli(capsys, *argv)
    line = _one_line_error(err)
    assert rc == 2 and field in line and words in line, line


def test_run_data_npz_may_carry_parameter_arrays(tmp_path, capsys):
    spec = builtin_spec("alibi")
    data = random_inputs(spec, 1)
    path = tmp_path / "in.npz"
    np.savez(path, **data, slopes=np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32))
    rc, out, _ = _cli(capsys, "run", "--spec", "alibi", "--data", str(path), "--unfused")
    assert rc == 0 and "slopes [4] given" in out and "check: passed" in out
    np.savez(path, **data, slopes=np.zeros(3, dtype=np.float32))
    rc, out, err = _cli(capsys, "run", "--spec", "alibi", "--data", str(path))
    assert rc == 2 and "slopes" in _one_line_error(err) and out == ""  # refused before any work


@pytest.mark.parametrize("name", MOD_SPECS)
def test_mod_specs_round_trip_through_toml(name, tmp_path, capsys):
    spec = builtin_spec(name)
    rc, out, _ = _cli(capsys, "spec", "--spec", name)
    path = _write(tmp_path, out, f"{name}.toml")
    assert rc == 0 and load_spec(path) == spec


def test_alibi_slopes_follow_the_power_of_two_formula():
    spec = builtin_spec("alibi")
    (slopes,) = spec.params
    h, n = np.arange(spec.heads_q), spec.heads_q
    np.testing.assert_array_equal(np.asarray(slopes.values), 2.0 ** (-8 * (h + 1) / n))
    doc = builtin_spec("document").params[0]
    assert list(doc.values) == DOC and len(set(doc.values)) == 3


def test_mod_language_sizes_are_not_booleans_and_or_broadcasts():
    """Two faults of the mod language that spec files met: a size name alone (a parameter shape
    ``["Hq"]``) was taken for a boolean, since every sympy Symbol is one; ``|`` of relations over
    [rows, 1] and [1, cols] index grids failed in the NumPy evaluation (lambdify's logical_or.reduce
    stacks its operands)."""
    from tilegen.core import mods as M

    assert M.parse("Hq", "score", {}) == M.SIZE_SYMBOLS["Hq"]
    expr = M.parse("(kv_idx < 2) | (kv_idx <= q_idx)", "mask", {})
    q, k = np.arange(3)[:, None], np.arange(4)[None, :]
    np.testing.assert_array_equal(M.evaluate(expr, q_idx=q, kv_idx=k, sizes={}, params={}), (k < 2) | (k <= q))


def test_static_counts_of_a_per_batch_mask_sum_each_batch_rows_tiles(tmp_path):
    """A document mask per batch row (doc [B, Sk]): the table has a B axis and the analysis counts, per
    b, only that row's non-empty tiles (the hardware's programs; the interpreter's lanes run the union)."""
    text = COMBINED.replace('[params.doc]\nshape = ["B", "Sk"]\ndtype = "int32"\n', "")
    ids = np.array([[0] * 20 + [1] * 36, [0] * 50 + [1] * 6])
    text += '[params.doc]\nshape = ["B", "Sk"]\ndtype = "int32"\nvalues = ' + str(ids.reshape(-1).tolist()) + "\n"
    spec = load_spec(_write(tmp_path, text))
    program = compile_forward(spec, tile_sizes=(16, 16))
    classes = analysis.program_block_classes(program)
    assert classes.table.shape == (2, 1, 4, 4) and classes.scale == spec.heads_q
    visited = 0
    for b in range(2):
        n = _brute_counts(56, 56, 16, 16, spec.window, 0, lambda q, k: ids[b][q] == ids[b][k])
        assert dict(zip(("empty", "partial", "full"), np.bincount(classes.table[b, 0].reshape(-1), minlength=3).tolist())) == n
        visited += n["partial"] + n["full"]
    flops = total(count(program)).flops["matmul"]
    assert flops == visited * spec.heads_q * 2 * 16 * 16 * (spec.head_dim_qk + spec.head_dim_v)
