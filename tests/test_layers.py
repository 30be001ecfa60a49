"""The import layers, enforced: every import of every module points downward.

Layers, bottom first: the shared modules (errors, schema readers, I/O helpers, labels, version) ->
``plan`` (pure numpy + xxhash index maths) -> ``sources`` (pyarrow, never torch) -> ``loader``
(torch) -> ``checkpoint`` -> the faces (cli, testing, demos, distributed, instrument) and the lazy
top-level facade. The walk reads the source with ``ast``, so it sees *every* import: top-level,
inside functions, under ``if TYPE_CHECKING:``, ``importlib.import_module("...")`` and
``__import__("...")`` with a constant name. Subprocess tests check what importing ``plan`` and
``sources`` really loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import resumable_data

PACKAGE = Path(resumable_data.__file__).parent
ROOT = PACKAGE.parent

SHARED = {"resumable_data.errors", "resumable_data._schema", "resumable_data._io", "resumable_data.labels",
          "resumable_data._cache", "resumable_data._version"}
FACES = {"resumable_data.cli", "resumable_data.__main__", "resumable_data.cli_check", "resumable_data.testing", "resumable_data.demo",
         "resumable_data.demo_train", "resumable_data.distributed", "resumable_data.instrument",
         "resumable_data.cli_pin", "resumable_data.cli_view", "resumable_data.cli_inspect", "resumable_data.cli_prepare", "resumable_data.batch_digest",
         # optional framework integrations (the `integrations` extra), imported by nothing in the core
         "resumable_data.integrations", "resumable_data.integrations._files", "resumable_data.integrations.transformers",
         "resumable_data.integrations.lightning", "resumable_data.integrations.accelerate",
         "resumable_data.integrations.torchtitan"}
LEVEL = {"shared": 0, "plan": 1, "sources": 2, "loader": 3, "checkpoint": 4, "faces": 5}

# third-party / stdlib top-level modules a layer must not import at all
FORBIDDEN = {
    "shared": {"torch", "pyarrow", "datasets", "safetensors"},
    # plan: pure index maths; no torch, no Arrow, no I/O, no environment or interpreter reads
    "plan": {"torch", "pyarrow", "datasets", "safetensors", "tqdm", "fsspec", "os", "sys", "io", "pathlib",
             "shutil", "tempfile", "subprocess", "socket", "urllib", "glob", "mmap", "importlib"},
    "sources": {"torch", "safetensors"},
}

# Known violations inside files another branch of issue 12 is rewriting (this branch may not
# edit them). Each entry is (importing module, imported module, kind); remove it when fixed.
ALLOWED: set[tuple[str, str, str]] = set()


# torch's private internals live in the two torch_compat modules only
TORCH_COMPAT = {"resumable_data.loader.torch_compat", "resumable_data.checkpoint.torch_compat"}
TORCH_PRIVATE_NAMES = {
    "_MultiProcessingDataLoaderIter", "_BaseDataLoaderIter", "_shutdown_workers", "_iterator", "_workers",
    "_opt_called", "_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_per_optimizer_states",
    "found_inf_per_device", "_device", "_scale", "_step_count", "_last_lr", "_get_lr_called_within_step",
    "_is_initial",
}
# (module, private name) uses in files another branch of issue 12 is rewriting; remove when moved
ALLOWED_TORCH_PRIVATE: set[tuple[str, str]] = set()


def layer_of(module: str) -> str:
    if module in SHARED:
        return "shared"
    if module in FACES or module == "resumable_data":  # the facade is lazy: it sits with the faces
        return "faces"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("plan", "sources", "loader", "checkpoint"):
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add it to SHARED or FACES in tests/test_layers.py, "
                         "or put it under plan/, sources/, loader/ or checkpoint/")


def package_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = package_modules()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (resolved, absolute)
    line: int
    type_checking: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{prefix}.{alias.name}"
        out.append(sub if sub in MODULES else prefix)  # a submodule, else a name of the module
    return out


def imports_of(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, tc: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, tc)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(module, a.name, node.lineno, tc) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.extend(Import(module, t, node.lineno, tc) for t in _resolve_from(module, is_package, node))
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                found.append(Import(module, node.args[0].value, node.lineno, tc))
        for child in ast.iter_child_nodes(node):
            visit(child, tc)

    visit(tree, False)
    return found


ALL_IMPORTS = [imp for m, p in MODULES.items() for imp in imports_of(m, p)]


def violations() -> list[tuple[Import, str, str]]:
    """(import, kind, reason) for every upward edge or forbidden third-party import."""
    out = []
    for imp in ALL_IMPORTS:
        if imp.module == "resumable_data":
            continue  # the facade maps every public name to its module (lazily): it may name them all
        src = layer_of(imp.module)
        top = imp.target.split(".")[0]
        if top == "resumable_data":
            dst = layer_of(imp.target)
            if LEVEL[dst] > LEVEL[src]:
                out.append((imp, "layer", f"{src} imports {dst} (upward)"))
        elif top in FORBIDDEN.get(src, ()):
            out.append((imp, "forbidden", f"{src} must not import {top}"))
    return out


def _show(imp: Import, reason: str) -> str:
    where = MODULES[imp.module].relative_to(ROOT)
    tc = " [under TYPE_CHECKING]" if imp.type_checking else ""
    return f"{where}:{imp.line}: {imp.module} -> {imp.target}: {reason}{tc}"


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_the_walk_sees_nested_and_dynamic_imports():
    """A self-check of the walker on the package itself: imports inside functions count."""
    targets = {(i.module, i.target) for i in ALL_IMPORTS}
    assert ("resumable_data.cli_inspect", "resumable_data.checkpoint.store") in targets  # inside a function
    assert ("resumable_data.checkpoint.save", "torch") in targets  # __import__("torch")
    assert ("resumable_data.loader.stream", "resumable_data.loader.packed") in targets  # nested, relative-free


def test_imports_point_downward_only():
    found = violations()
    unexpected = [_show(i, r) for i, kind, r in found if (i.module, i.target, kind) not in ALLOWED]
    assert not unexpected, "imports against the layering (move the code down, or the import up):\n  " + \
        "\n  ".join(unexpected)


def test_the_allow_list_holds_only_live_violations():
    live = {(i.module, i.target, kind) for i, kind, _ in violations()}
    stale = sorted(ALLOWED - live)
    assert not stale, f"fixed, so remove them from ALLOWED in tests/test_layers.py: {stale}"


def test_no_type_checking_imports():
    """Preferred: none at all (an import only a type checker sees hides a real dependency)."""
    tc = [_show(i, "TYPE_CHECKING import") for i in ALL_IMPORTS if i.type_checking]
    assert not tc, "\n  ".join(tc)


def test_plan_reads_no_environment():
    """Besides the imports: no ``x.environ`` / ``x.getenv`` / ``os.*`` / ``sys.*`` (``sys.modules``) in plan."""
    bad = []
    for module, path in MODULES.items():
        if layer_of(module) != "plan":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue  # a parameter called ``environ`` is fine: it is handed in, not read
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if node.attr in ("environ", "getenv", "putenv", "environb") or owner in ("os", "sys"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {owner}.{node.attr}")
    assert not bad, "plan must not read the environment or the interpreter:\n  " + "\n  ".join(bad)


def torch_private_uses() -> set[tuple[str, str, int]]:
    """(module, private name or module, line) for each use of torch internals outside torch_compat."""
    out = set()
    for module, path in MODULES.items():
        if module in TORCH_COMPAT:
            continue
        for imp in imports_of(module, path):
            if imp.target.split(".")[0] == "torch" and any(p.startswith("_") for p in imp.target.split(".")):
                out.add((module, imp.target, imp.line))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in TORCH_PRIVATE_NAMES:
                out.add((module, node.attr, node.lineno))
            elif isinstance(node, ast.Constant) and node.value in TORCH_PRIVATE_NAMES:
                out.add((module, node.value, node.lineno))
    return out


def test_torch_private_internals_live_in_torch_compat():
    uses = torch_private_uses()
    bad = sorted(f"{MODULES[m].relative_to(ROOT)}:{line}: {name}" for m, name, line in uses
                 if (m, name) not in ALLOWED_TORCH_PRIVATE)
    assert not bad, ("torch internals used outside loader/torch_compat.py and checkpoint/torch_compat.py "
                     "(wrap them there, with a shape check in their tests):\n  " + "\n  ".join(bad))
    stale = sorted(ALLOWED_TORCH_PRIVATE - {(m, name) for m, name, _ in uses})
    assert not stale, f"fixed, so remove them from ALLOWED_TORCH_PRIVATE in tests/test_layers.py: {stale}"


def test_the_facade_names_resolve_to_their_layers():
    import resumable_data as rd

    for name in rd.__all__:
        value = getattr(rd, name)
        module = getattr(value, "__name__", None) if isinstance(value, type(rd)) else getattr(value, "__module__", None)
        assert module and module.startswith("resumable_data"), (name, module)
    assert set(dir(rd)) >= set(rd.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rd.nope  # noqa: B018


def test_the_layers_are_attributes_of_a_fresh_facade():
    """``rd.sources.MANIFEST_NAME`` works right after ``import resumable_data`` (lazily)."""
    code = ("import sys, resumable_data as rd; assert 'resumable_data.sources' not in sys.modules; "
            "assert rd.sources.MANIFEST_NAME and rd.plan.Plan and rd.errors.UsageError is rd.UsageError; "
            "assert rd.labels.RecoveryLabel and rd.loader.DataLoader and rd.checkpoint.step_was_applied; "
            "assert rd.testing.assert_resumes and rd.distributed and rd.instrument; "
            "assert {'sources', 'loader', 'testing'} <= set(dir(rd))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("module, absent", [
    ("resumable_data", ("torch", "pyarrow", "numpy")),
    ("resumable_data.plan", ("torch", "pyarrow", "resumable_data.sources", "resumable_data.loader")),
    ("resumable_data.sources", ("torch", "resumable_data.loader", "resumable_data.checkpoint")),
])
def test_importing_a_layer_loads_nothing_above_it(module, absent):
    code = (f"import sys; import {module}; "
            f"bad = [m for m in {list(absent)!r} if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, f"import {module} loaded {run.stdout.strip()} {run.stderr[-2000:]}"
