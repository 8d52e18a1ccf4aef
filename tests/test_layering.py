"""The kernel is used through its API: no module outside ``_core`` imports ``_core._x``.

Every ``import`` statement is read, wherever it sits (module level, inside a function,
under ``TYPE_CHECKING``), because a lazy import of a private kernel module couples the
two layers as tightly as a top-level one.
"""

from __future__ import annotations

import ast
import pathlib
import re
from typing import Final

import attrs

import awaken_trio
from awaken_trio.store import Commit

PACKAGE = pathlib.Path(awaken_trio.__file__).parent
PRIVATE_KERNEL = re.compile(r"(?:awaken_trio\.)?_core\._\w+")


def _outside_kernel() -> list[pathlib.Path]:
    return sorted(
        path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "_core"
    )


def _private_kernel_imports(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            relative_or_ours = node.level > 0 or node.module.startswith("awaken_trio.")
            if relative_or_ours and PRIVATE_KERNEL.fullmatch(node.module):
                found.append(f"{path.name}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Import):
            found.extend(
                f"{path.name}:{node.lineno} import {alias.name}"
                for alias in node.names
                if PRIVATE_KERNEL.fullmatch(alias.name)
            )
    return found


def test_the_scan_sees_the_package() -> None:
    modules = _outside_kernel()
    names = {path.relative_to(PACKAGE).parts[0] for path in modules}
    assert {"store", "worker", "agent", "testing", "client", "_cli"} <= names


def test_the_scan_finds_a_private_kernel_import(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from .._core._state import Ended\n"
        "def later():\n"
        "    from awaken_trio._core._storage import Commit\n"
        "    import awaken_trio._core._json\n"
        "from .._core import Ended as E\n"
    )
    assert [line.split(" ", 1)[0] for line in _private_kernel_imports(sample)] == [
        "sample.py:1",
        "sample.py:3",
        "sample.py:4",
    ]


def test_no_module_outside_the_kernel_imports_a_private_kernel_module() -> None:
    offenders = [hit for path in _outside_kernel() for hit in _private_kernel_imports(path)]
    assert offenders == [], (
        "import these names from awaken_trio._core (export them in "
        f"_core/__init__.py if they are missing): {offenders}"
    )


# ---------------------------------------------------------------- the kernel stands alone

KERNEL = PACKAGE / "_core"


def _imports_above_kernel(path: pathlib.Path, package: pathlib.Path = PACKAGE) -> list[str]:
    """Every import in a kernel module of a part of the package outside the kernel
    (``store``, ``worker``, ``_open``, ``_otel`` ...): relative ones that climb out of
    ``_core`` and absolute ones that name ``awaken_trio`` but not ``awaken_trio._core``."""
    found = []
    inside = path.parent.relative_to(package).parts  # ("_core",) or deeper
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                if node.level > len(inside):
                    # from .. import x / from ..store import y: names in the package itself
                    target = node.module or ", ".join(a.name for a in node.names)
                    found.append(f"{path.name}:{node.lineno} from {'.' * node.level}{target}")
                continue
            module = node.module or ""
            if _names_above_kernel(module):
                found.append(f"{path.name}:{node.lineno} from {module}")
        elif isinstance(node, ast.Import):
            found.extend(
                f"{path.name}:{node.lineno} import {alias.name}"
                for alias in node.names
                if _names_above_kernel(alias.name)
            )
    return found


def _names_above_kernel(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "awaken_trio" and (len(parts) == 1 or parts[1] != "_core")


def test_the_kernel_scan_finds_an_import_from_above(tmp_path: pathlib.Path) -> None:
    kernel = tmp_path / "awaken_trio" / "_core"
    kernel.mkdir(parents=True)
    sample = kernel / "sample.py"
    sample.write_text(
        "from ._state import Ended\n"
        "def later():\n"
        "    from ..store import open_store\n"
        "    from ..worker._serve import serve\n"
        "    import awaken_trio.worker\n"
        "    from awaken_trio._core import Ended\n"
        "    from .. import _otel\n"
        "from awaken_trio import open_runtime\n"
    )
    hits = _imports_above_kernel(sample, tmp_path / "awaken_trio")
    assert sorted((hit.split(" ", 1)[0] for hit in hits), key=lambda h: int(h[10:])) == [
        "sample.py:3",
        "sample.py:4",
        "sample.py:5",
        "sample.py:7",
        "sample.py:8",
    ]


def test_the_kernel_imports_nothing_from_the_package_above_it() -> None:
    modules = sorted(KERNEL.rglob("*.py"))
    assert len(modules) > 10
    offenders = [hit for path in modules for hit in _imports_above_kernel(path)]
    assert offenders == [], (
        "the kernel (_core) must not import store/, worker/ or anything else above it;"
        f" pass what it needs in from awaken_trio._open instead: {offenders}"
    )


# ---------------------------------------------------------------- the single writer

WRITER = PACKAGE / "_core" / "_commit_of.py"
# The store contract suites play the supervisor's part against a store under test: they
# build commits to hand it, and no runtime runs them.
STORE_TESTS = PACKAGE / "testing"


def _commits_built(path: pathlib.Path) -> list[str]:
    """Every call that builds a `Commit` (``Commit(...)``, ``x.Commit(...)``, and
    ``Commit.__init__(obj, ...)``, as the supervisor's hot paths build theirs)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "__init__":
                func = func.value
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "Commit":
                found.append(f"{path.relative_to(path.parents[1])}:{node.lineno}")
    return found


def test_the_commit_scan_finds_a_commit_built(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    sample = package / "sample.py"
    sample.write_text(
        "from x import Commit, storage\n"
        "a = Commit(run_id='r')\n"
        "def later():\n"
        "    return storage.Commit(run_id='r')\n"
        "b = CommitResult()\n"
        "Commit.__init__(object.__new__(Commit), run_id='r')\n"
        "CommitResult.__init__(b)\n"
    )
    assert sorted(_commits_built(sample)) == [
        "sub/sample.py:2",
        "sub/sample.py:4",
        "sub/sample.py:6",
    ]


def test_only_the_commit_builders_build_commits() -> None:
    """Commits are made by intent, in one module of builders: no other module of the
    runtime (the supervisor's parts, committed control, the worker, the stores) makes a
    commit to hand the store."""
    assert _commits_built(WRITER), "the scan must see the builders' own commits"
    others = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != WRITER and not path.is_relative_to(STORE_TESTS)
        for hit in _commits_built(path)
    ]
    assert others == [], (
        "only awaken_trio/_core/_commit_of.py builds a Commit; add a builder for this"
        f" commit's intent there and call it instead: {others}"
    )


# Attributes of a Commit: a store reads them, and nothing may change one once it is built.
COMMIT_FIELDS = frozenset(attrs.fields_dict(Commit))


def _commit_attributes_assigned(path: pathlib.Path) -> list[str]:
    """Every assignment to an attribute named like a `Commit` field on a name called
    ``commit`` (or ``*_commit``), outside the builders: ``commit.fence = ...``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        found.extend(
            f"{path.relative_to(path.parents[1])}:{node.lineno}"
            for target in targets
            if isinstance(target, ast.Attribute)
            and target.attr in COMMIT_FIELDS
            and isinstance(target.value, ast.Name)
            and (target.value.id == "commit" or target.value.id.endswith("_commit"))
        )
    return found


def test_the_commit_attribute_scan_finds_an_assignment(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "pkg" / "sub"
    package.mkdir(parents=True)
    sample = package / "sample.py"
    sample.write_text(
        "commit.fence = None\nend_commit.release = True\ncommit.other = 1\nrecord.fence = None\n"
    )
    assert _commit_attributes_assigned(sample) == ["sub/sample.py:1", "sub/sample.py:2"]


def test_nothing_assigns_an_attribute_of_a_commit() -> None:
    """A commit is built whole by its builder and never patched afterwards."""
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(STORE_TESTS)
        for hit in _commit_attributes_assigned(path)
    ]
    assert found == [], f"a Commit's attribute is assigned after it was built: {found}"


# ---------------------------------------------------------------- the worker's seam

KERNEL_INTERNALS = {"Supervisor", "Attempt", "AttemptRegistry", "ThreadGate", "Commit"}


def _kernel_names_imported(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_core"):
            names.update(alias.name for alias in node.names)
    return names


def test_the_worker_is_built_on_the_serving_protocol_only() -> None:
    """Durable serving sees the kernel as a `ServingHost` (and fills its `ClaimPolicy` for
    a durable store): it imports none of the kernel's internals, and builds no commit."""
    modules = sorted((PACKAGE / "worker").glob("*.py"))
    assert any("ServingHost" in _kernel_names_imported(path) for path in modules)
    used = {path.name: _kernel_names_imported(path) & KERNEL_INTERNALS for path in modules}
    assert {name: found for name, found in used.items() if found} == {}


# ---------------------------------------------------------------- a runtime's insides


def _runtime_insides_read(path: pathlib.Path) -> list[str]:
    """Every private attribute read on something named like a runtime (``runtime._store``,
    ``self._runtime._kernel``, ``client_runtime._supervisor``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__"):
            continue
        owner = node.value
        name = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else None
        )
        if name is not None and name.lstrip("_").endswith("runtime"):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_the_insides_scan_finds_a_private_read(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "runtime._store\nself._runtime._kernel\nruntime.record\nruntime.__class__\nother._x\n"
    )
    assert _runtime_insides_read(sample) == ["sample.py:1 ._store", "sample.py:2 ._kernel"]


def test_nothing_outside_the_kernel_reads_a_runtimes_private_attributes() -> None:
    """The faces, the worker and the stores use a runtime through its public methods, so the
    kernel may change its insides without breaking them."""
    found = [hit for path in _outside_kernel() for hit in _runtime_insides_read(path)]
    assert found == [], f"a private attribute of a runtime is read outside _core: {found}"


# ---------------------------------------------------------------- the faces

FACES = ("_cli", "_ui", "client")
"""The operator faces: each is built on the public API and the faces' shared package
(`awaken_trio._face`), never on another face."""
LAUNCHES: Final[dict[tuple[str, ...], str]] = {("_cli", "_ui.py"): "_ui"}
"""The one arrow between faces: ``awaken-trio ui`` (the command line's ``ui`` command)
starts the dashboard through the dashboard package's public names."""


def _imported_parts(path: pathlib.Path, package: pathlib.Path) -> list[tuple[int, tuple[str, ...]]]:
    """Every module of the package an import in ``path`` names, as its parts below the
    package (``("_ui", "_guard")``), with the line it is on; ``from .. import _ui`` names
    ``("_ui",)``."""
    inside = path.parent.relative_to(package).parts
    found: list[tuple[int, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                base = inside[: len(inside) - (node.level - 1)]
            elif (node.module or "").split(".")[0] == package.name:
                base = ()
            else:
                continue
            module = tuple((node.module or "").split(".")) if node.module else ()
            if node.level == 0:
                module = module[1:]
            target = (*base, *module)
            if target:
                found.append((node.lineno, target))
            else:  # from .. import x: the names are modules of the package
                found.extend((node.lineno, (alias.name,)) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(
                (node.lineno, tuple(alias.name.split(".")[1:]))
                for alias in node.names
                if alias.name.split(".")[0] == package.name and "." in alias.name
            )
    return sorted(found)


def _face_imports(package: pathlib.Path) -> list[str]:
    """Every import by a module of one face of another face (`FACES`), save `LAUNCHES`,
    and by the shared package of any face."""
    found: list[str] = []
    for face in (*FACES, "_face"):
        for path in sorted((package / face).rglob("*.py")):
            where = path.relative_to(package).parts
            for line, target in _imported_parts(path, package):
                other = target[0] if target else None
                if other in FACES and other != face:
                    if LAUNCHES.get(where) == other and target == (other,):
                        continue
                    found.append(f"{'/'.join(where)}:{line} imports {'.'.join(target)}")
    return found


def test_the_face_scan_finds_one_face_importing_another(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "awaken_trio"
    for face in (*FACES, "_face"):
        (package / face).mkdir(parents=True)
    (package / "_ui" / "_app.py").write_text(
        "from .._cli._common import failure_of\n"
        "from .._face.shapes import row_json\n"
        "def later():\n"
        "    from awaken_trio.client import Client\n"
        "    import awaken_trio._cli._shapes\n"
        "from .. import _cli\n"
        "from . import _pages\n"
    )
    (package / "_cli" / "_ui.py").write_text(
        "def serve():\n"
        "    from .._ui import serve_dashboard\n"
        "    from .._ui._guard import is_loopback\n"
    )
    (package / "client" / "_sync.py").write_text("from ..store import open_store\n")
    (package / "_face" / "shapes.py").write_text("from ..store import x\nfrom .._ui import y\n")
    assert _face_imports(package) == [
        "_cli/_ui.py:3 imports _ui._guard",
        "_ui/_app.py:1 imports _cli._common",
        "_ui/_app.py:4 imports client",
        "_ui/_app.py:5 imports _cli._shapes",
        "_ui/_app.py:6 imports _cli",
        "_face/shapes.py:2 imports _ui",
    ]


def test_no_face_imports_another_face() -> None:
    """The command line, the dashboard and the clients share `awaken_trio._face` (the
    shapes, the failures, the controls table) and import nothing of each other: no cycle,
    and each wraps a runtime call once, there. The command line's ``ui`` command starting
    the dashboard (through ``awaken_trio._ui``'s public names) is the one arrow between
    them."""
    assert {path.name for path in (PACKAGE / "_face").glob("*.py")} >= {
        "shapes.py",
        "failures.py",
        "controls.py",
    }
    found = _face_imports(PACKAGE)
    assert found == [], (
        "a face imports another face; move what they share to awaken_trio/_face: " + str(found)
    )
