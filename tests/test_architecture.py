"""The package's shape: imports run one way (ops/weights -> models/sampling -> pipeline ->
cli), no import cycle, no module imports another's private names, and each public load
resolves its weights mode, kernel path and thread pool once and hands them down."""
import ast
import os

import numpy as np

import h3cy

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "h3cy")

# layer of each top-level part of h3cy (a module may import its own layer and those below)
LAYERS = {"errors": 0, "_config": 0, "_kernels": 0, "_progress": 0, "_memory": 0, "_version": 0, "ops": 1,
          "weights": 2, "images": 2, "models": 3, "taeh3": 3, "tuning": 3, "sampling": 4, "presets": 4, "preview": 4, "pipeline": 5,
          "result": 5, "media": 5, "keyframes": 5, "demo": 6, "batch": 6, "cli": 7, "__main__": 8, "__init__": 9}


def _modules():
    """{dotted module under h3cy: path}"""
    out = {}
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "data")]
        for name in filenames:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), PKG)[:-3].replace(os.sep, ".")
                out[rel] = os.path.join(dirpath, name)
    return out


def _imports(mod, path):
    """[(imported h3cy module, imported name or None, line)] of every import in the file
    (function-local ones too)."""
    pkg = mod.split(".")[:-1]       # the package the file is in ("" for h3cy itself)
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("h3cy"):
                target = node.module[len("h3cy."):] if node.module != "h3cy" else ""
            else:
                continue
            for a in node.names:
                out.append((target, a.name, node.lineno))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("h3cy."):
                    out.append((a.name[len("h3cy."):], None, node.lineno))
    return out


def _top(dotted):
    return dotted.split(".")[0] if dotted else "__init__"


def test_imports_run_one_way():
    mods = _modules()
    bad = []
    for mod, path in mods.items():
        me = LAYERS[_top(mod)]
        for target, name, line in _imports(mod, path):
            # "from h3cy import x" / "from .pkg import x" naming a module: x's layer counts
            dest = f"{target}.{name}".lstrip(".") if not target or f"{target}.{name}" in mods else target
            if LAYERS.get(_top(dest), 0) > me:
                bad.append(f"h3cy/{mod.replace('.', '/')}.py:{line} ({_top(mod)}) imports {dest}")
    assert not bad, "\n".join(bad)


def test_no_module_imports_anothers_private_names():
    mods = _modules()
    bad = []
    for mod, path in mods.items():
        for target, name, line in _imports(mod, path):
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            as_module = f"{target}.{name}".lstrip(".")
            if as_module in mods or name == "_kernels":
                continue        # a (private) module, not a private name inside one
            bad.append(f"h3cy/{mod.replace('.', '/')}.py:{line} imports {name} from {target or 'h3cy'}")
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    mods = _modules()
    graph = {m: set() for m in mods}
    for mod, path in mods.items():
        for target, name, _ in _imports(mod, path):
            for cand in (f"{target}.{name}" if name else None, target, f"{target}.__init__"):
                if cand is not None and cand.lstrip(".") in mods and cand.lstrip(".") != mod:
                    graph[mod].add(cand.lstrip("."))
                    break
    # a package's __init__ importing its own submodules is how packages work: only count
    # edges from a submodule back to a package __init__ above it as part of a cycle
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(graph[m]):
            if n.endswith("__init__") and m.startswith(n[: -len("__init__")]):
                continue
            visit(n)
        stack.pop()
    for m in sorted(graph):
        visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_each_load_resolves_its_context_once(tiny_dit_factory, tiny_te, tiny_vae, monkeypatch):
    """Compute.resolve runs once per from_pretrained, and every layer of the model runs on
    the model's own pool (not a shared one) and its path."""
    calls = []
    real = h3cy.ops.Compute.resolve.__func__

    def counting(cls, *a, **k):
        calls.append(a)
        return real(cls, *a, **k)
    monkeypatch.setattr(h3cy.ops.Compute, "resolve", classmethod(counting))
    shared = h3cy.ops.Linear(np.ones((2, 2), np.float32), weights="fp32", threads=2)._pool

    t = tiny_dit_factory("a")
    for streaming in (False, True):
        calls.clear()
        dit = h3cy.DiT.from_pretrained(t.original, weights="int8", threads=2, streaming=streaming)
        assert len(calls) == 1, calls
        pool = dit.compute.pool
        assert pool is not shared and dit._pool is pool and dit.isa == dit.compute.isa
        for blk in dit._iter_blocks():
            assert blk.core.pool is pool and blk.qkv._pool is pool and blk.down._pool is pool
        assert dit.proj_in._pool is pool and dit._attn._pool is pool
        assert dit.loop_binding([0.5], np.zeros((3, t.config["text_dim"]), np.float32),
                                np.zeros((4, 3), np.float32)).pool is pool
        dit.close()

    calls.clear()
    enc = h3cy.TextEncoder.from_pretrained(tiny_te, weights="int8", threads=2)
    assert len(calls) == 1 and enc.compute.pool is not shared
    assert all(layer.core.pool is enc.compute.pool for layer in enc.layers)

    calls.clear()
    vdec = h3cy.VideoDecoder.from_pretrained(tiny_vae.diffusers, weights="int8", threads=2)
    assert len(calls) == 1 and all(b.core.pool is vdec.compute.pool for b in vdec.blocks)

    calls.clear()
    venc = h3cy.VideoEncoder.from_pretrained(tiny_vae.diffusers, threads=2)
    assert len(calls) == 1 and venc._pool is venc.compute.pool and venc._pool is not shared
    for res, down in venc.levels:
        for r in res:
            assert all(t.pool is venc._pool for t in r.conv1.taps + r.conv2.taps) and r.norm1.pool is venc._pool

    import _tiny_audio_vae
    calls.clear()
    _, folders = _tiny_audio_vae.build("a", str(tiny_vae.diffusers) + "_audio")
    adec = h3cy.AudioDecoder.from_pretrained(folders["diffusers"], weights="int8", threads=2)
    assert len(calls) == 1 and adec._pool is adec.compute.pool and adec._pool is not shared
