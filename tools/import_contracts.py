"""An import-linter contract type the stock ones lack: no module imports another module's private
(underscore) name. Every import statement counts, those inside functions too, as grimp's graph does.

Configured in ``pyproject.toml`` (``[tool.importlinter]``, ``contract_types``) and run by
``lint-imports`` (``tests/test_architecture.py`` runs it with the test suite).
"""

from __future__ import annotations

import ast
import importlib.machinery

from importlinter import Contract, ContractCheck, fields, output


class PrivateNamesContract(Contract):
    """``from a.b import _c``, and ``m._c`` where ``m`` is bound by an import to a module ``a.b``, are
    broken when ``a.b`` is a module of ``packages`` other than the importer (a module may use its own
    private names; a package's ``__init__`` those of its submodules is no exception). Options:
    ``packages``: the root packages to check."""

    type_name = "private_names"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        broken = []
        roots = tuple(self.packages)
        for module in sorted(graph.modules):
            if not module.startswith(roots):
                continue
            spec = _find_spec(module)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                continue
            is_package = spec.submodule_search_locations is not None
            with open(spec.origin, encoding="utf-8") as f:
                tree = ast.parse(f.read(), spec.origin)
            base = module.split(".") if is_package else module.split(".")[:-1]
            modules: dict[str, str] = {}  # local name -> the package module it is bound to
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith(roots) and alias.asname:
                            modules[alias.asname] = alias.name
                    continue
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    parts = base[: len(base) - (node.level - 1)]
                    source = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source == module or not source.startswith(roots):
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        broken.append((module, node.lineno, source, alias.name))
                    elif f"{source}.{alias.name}" in graph.modules:
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
            # a private name read through a module bound here (``import tilegen.x as m; m._y``)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                        and modules.get(node.value.id, module) != module):
                    broken.append((module, node.lineno, modules[node.value.id], node.attr))
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, line, source, name in check.metadata["broken"]:
            output.print_error(f"{module}:{line} imports the private name {name} of {source}", bold=False)


def _find_spec(module: str):
    """The spec of ``module`` (dotted), found on the file system without importing it or its parent
    packages (importlib.util.find_spec imports the parents, and with them torch and the rest: seconds);
    None when it is not there."""
    parts = module.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0])
    for n in range(2, len(parts) + 1):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:n]), list(spec.submodule_search_locations))
    return spec


def _private(name: str) -> bool:
    """``_name``, not ``__dunder__``."""
    return name.startswith("_") and not name.startswith("__")
