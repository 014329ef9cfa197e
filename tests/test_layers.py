"""The layers of ../shared/DESIGN.md §1 hold: core -> engine -> backends -> API -> executor.

Each module's imports are read from its source (relative ones resolved to the installed
names: ``engine/`` is ``aluminum.engine``), so a violation fails here whether or not the code
path that imports it ever runs.  Besides nothing importing upward: the API layer reaches
backends only through the registry package ``aluminum.backends`` (never a backend's modules,
never mpi4py), and the executor and the torch glue reach the library only through ``import
aluminum``.
"""
import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder in the repository -> installed package name
PACKAGES = {"aluminum/core": "aluminum.core", "engine": "aluminum.engine",
            "backends": "aluminum.backends"}
# what each layer may import from aluminum (besides itself)
ALLOWED = {"aluminum.core": ("aluminum.core",),
           "aluminum.engine": ("aluminum.core", "aluminum.engine"),
           "aluminum.backends": ("aluminum.core", "aluminum.engine", "aluminum.backends")}


def _module_name(folder: str, package: str, path: Path) -> str:
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _imports(path: Path, module: str) -> list[str]:
    """Every module ``path`` imports, as absolute names (``from . import x`` gives
    ``package.x``: x may be a submodule)."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            found.append(prefix)
            found += [f"{prefix}.{alias.name}" for alias in node.names]
    return found


def _layer_cases():
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield pytest.param(folder, package, path, id=str(path.relative_to(ROOT)))


@pytest.mark.parametrize("folder,package,path", list(_layer_cases()))
def test_no_module_imports_a_layer_above_it(folder, package, path):
    module = _module_name(folder, package, path)
    allowed = ALLOWED[package]
    above = sorted({name for name in _imports(path, module)
                    if name.split(".")[0] == "aluminum" and "." in name
                    and not name.startswith(allowed)
                    and not _is_symbol_of_allowed(name, allowed)})
    assert not above, f"{module} imports from a layer above it: {above}"


def _is_symbol_of_allowed(name: str, allowed: tuple) -> bool:
    # ``from ..core.errors import OperationError`` yields "aluminum.core.errors.OperationError"
    return name.rsplit(".", 1)[0].startswith(allowed)


def test_the_checker_sees_a_violation(tmp_path):
    """The test above can fail: an engine module importing the API is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from .. import runtime\nfrom ..core import trace\n")
    names = _imports(bad, "aluminum.engine.bad")
    assert "aluminum.runtime" in names and "aluminum.core.trace" in names


# -- the API layer knows no backend and no MPI ----------------------------------------------

API_SKIPS = ("core", "executor", "torch")   # their own layers (below, above)
BACKEND_MODULES = frozenset(path.stem for path in (ROOT / "backends").iterdir()
                            if path.suffix == ".py" or (path / "__init__.py").exists())


def _api_modules():
    for path in sorted((ROOT / "aluminum").rglob("*.py")):
        if path.relative_to(ROOT / "aluminum").parts[0] not in API_SKIPS:
            yield pytest.param(path, id=str(path.relative_to(ROOT)))


def _api_violations(path: Path, module: str) -> list[str]:
    """What ``path`` imports that the API layer may not: mpi4py, or a module of a backend
    (``aluminum.backends.mpi...``, ``aluminum.backends.runtime...``) rather than a name the
    registry package ``aluminum.backends`` exports."""
    found = set()
    for name in _imports(path, module):
        parts = name.split(".")
        if parts[0] == "mpi4py":
            found.add(name)
        elif parts[:2] == ["aluminum", "backends"] and len(parts) > 2 and \
                (parts[2] in BACKEND_MODULES or len(parts) > 3):
            found.add(name)
    return sorted(found)


@pytest.mark.parametrize("path", list(_api_modules()))
def test_the_api_layer_imports_no_backend_module_and_no_mpi(path):
    module = _module_name("aluminum", "aluminum", path)
    assert not _api_violations(path, module), \
        f"{module} reaches past aluminum.backends: {_api_violations(path, module)}"


def test_the_api_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from .backends.mpi import rendezvous\nimport mpi4py\n"
                   "from .backends.runtime.host import HostStream\n"
                   "from .backends import get_backend, HostStream\n")
    assert _api_violations(bad, "aluminum.bad") == [
        "aluminum.backends.mpi", "aluminum.backends.mpi.rendezvous",
        "aluminum.backends.runtime.host", "aluminum.backends.runtime.host.HostStream",
        "mpi4py"]


# -- the executor and torch use only ``import aluminum`` ---------------------------------------

CLIENTS = ("aluminum/executor", "aluminum/torch")


def _client_violations(path: Path, module: str, package: str) -> list[str]:
    """What ``path`` (in ``package``) imports from the library other than ``aluminum``
    itself: ``aluminum.<sub>`` imports and relative ones out of ``package``."""
    return sorted({name for name in _imports(path, module)
                   if name.startswith("aluminum.") and name != package
                   and not name.startswith(package + ".")})


def _client_cases():
    for folder in CLIENTS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield pytest.param(folder, path, id=str(path.relative_to(ROOT)))


@pytest.mark.parametrize("folder,path", list(_client_cases()))
def test_executor_and_torch_use_only_import_aluminum(folder, path):
    package = folder.replace("/", ".")
    module = _module_name(folder, package, path)
    assert not _client_violations(path, module, package), \
        f"{module} reaches into the library: {_client_violations(path, module, package)}"


def test_the_client_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import aluminum as al\nfrom aluminum.tuning import selector\n"
                   "from ... import runtime\nfrom ..ir import Program\n")
    assert _client_violations(bad, "aluminum.executor.sharding.bad", "aluminum.executor") == [
        "aluminum.runtime", "aluminum.tuning", "aluminum.tuning.selector"]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


BLOCK_MPI4PY = """
    import sys

    class BlockMpi4py:
        def find_spec(self, name, path=None, target=None):
            if name == "mpi4py" or name.startswith("mpi4py."):
                raise ImportError("mpi4py is blocked by the test")

    sys.meta_path.insert(0, BlockMpi4py())
"""


def test_engine_runs_without_mpi4py():
    result = _run(BLOCK_MPI4PY + """
    from aluminum.engine import Action, State
    from aluminum.engine.progress import submit

    class CountToThree(State):
        steps = 0

        def step(self):
            self.steps += 1
            return Action.COMPLETE if self.steps == 3 else Action.CONTINUE

    state = CountToThree()
    request = submit(state)
    request.wait(timeout=10)
    assert state.steps == 3
    print("engine ok")
    """)
    assert result.returncode == 0, result.stderr
    assert "engine ok" in result.stdout


def test_importing_aluminum_starts_no_mpi():
    result = _run("""
    import sys
    import aluminum
    assert "mpi4py.MPI" not in sys.modules, "import aluminum imported mpi4py.MPI"
    print("no mpi")
    """)
    assert result.returncode == 0, result.stderr
    assert "no mpi" in result.stdout
