"""h3cy stands alone: what it and its tests need is inside the repository and inside a
built wheel.

- A copy of the repository with nothing beside it runs the tokenizer-dependent tests (the
  released tokenizer files are package data, h3cy/data/tokenizer).
- A wheel built from the tree and installed, not editable, into a fresh virtual
  environment carries the tokenizer files and runs ``h3cy selfcheck`` and ``h3cy demo``
  (an editable install reads the source tree, so it would hide a missing package-data
  entry).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
# what a clone has that a copy must leave behind (build products of this checkout, caches)
_NOT_COPIED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".benchmarks", "_cbuild", ".venv")


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    return r


def test_no_source_reads_a_folder_beside_the_repository():
    """No source, test, bench, doc or CI file names a path into the "shared" folder that lies
    beside the checkout in the workplace (a clone does not have it): the pattern is built
    from its parts so that this file does not name it either."""
    up, name = re.escape(".."), "shared"
    pattern = re.compile(up + "/" + name + r"""|["']\.\.["']\s*,\s*["']\.\.["']\s*,\s*["']""" + name + """["']""")
    hits = []
    for top in ("h3cy", "pyx", "csrc", "tests", "bench", "docs", "comfyui_h3", "examples", ".ci"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d not in ("data", "__pycache__", "_cbuild")]
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not name.endswith((".py", ".pyx", ".pxi", ".c", ".h", ".inc", ".md", ".sh",
                                                    ".toml", ".cfg", ".txt", "run")):
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        if pattern.search(line):
                            hits.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}")
    for name in ("setup.py", "pyproject.toml", "README.md"):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            hits += [f"{name}: {line.strip()}" for line in f if pattern.search(line)]
    assert not hits, "\n".join(hits)


def test_tokenizer_tests_pass_in_a_copy_with_nothing_beside_it(tmp_path):
    """The repository (with this checkout's built extension) copied into an empty folder:
    the tokenizer tests and the text encoder's prompt test pass from there, importing the
    copy's h3cy."""
    copy = tmp_path / "alone" / "h3cy"
    shutil.copytree(ROOT, copy, ignore=_NOT_COPIED)
    assert not (tmp_path / "alone" / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(copy)
    r = _run([sys.executable, "-c", "import h3cy, h3cy.models.tokenizer as t; print(h3cy.__file__); "
              "print(t.Tokenizer.default().encode('a red fox'))"], cwd=copy, env=env)
    assert r.stdout.splitlines()[0].startswith(str(copy)), r.stdout
    r = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_tokenizer.py",
              "tests/test_text_encoder.py", "-k", "tokenizer or test_encode_prompt"], cwd=copy, env=env,
             timeout=900)
    assert re.search(r"\b\d+ passed", r.stdout) and " failed" not in r.stdout, r.stdout[-2000:]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A wheel of this tree (built as pip builds it), installed with --no-deps into a fresh venv that
    sees the dependencies already installed (--system-site-packages): h3cy itself comes
    from the wheel."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks", "_cbuild",
        ".venv", "*.so"))
    # with build isolation, as a user's pip builds it (a fresh venv may have no Cython)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"), str(src)],
         timeout=1800)
    wheels = [f for f in os.listdir(root / "dist") if f.endswith(".whl")]
    assert len(wheels) == 1, wheels
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py = str(venv / "bin" / "python")
    if sys.prefix != sys.base_prefix:
        # run from a venv: --system-site-packages reaches the base Python's packages, not this
        # venv's, where the dependencies are; a .pth appends them (after the wheel's h3cy)
        import site
        purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(purelib, "_h3cy_test_outer_site.pth"), "w") as f:
            f.write("\n".join(site.getsitepackages()) + "\n")
    _run([py, "-m", "pip", "install", "--no-deps", "-q", str(root / "dist" / wheels[0])], timeout=600)
    return venv


def test_wheel_carries_the_tokenizer_and_runs_the_cli(wheel_venv, tmp_path):
    py = str(wheel_venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONPATH"))}
    env["HOME"] = str(tmp_path)                       # the demo model's cache goes here
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    code = ("import os, h3cy, h3cy.models.tokenizer as t; print(os.path.dirname(h3cy.__file__)); "
            "print(sorted(os.listdir(t.DEFAULT_FOLDER))); print(t.Tokenizer.default().encode('a red fox'))")
    r = _run([py, "-c", code], cwd=tmp_path, env=env)
    where, files, ids = r.stdout.splitlines()[:3]
    assert where.startswith(str(wheel_venv)), f"h3cy imported from {where}, not the wheel"
    assert all(f in files for f in TOKENIZER_FILES), files
    assert ids.startswith("[") and len(eval(ids)) >= 3
    h3cy_cli = str(wheel_venv / "bin" / "h3cy")
    r = _run([h3cy_cli, "selfcheck", "--threads", "2"], cwd=tmp_path, env=env, timeout=600)
    assert "selfcheck: ok" in r.stdout, r.stdout
    out = tmp_path / "demo.mp4"
    _run([h3cy_cli, "demo", "-o", str(out)], cwd=tmp_path, env=env, timeout=900)
    assert out.exists() and out.stat().st_size > 1000


def test_wheel_carries_the_demo_model(wheel_venv, tmp_path):
    """Every file of h3cy/data/demo-model (the trained demo model's FL2VA/ once exported, and
    its SOURCE.md) is in the installed wheel, and the wheel's h3cy finds the model."""
    src = os.path.join(ROOT, "h3cy", "data", "demo-model")
    want = sorted(os.path.relpath(os.path.join(d, n), src) for d, _, ns in os.walk(src) for n in ns
                  if "__pycache__" not in d)
    assert "SOURCE.md" in want
    py = str(wheel_venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONPATH"))}
    code = ("import os, h3cy.demo as d; r = d.TRAINED_FOLDER; print(r); print(d.trained_model()); "
            "print(sorted(os.path.relpath(os.path.join(a, n), r) for a, _, ns in os.walk(r) for n in ns))")
    r = _run([py, "-c", code], cwd=tmp_path, env=env)
    where, found, files = r.stdout.splitlines()[:3]
    assert where.startswith(str(wheel_venv)), where
    assert eval(files) == want
    trained = os.path.isfile(os.path.join(src, "FL2VA", "model_index.json"))
    assert (found != "None") == trained, (found, trained)
