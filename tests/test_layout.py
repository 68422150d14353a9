"""The layout: imports run one way, every module imports on its own, and the package
works installed from a wheel, outside the checkout."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import venv
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


#: Run in one interpreter: what the package's modules import from outside it is imported
#: once (listed by a first interpreter that imported them all), then each module is
#: imported first in a child forked from that state, which holds none of the package's
#: own modules: an import cycle among them shows as it would in a fresh interpreter,
#: without starting torch once per module (about 230 s of CI, two workers, before).
_FORKED_IMPORTS = """
import importlib, json, os, sys
modules, packages = json.loads(sys.argv[1]), tuple(json.loads(sys.argv[2]))
ours = lambda name: name.split(".")[0] in packages
for name in json.loads(sys.argv[3]):
    try:
        importlib.import_module(name)
    except Exception:
        pass  # made at run time (a torch.ops namespace, say): the children import it if they need it
for name in [m for m in sys.modules if ours(m)]:
    del sys.modules[name]  # an outside module that imported one of ours: the children start without it
failures = []
for first in modules:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            for m in [first, *[m for m in reversed(modules) if m != first]]:
                importlib.import_module(m)
        except BaseException as e:
            os.write(write, f"{type(e).__name__}: {e}".encode()[:2000])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        err = f.read().decode()
    _, status = os.waitpid(pid, 0)
    if status:
        failures.append(f"{first}: {err or 'exit status %d' % status}")
print(json.dumps(failures))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_module_imports_first_with_none_of_the_package_loaded():
    """Each module imported first (with none of the package's modules imported before
    it), then all the others in reverse order: no import cycle depends on which module
    comes first."""
    import json

    modules = _modules()
    assert "offload_compiler.planning.search" in modules and "passes.nodes" in modules
    listed = subprocess.run(
        [sys.executable, "-c", "import importlib, json, sys\nfor m in json.loads(sys.argv[1]): "
         "importlib.import_module(m)\nprint(json.dumps(sorted(sys.modules)))", json.dumps(modules)],
        capture_output=True, text=True, cwd=ROOT, check=True)
    outside = [m for m in json.loads(listed.stdout) if m.split(".")[0] not in PACKAGES]
    proc = subprocess.run([sys.executable, "-c", _FORKED_IMPORTS, json.dumps(modules), json.dumps(PACKAGES),
                           json.dumps(outside)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
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
