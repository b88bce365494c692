"""Parameter generators of spec files (documents, prefix, alibi) and the field reference.

References, independent of tilegen.core.paramgen: document ids are ``numpy.repeat`` of the lengths (and,
for a count, the closed form of an even split); ALiBi slopes are the values Press et al. (ICLR 2022,
§3) list for 8 and 16 heads, and transformers' Bloom and MPT code for other head counts. A size override
regenerates generated values and refuses explicit ones in one line naming the parameter. The field
reference is checked against what the validator accepts and refuses, field by field.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilegen.cli import main
from tilegen.core.errors import SpecError
from tilegen.core.spec import builtin_spec, field_reference, load_spec, spec_from_dict

BASE = 'name = "g"\nbatch = 2\nheads = 4\nseq = 2048\nhead_dim = 32\nmask = "causal"\n'
DOC_MASK = 'mask_mod = "doc[q_idx] == doc[kv_idx]"\n'


def _write(tmp_path, text: str, name: str = "g.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _cli(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tilegen: error: ") and "Traceback" not in err, err
    return lines[0]


def _param(spec, name):
    return next(p for p in spec.params if p.name == name)


# --- documents -----------------------------------------------------------------------------------------


def test_document_ids_from_lengths_are_a_repeat_of_the_lengths(tmp_path):
    spec = load_spec(_write(tmp_path, BASE + DOC_MASK + "[params.doc]\ndocuments = [700, 900, 448]\n"))
    doc = _param(spec, "doc")
    assert doc.dtype == "int32" and [str(d) for d in doc.shape] == ["Sk"]
    np.testing.assert_array_equal(np.asarray(doc.values), np.repeat([0, 1, 2], [700, 900, 448]))


@pytest.mark.parametrize("count, length", [(1, 7), (3, 80), (5, 2048), (7, 7), (6, 1000)])
def test_a_document_count_spreads_evenly(count, length, tmp_path):
    text = BASE.replace("seq = 2048", f"seq = {length}") + DOC_MASK + f"[params.doc]\ndocuments = {count}\n"
    ids = np.asarray(_param(load_spec(_write(tmp_path, text)), "doc").values)
    # closed form: the first length % count documents get one token more
    q, r = divmod(length, count)
    t = np.arange(length)
    want = np.where(t < r * (q + 1), t // (q + 1), r + (t - r * (q + 1)) // max(q, 1))
    np.testing.assert_array_equal(ids, want)


def test_seq_override_scales_document_lengths_in_proportion(tmp_path, capsys):
    path = _write(tmp_path, BASE + DOC_MASK + "[params.doc]\ndocuments = [700, 900, 448]\n")
    rc, out, _ = _cli(capsys, "spec", path, "--seq", "1000")
    assert rc == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("documents = "))
    lengths = json.loads(line.split("=", 1)[1])
    assert sum(lengths) == 1000 and len(lengths) == 3
    exact = np.array([700, 900, 448]) * 1000 / 2048
    assert np.all(np.abs(np.array(lengths) - exact) < 1), (lengths, exact)
    spec = load_spec(_write(tmp_path, out, "o.toml"))
    assert spec.seq_k == 1000
    np.testing.assert_array_equal(np.asarray(_param(spec, "doc").values), np.repeat([0, 1, 2], lengths))
    # the Python API: replace() regenerates too, and a document is never emptied
    small = load_spec(path).replace(seq_q=4, seq_k=4)
    np.testing.assert_array_equal(np.asarray(_param(small, "doc").values), [0, 1, 1, 2])


def test_a_run_with_generated_ids_after_an_override_passes(capsys):
    rc, out, _ = _cli(capsys, "run", "--spec", "document", "--seq", "48", "--tiles", "16x16", "--unfused")
    assert rc == 0 and "check: passed" in out
    assert "doc [48] from the spec's generator documents = [18, 13, 17]" in out  # 30:22:28 of 48


def test_lengths_that_do_not_sum_to_the_length_are_one_line(tmp_path, capsys):
    path = _write(tmp_path, BASE + DOC_MASK + "[params.doc]\ndocuments = [700, 900, 400]\n")
    rc, _, err = _cli(capsys, "run", path)
    line = _one_line(err)
    assert rc == 2 and "params.doc.documents = [700, 900, 400]" in line and "summing to 2048" in line


@pytest.mark.parametrize(
    "table, field, words",
    [
        ("documents = 0", "params.doc.documents", "count of documents"),
        ("documents = [3, -1]", "params.doc.documents", "positive"),
        ('documents = [3]\nvalues = [0, 0, 0]', "params.doc.documents", "absent beside values"),
        ('documents = 3\ndtype = "fp32"', "params.doc.dtype", "'int32'"),
        ('documents = 3\nshape = ["B", "Sk"]', "params.doc.shape", "one size"),
        ("documents = 4000", "params.doc.documents", "at most 2048 documents"),
    ],
)
def test_bad_generators_are_one_line_naming_the_key(table, field, words, tmp_path, capsys):
    rc, _, err = _cli(capsys, "spec", _write(tmp_path, BASE + DOC_MASK + "[params.doc]\n" + table + "\n"))
    line = _one_line(err)
    assert rc == 2 and field in line and words in line, line


def test_explicit_values_refuse_a_size_override_naming_the_parameter(capsys):
    rc, out, err = _cli(capsys, "run", "--spec", "softcap-doc", "--seq", "64")  # its doc ids are explicit values
    line = _one_line(err)
    assert rc == 2 and out == ""
    assert "params.doc.values" in line and "64 values" in line and "explicit values do not follow" in line


# --- prefix --------------------------------------------------------------------------------------------

PREFIX = BASE.replace("seq = 2048", "seq = 40").replace('mask = "causal"\n', "") + (
    'mask_mod = "(kv_idx < prefix[b]) | (kv_idx <= q_idx + Sk - Sq)"\n[params.prefix]\n'
)


def test_one_prefix_length_fills_every_batch_entry_and_follows_batch(tmp_path, capsys):
    path = _write(tmp_path, PREFIX + "prefix = 12\n")
    spec = load_spec(path)
    p = _param(spec, "prefix")
    assert p.dtype == "int32" and [str(d) for d in p.shape] == ["B"] and p.values == (12, 12)
    assert _param(spec.replace(batch=5), "prefix").values == (12,) * 5
    rc, out, _ = _cli(capsys, "run", path, "--batch", "3", "--heads", "1", "--tiles", "16x16", "--unfused")
    assert rc == 0 and "check: passed" in out and "prefix [3] from the spec's generator prefix = 12" in out


def test_a_prefix_per_batch_entry_refuses_another_batch(tmp_path, capsys):
    path = _write(tmp_path, PREFIX + "prefix = [8, 20]\n")
    assert _param(load_spec(path), "prefix").values == (8, 20)
    rc, _, err = _cli(capsys, "spec", path, "--batch", "3")
    line = _one_line(err)
    assert rc == 2 and "params.prefix.prefix = [8, 20]" in line and "3 prefix lengths" in line


# --- ALiBi ---------------------------------------------------------------------------------------------

ALIBI = BASE.replace("heads = 4", "heads = {h}") + 'score_mod = "score - slopes[h] * abs(q_idx - kv_idx)"\n[params.slopes]\nalibi = {recipe}\n'


def _slopes(tmp_path, heads: int, recipe: str = "true") -> np.ndarray:
    spec = load_spec(_write(tmp_path, ALIBI.format(h=heads, recipe=recipe)))
    p = _param(spec, "slopes")
    assert p.dtype == "fp32" and [str(d) for d in p.shape] == ["Hq"]
    return np.asarray(p.values)


def test_alibi_slopes_are_the_papers_for_8_and_16_heads(tmp_path):
    # Press et al. 2022, §3: 8 heads: 1/2^1 ... 1/2^8; 16 heads: 1/2^0.5, 1/2^1, ..., 1/2^8
    np.testing.assert_array_equal(_slopes(tmp_path, 8), [1 / 2**k for k in range(1, 9)])
    np.testing.assert_allclose(_slopes(tmp_path, 16), [1 / 2 ** (k / 2) for k in range(1, 17)], rtol=1e-15)
    np.testing.assert_array_equal(_slopes(tmp_path, 1), [1 / 2**8])


@pytest.mark.parametrize("heads", [2, 3, 5, 6, 12, 24, 40, 71])
def test_alibi_slopes_follow_the_reference_rule_for_any_head_count(heads, tmp_path):
    """The reference implementation's rule (ofirpress/attention_with_linear_biases, get_slopes) as
    Bloom implements it in float32 (transformers ``_get_alibi_slopes``) and MPT (``build_mpt_alibi_tensor``);
    ``alibi = "bloom"`` / ``"mpt"`` give those models' float32 values exactly."""
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    bloom = _get_alibi_slopes(heads, "cpu").numpy()
    mpt = -build_mpt_alibi_tensor(heads, 2)[:, 0, 0].numpy()
    # Bloom rounds 2^(-8/n) to float32 and raises it to the i-th power in float32: up to ~i float32
    # roundings (i <= 64 here) from the exact 2^(-8i/n); MPT takes each 2^(i·8/m) in float32 (one or two)
    np.testing.assert_allclose(_slopes(tmp_path, heads), bloom, rtol=64 * 2.0**-24)
    np.testing.assert_allclose(_slopes(tmp_path, heads), mpt, rtol=2 * 2.0**-24)
    np.testing.assert_allclose(_slopes(tmp_path, heads, '"bloom"'), bloom, rtol=2.5e-7)  # torch's and NumPy's powf
    np.testing.assert_array_equal(np.float32(_slopes(tmp_path, heads, '"mpt"')), mpt)


