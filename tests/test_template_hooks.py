"""The named hooks of the templates (tilegen/backends/hooks.py): a template renders at a hook point the
macros of the features the backend chose, in their order; a misspelt point or macro is one error. And
templates only render: no branch of a template tests the spec, its mods or the target (what a spec
has is the backend's to decide)."""

from __future__ import annotations

import jinja2
import pytest
from jinja2 import nodes

from tilegen.backends.hooks import hooks
from tilegen.core.resources import data_dir

FEATURES = {
    "features/a.jinja": "{% macro args() %}a, {% endmacro %}{% macro doc() %}A {{ x }}\n{% endmacro %}",
    "features/b.jinja": "{% macro args() %}b, {% endmacro %}{% macro body(n) %}{{ hook('args') }}{{ n }}{% endmacro %}",
    "features/typo.jinja": "{% macro arsg() %}t{% endmacro %}",
}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader(FEATURES), undefined=jinja2.StrictUndefined)


def test_a_point_renders_the_chosen_features_in_their_order():
    env = _env()
    assert hooks(env, ["a", "b"], {"x": 1}, ("args", "doc", "body"))("args") == "a, b, "
    assert hooks(env, ["b", "a"], {"x": 1}, ("args", "doc", "body"))("args") == "b, a, "
    assert hooks(env, ["b"], {}, ("args", "doc", "body"))("doc") == ""  # no feature fills it
    assert hooks(env, ["a", "b"], {"x": 2}, ("args", "doc", "body"))("doc") == "A 2\n"  # the render's context
    assert hooks(env, ["a", "b"], {"x": 2}, ("args", "doc", "body"))("body", 7) == "a, b, 7"  # a hook inside a hook


def test_a_misspelt_point_or_macro_is_one_error():
    with pytest.raises(ValueError, match=r"features/typo.jinja: macro\(s\) arsg are not hook points; accepted: args"):
        hooks(_env(), ["typo"], {}, ("args",))
    with pytest.raises(ValueError, match=r"hook 'arsg' is not a hook point; accepted: args, doc"):
        hooks(_env(), ["a"], {"x": 1}, ("args", "doc"))("arsg")


DECIDING = {"spec", "mods", "target"}  # what a branch must not test: the backend decides from them
NOT_YET: set[str] = set()  # templates not yet held to the rule (none)


def _branch_names(source: str):
    """(kind, the variable names its condition reads) of every {% if %} / {% elif %} and inline
    `a if c else b` of a template."""
    tree = jinja2.Environment().parse(source)
    for node in tree.find_all((nodes.If, nodes.CondExpr)):
        test = node.test
        yield type(node).__name__, {n.name for n in test.find_all(nodes.Name)} | ({test.name} if isinstance(test, nodes.Name) else set())


def test_no_template_branch_tests_the_spec_its_mods_or_the_target():
    root = data_dir("templates")
    checked, found = 0, []
    for path in sorted(root.rglob("*.jinja")):
        rel = path.relative_to(root).as_posix()
        if rel in NOT_YET:
            continue
        checked += 1
        for kind, names in _branch_names(path.read_text()):
            if names & DECIDING:
                found.append(f"{rel}: {kind} on {sorted(names & DECIDING)}")
    assert checked >= 10, checked
    assert not found, "branches that decide by the spec, mods or target:\n" + "\n".join(found)


def test_the_check_sees_a_spec_branch():
    text = "{% if spec.sinks %}x{% elif k.log2 %}y{% endif %}{{ 1 if mods and mods.grads else 2 }}{{ 3 if tn.param else 4 }}"
    assert sorted((k, sorted(n)) for k, n in _branch_names(text)) == [
        ("CondExpr", ["mods"]), ("CondExpr", ["tn"]), ("If", ["k"]), ("If", ["spec"])]
