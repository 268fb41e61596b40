"""What ``h3cy info FILE.gguf`` says about a GGUF file (headers only, no block decoded):
its header, the block types and their counts, the component its tensor names make it, the
result of mapping the names to the ones h3cy's loader reads (tensors it reads, stored
tensors it leaves unread, tensors it cannot run), and the memory a load takes per weights
mode.

Memory per mode (``weights=``): "auto" runs the file as stored: the quantised blocks are
used in place from the mapping (their pages are the file's, counted at their size), F32
and BF16 matrices in place too, F16 ones widened to float32 once; "int8" given explicitly
also runs the blocks as stored but converts the float matrices to int8; the other modes
dequantise every block at load and convert it (fp32: 4 bytes a weight, BF16 ones in
place; bf16/fp16: 2; int4: ~0.53).  Vectors (norms, biases) are float32 in every mode; a
quantised embedding table stays as stored (only the looked-up rows are decoded).
"""
import os

from .gguf import GGML_TYPES, GGUFFile, PLAIN, READABLE_TYPES, RUNNABLE_TYPES

__all__ = ["gguf_lines", "gguf_memory"]

MODES = ("auto", "fp32", "bf16", "fp16", "int8", "int4")
_FLOAT = ("F32", "F16", "BF16")
_INT4 = 0.53          # bytes per weight of h3cy's int4 (g128 scales), as model_folder
_INT8 = 1.02


def _count(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _is_matrix(name, shape):
    return len(shape) >= 2 and min(shape[:2]) > 1 and "embed_tokens" not in name


def gguf_memory(tensors):
    """``{mode: resident bytes}`` of ``tensors`` (an iterable of
    :class:`h3cy.weights.gguf.GGUFTensorInfo`, what the component reads)."""
    need = dict.fromkeys(MODES, 0)
    for t in tensors:
        n = _count(t.shape)
        if not _is_matrix(t.name, t.shape):
            vec = t.nbytes if t.dtype not in PLAIN else 4 * n   # a quantised table stays as stored
            for m in MODES:
                need[m] += vec
            continue
        stored = t.dtype in RUNNABLE_TYPES
        need["auto"] += t.nbytes if stored or t.dtype in ("F32", "BF16") else \
            (4 * n if t.dtype == "F16" else int(_INT8 * n))
        need["int8"] += t.nbytes if stored else int(_INT8 * n)
        need["fp32"] += t.nbytes if t.dtype in ("F32", "BF16") else 4 * n
        need["bf16"] += t.nbytes if t.dtype == "BF16" else 2 * n
        need["fp16"] += 2 * n
        need["int4"] += int(_INT4 * n)
    return need


def _read_by(component, files_tensors, path):
    """(names the component's loader reads, names it leaves unread, a note on the mapping,
    why the load fails or None); a failed mapping counts every tensor as read."""
    names = list(files_tensors)
    if component == "transformer":
        from .transformer import open_transformer
        from ..errors import CheckpointError
        try:
            ckpt = open_transformer(path)
        except CheckpointError as e:      # unmapped, missing or unsupported tensors: named
            return set(names), set(), None, str(e)
        try:
            read = {e.source for e in ckpt._entries.values()}
            if ckpt.rope_inv_freq is not None:
                read |= {n for n in names if n.endswith("rope.inv_freq")}
        finally:
            ckpt.close()
        return read, set(names) - read, "every tensor the transformer needs is present", None
    if component == "text_encoder":
        from .model_folder import text_encoder_keep
        keep = text_encoder_keep(50)
        read = {n for n in names if keep(n) or n.startswith(("visual.", "model.visual."))}
        return read, set(names) - read, "the language model's layers 0..49 and the embedding " \
                                        "(hidden_states[50]), the vision tower", None
    return set(names), set(), "read by the component's loader", None


def gguf_lines(path, kind):
    """Lines for ``h3cy info FILE.gguf`` after :meth:`FileKind.describe` (``kind``: what
    :func:`h3cy.weights.single_file.detect` found)."""
    from .._memory import available_memory, fmt_bytes
    out = []
    g = GGUFFile(path)
    try:
        size = os.path.getsize(path)
        arch = g.architecture if g.architecture is not None else \
            "none (stable-diffusion.cpp's converter writes no metadata)"
        out.append(f"gguf      : version {g.version}, {len(g.tensors)} tensors, {len(g.metadata)} metadata "
                   f"keys, alignment {g.alignment}, general.architecture {arch}")
        naming = "llama.cpp names mapped back to Comfy names" if g.naming == "llama.cpp" else "as stored"
        out.append(f"names     : {naming}")
        out.append(f"file size : {fmt_bytes(size)} ({size} bytes)")
        by_type = {}
        for t in g.tensors.values():
            c, b = by_type.get(t.dtype, (0, 0))
            by_type[t.dtype] = (c + 1, b + t.nbytes)
        order = {v[0]: k for k, v in GGML_TYPES.items()}
        out.append("types     : " + ", ".join(f"{d} x{c} ({fmt_bytes(b)})" for d, (c, b) in
                                             sorted(by_type.items(), key=lambda kv: order.get(kv[0], 99))))
        stored = {n[len(kind.prefix):]: t for n, t in g.tensors.items() if n.startswith(kind.prefix)}
        read, unread, note, fails = _read_by(kind.component, stored, path)
        if fails is None:
            out.append(f"mapping   : {len(read)} of {len(g.tensors)} tensors read as h3cy's {kind.component} "
                       f"({note})")
        else:
            out.append(f"mapping   : the load FAILS: {fails}")
        skipped = sorted(kind.prefix + n for n in unread) + sorted(n for n in g.tensors
                                                                   if not n.startswith(kind.prefix))
        for n in skipped[:20]:
            out.append(f"  not read: {n} ({g.tensors[n].dtype})")
        if len(skipped) > 20:
            out.append(f"  ... {len(skipped)} not read in all")
        runs = _runs(kind.component)
        bad = sorted((n, stored[n].dtype) for n in read if n in stored and stored[n].dtype not in runs)
        for n, d in bad[:20]:
            out.append(f"  UNSUPPORTED: {kind.prefix + n} is {d}: h3cy has no decoder/GEMM for it; "
                       "loading this file fails")
        if len(bad) > 20:
            out.append(f"  ... {len(bad)} unsupported tensors in all")
        need = gguf_memory(stored[n] for n in read if n in stored)
        room = available_memory()
        out.append(f"memory available to this process: {fmt_bytes(room)}")
        for m in MODES:
            what = {"auto": "as stored: blocks mapped, float tensors float32",
                    "int8": "blocks as stored, float matrices int8"}.get(m, "blocks dequantised and converted")
            fits = room is None or need[m] <= 0.8 * room
            out.append(f"  {m:5s} {fmt_bytes(need[m]):>10s} resident  -> {'fits' if fits else 'stream'}"
                       f"   ({what})")
    finally:
        g.close()
    return out


def _runs(component):
    if component in ("transformer", "text_encoder"):
        return _FLOAT + READABLE_TYPES
    return _FLOAT