def test_heads_override_regenerates_the_slopes(capsys, tmp_path):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    rc, out, _ = _cli(capsys, "spec", "--spec", "alibi", "--heads", "6")
    assert rc == 0 and "alibi = true" in out
    spec = load_spec(_write(tmp_path, out))
    np.testing.assert_allclose(np.asarray(_param(spec, "slopes").values), _get_alibi_slopes(6, "cpu").numpy(), rtol=2.5e-7)
    rc, out, _ = _cli(capsys, "run", "--spec", "alibi", "--heads", "3", "--seq", "32", "--tiles", "16x16", "--unfused")
    assert rc == 0 and "check: passed" in out


def test_a_bloom_config_takes_a_heads_override(tmp_path, capsys):
    """The mapped Bloom spec carries its slopes as ``alibi = "bloom"``: --heads regenerates them."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    config = transformers.BloomConfig(vocab_size=97, hidden_size=64, n_layer=1, n_head=8).to_dict()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    rc, out, err = _cli(capsys, "spec", "--from-hf", str(path), "--seq", "64", "--heads", "2")
    assert rc == 0, err
    assert 'alibi = "bloom"' in out and "values" not in out
    slopes = np.asarray(_param(load_spec(_write(tmp_path, out)), "alibi_slopes").values)
    np.testing.assert_allclose(slopes, _get_alibi_slopes(2, "cpu").numpy(), rtol=2.5e-7)


def test_generated_params_round_trip_through_toml(tmp_path):
    text = ALIBI.format(h=6, recipe="true") + "\n[params.doc]\ndocuments = [1000, 1048]\n"
    text = text.replace('score_mod = "', DOC_MASK + 'score_mod = "')
    spec = load_spec(_write(tmp_path, text))
    again = load_spec(_write(tmp_path, spec.to_toml(), "again.toml"))
    assert again == spec and "values" not in spec.to_toml()
    assert spec.replace(seq_q=100, seq_k=100) == load_spec(_write(tmp_path, spec.replace(seq_q=100, seq_k=100).to_toml(), "small.toml"))


# --- the field reference -------------------------------------------------------------------------------


def _spec_keys() -> set[str]:
    """The keys spec_from_dict accepts, as its own error lists them (an unknown key names them all)."""
    with pytest.raises(SpecError) as info:
        spec_from_dict({"batch": 1, "heads": 1, "seq": 1, "head_dim": 1, "zzz_unknown": 1})
    return set(info.value.accepted.split("a known field: ")[1].split(", "))


def _param_keys() -> set[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict({"batch": 1, "heads": 1, "seq": 1, "head_dim": 1, "params": {"x": {"shape": [1], "zzz": 1}}})
    return set(info.value.accepted.split("the keys ")[1].split(", "))


def test_the_field_reference_lists_every_key_the_parser_accepts():
    names = [f.name for f in field_reference()]
    assert len(names) == len(set(names))
    top = {n for n in names if not n.startswith("params.")}
    assert top | {"params"} == _spec_keys()
    assert {n.removeprefix("params.NAME.") for n in names if n.startswith("params.")} == _param_keys()
    for f in field_reference():
        assert f.type and f.accepted and f.default and f.example and f.doc, f


MINIMAL = {"batch": 1, "heads": 2, "seq": 64, "head_dim": 16}
# a spec around one key's example, for the keys that need company (the pair of a shorthand, the mask of
# a window, the parameter a mod reads)
CONTEXT = {
    "heads_q": {"heads": None, "heads_q": 32}, "heads_kv": {"heads": None, "heads_q": 32},
    "seq_q": {"seq": None, "seq_q": 64, "seq_k": 64}, "seq_k": {"seq": None, "seq_q": 64, "seq_k": 64},
    "head_dim_qk": {"head_dim": None}, "head_dim_v": {"head_dim": None, "head_dim_qk": 64},
    "window": {"mask": "window"},
    "mask_mod": {"params": {"doc": {"documents": 2}}},
    "packed_ids": {"mask_mod": "doc[q_idx] == doc[kv_idx]", "params": {"doc": {"documents": [30, 34]}}},
}
PARAM_CONTEXT = {  # a [params.x] table around the key's example, and the mod that reads x
    "shape": ({"alibi": True}, {"score_mod": "score - x[h]"}),
    "dtype": ({"shape": ["Hq"]}, {"score_mod": "score + x[h]"}),
    "values": ({"shape": [2]}, {"score_mod": "score - x[h]"}),
    "documents": ({}, {"seq": 2048, "mask_mod": "x[q_idx] == x[kv_idx]"}),
    "prefix": ({}, {"mask_mod": "kv_idx < x[b]"}),
    "alibi": ({}, {"score_mod": "score - x[h]"}),
}
BAD = {"integer": 2**70, "string": 5, "number": -1.0, "boolean": "yes", "array of 2 integers": [1], "array of 2 strings": ["a"]}
PARAM_BAD = {"shape": ["Q"], "dtype": "int8", "values": ["a"], "documents": 0, "prefix": -1, "alibi": "gpt"}


def _with(data: dict, extra: dict) -> dict:
    out = {**data, **extra}
    return {k: v for k, v in out.items() if v is not None}


def _error(data: dict) -> SpecError:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    return info.value.errors[0] if hasattr(info.value, "errors") else info.value


def test_the_field_reference_says_what_the_validator_accepts():
    """Each example loads; a value outside what a key accepts gets an error with the reference's words
    (the shorthands name the first field of their pair)."""
    import tomllib

    for f in field_reference():
        (key, value), = tomllib.loads(f.example).items()
        if f.name.startswith("params.NAME."):
            table, context = PARAM_CONTEXT[key]
            spec_from_dict(_with(MINIMAL, {**context, "params": {"x": {**table, key: value}}}))
            err = _error(_with(MINIMAL, {**context, "params": {"x": {**table, key: PARAM_BAD[key]}}}))
            assert err.field == f"params.x.{key}" and err.accepted == f.accepted, (f.name, str(err), f.accepted)
            continue
        data = _with(MINIMAL, {**CONTEXT.get(key, {}), key: value})
        spec_from_dict(data)
        err = _error({**data, key: BAD[f.type]})
        target = {"heads": "heads_q", "seq": "seq_q", "head_dim": "head_dim_qk"}.get(key, key)
        assert err.field == target and err.accepted == f.accepted, (f.name, str(err), f.accepted)


def test_integer_ranges_in_the_reference_end_where_the_validator_does():
    for f in field_reference():
        if f.type != "integer" or f.name.startswith("params.") or not f.accepted.startswith("an integer from "):
            continue
        lo, hi = (int(x) for x in f.accepted.removeprefix("an integer from ").split(" to "))
        assert lo == 1
        with pytest.raises(SpecError):
            spec_from_dict({**MINIMAL, f.name: hi + 1})
        with pytest.raises(SpecError):
            spec_from_dict({**MINIMAL, f.name: lo - 1})


def test_spec_fields_prints_the_reference(capsys):
    rc, out, _ = _cli(capsys, "spec", "--fields")
    assert rc == 0 and max(len(ln) for ln in out.splitlines()) <= 100
    for f in field_reference():
        assert f"\n{f.name} ({f.type})\n" in out
    rc, out, _ = _cli(capsys, "spec", "--fields", "markdown")
    rows = [ln for ln in out.splitlines() if ln.startswith("| `")]
    assert rc == 0 and len(rows) == len(field_reference())
    rc, out, _ = _cli(capsys, "spec", "--fields", "json")
    assert rc == 0 and json.loads(out) == [f.as_dict() for f in field_reference()]
    rc, _, err = _cli(capsys, "spec", "--fields", "--spec", "tiny")
    assert rc == 2 and "--fields" in _one_line(err)


def test_builtin_specs_use_the_generators():
    assert _param(builtin_spec("document"), "doc").generator.spec_value() == [30, 22, 28]
    assert _param(builtin_spec("alibi"), "slopes").generator.spec_value() is True
