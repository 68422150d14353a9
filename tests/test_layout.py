"""The layout: imports run one way, every module imports on its own, and the package
works installed from a wheel, outside the checkout."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("offload_compiler", "passes")


def _modules() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _imported_names(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).parts[:-1])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.add(".".join(base + ([node.module] if node.module else [])))
            else:
                names.add(node.module or "")
    return names


def test_passes_never_import_offload_compiler():
    for path in sorted((ROOT / "passes").rglob("*.py")):
        bad = {n for n in _imported_names(path) if n.split(".")[0] == "offload_compiler"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_passes_import_alone_without_offload_compiler():
    code = ("import sys, passes, passes.nodes; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'offload_compiler']; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported first in its own interpreter, then all the others in
    reverse order: no import cycle depends on which module comes first."""
    modules = _modules()
    assert "offload_compiler.planning.search" in modules and "passes.nodes" in modules

    def run(first: str) -> tuple[str, str]:
        rest = [m for m in reversed(modules) if m != first]
        code = f"import importlib\nfor m in {[first, *rest]!r}:\n    importlib.import_module(m)\n"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
        return first, proc.stderr.strip().splitlines()[-1] if proc.returncode else ""

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f"{m}: {err}" for m, err in pool.map(run, modules) if err]
    assert not failures, "\n".join(failures)


def test_no_module_is_long():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            assert lines <= 420, f"{path.relative_to(ROOT)} has {lines} lines; split it by concept"


def test_readme_lists_every_module():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):].split("\n## ", 1)[0]
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "__init__.py":
                continue
            folder = path.parent.relative_to(ROOT / package).as_posix()
            assert f"`{path.name}`" in layout, f"README's layout section does not list {path}"
            if folder != ".":
                assert f"`{folder}/`" in layout, f"README's layout section does not name {folder}/"


def test_shipped_code_points_at_no_file_outside_the_repository():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert "DESIGN.md" not in text and "../shared" not in text, path


@pytest.mark.skipif(os.environ.get("OFFLOAD_COMPILER_SKIP_WHEEL") == "1",
                    reason="OFFLOAD_COMPILER_SKIP_WHEEL=1")
def test_wheel_installs_and_compares_outside_the_checkout(tmp_path):
    """Build a wheel, install it into a fresh virtual environment (torch from the
    system's site-packages, so nothing is downloaded), and run the comparison harness
    on the shipped example GPT from a folder outside the checkout."""
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(ROOT)], check=True)
    (wheel,) = dist.glob("offload_compiler-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / "bin" / "python"
    # pip of the running interpreter installs into the new environment's site-packages.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site,
                    str(wheel)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(python), "-c", "import offload_compiler, passes; "
                            "print(offload_compiler.__file__); print(passes.__file__)"],
                           check=True, capture_output=True, text=True, cwd=work, env=env).stdout
    assert all(line.startswith(site) for line in where.split()), where
    proc = subprocess.run(
        [str(python), "-m", "offload_compiler", "compare", "--preset", "tiny", "--device", "cpu",
         "--steps", "1", "--warmup", "0", "--strategies", "inductor,offload:auto",
         "--out", str(work / "out")],
        capture_output=True, text=True, cwd=work, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "offload:auto" in proc.stdout and "inductor" in proc.stdout
    assert (work / "out" / "compare.json").exists()
