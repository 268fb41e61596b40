"""Find the five components of a MiniMax-H3 model on disk, in either layout, and size them.

Accepted folders:

- the official repository root, which holds ``FL2VA/`` (and ``Ref2VA/``, unused by t2va);
- an ``FL2VA/`` folder: ``transformer/ text_encoder/ tokenizer/ video_vae/ audio_vae/``;
- a diffusers-layout folder (``model_index.json``): ``transformer/ text_encoder/ tokenizer/
  vae/ audio_vae/``.

Nothing is loaded here: only file names, configs and safetensors headers are read, so
``h3cy info`` on a 70 GB checkpoint is instant.
"""
import json
import os
from dataclasses import dataclass, field

from ..errors import CheckpointError
from .files import open_tensor_file, weight_suffixes

__all__ = ["ModelFolder", "find_model", "COMPONENTS", "BYTES_PER_PARAM", "folder_tensors"]

# component -> subfolder name in each layout
COMPONENTS = ("text_encoder", "tokenizer", "transformer", "video_vae", "audio_vae")
_SUBDIRS = {
    "release": {"text_encoder": "text_encoder", "tokenizer": "tokenizer", "transformer": "transformer",
                "video_vae": "video_vae", "audio_vae": "audio_vae"},
    "diffusers": {"text_encoder": "text_encoder", "tokenizer": "tokenizer", "transformer": "transformer",
                  "video_vae": "vae", "audio_vae": "audio_vae"},
}
# resident bytes per parameter of a weight matrix in each weights mode (int modes carry one
# float32 scale per row or per group: ~1.5% for int8, ~6% for int4 g128)
BYTES_PER_PARAM = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.02, "int4": 0.53}
_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I8": 1, "U8": 1,
                "BOOL": 1, "I16": 2, "U16": 2}


def _add_gguf_types():
    """A GGUF file's block types, in bytes per value (Q4_K: 144 / 256)."""
    from .gguf import GGML_TYPES
    for name, blk, nb in GGML_TYPES.values():
        _DTYPE_BYTES.setdefault(name, nb / blk)


_add_gguf_types()


def _is_tokenizer(d):
    return (os.path.isfile(os.path.join(d, "tokenizer.json"))
            or (os.path.isfile(os.path.join(d, "vocab.json")) and os.path.isfile(os.path.join(d, "merges.txt"))))


def _has_weights(d):
    """Any readable tensor file (weights.files.weight_suffixes) in ``d`` or in its
    ``source/`` (the release video VAE keeps its weights in ``video_vae/source/``)."""
    suffixes = weight_suffixes()
    for sub in (d, os.path.join(d, "source")):
        try:
            if any(n.endswith(suffixes) for n in os.listdir(sub)):
                return True
        except OSError:
            pass
    return False


def folder_tensors(folder, keep=None):
    """``{name: (dtype, shape)}`` from the header of every tensor file in ``folder`` (and its
    ``source/``); the data is never read.  ``keep(name) -> bool`` filters."""
    out = {}
    src = os.path.join(folder, "source")
    paths = [folder] if os.path.isfile(folder) else [
        os.path.join(d, n) for d in (folder, src) if os.path.isdir(d)
        for n in sorted(os.listdir(d)) if n.endswith(weight_suffixes())]
    for path in paths:
        f = open_tensor_file(path)
        try:
            for name, t in f.tensors.items():
                if keep is None or keep(name):
                    out[name] = (t.dtype, tuple(t.shape))
        finally:
            f.close()
    return out


def text_encoder_keep(output_layer=50):
    def keep(name):
        if "embed_tokens" in name:
            return True
        parts = name.split(".")
        if "layers" in parts and ("language_model" in parts or parts[:2] == ["model", "layers"]):
            i = parts.index("layers")
            return i + 1 < len(parts) and parts[i + 1].isdigit() and int(parts[i + 1]) < output_layer
        return False
    return keep


def _decoder_keep(name):
    return not name.startswith("encoder.") and not name.startswith("quant_conv.") \
        and ".encoder." not in name


def tensor_sizes(tensors):
    """``{"params", "bytes_on_disk", "dtypes", "matrix_params", "matrix_bytes_on_disk"}`` of
    ``{name: (dtype, shape)}`` (what :func:`folder_tensors` returns)."""
    params = disk = matrix = matrix_disk = 0
    dtypes = {}
    for name, (dt, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        params += n
        disk += int(n * _DTYPE_BYTES.get(dt, 4))
        dtypes[dt] = dtypes.get(dt, 0) + n
        if len(shape) >= 2 and "embed_tokens" not in name and min(shape[:2]) > 1:
            matrix += n
            matrix_disk += int(n * _DTYPE_BYTES.get(dt, 4))
    return {"params": params, "bytes_on_disk": disk, "dtypes": dtypes, "matrix_params": matrix,
            "matrix_bytes_on_disk": matrix_disk}


def component_sizes(path, component, output_layer=50):
    """:func:`tensor_sizes` of what ``component`` reads from ``path`` (a folder or a single
    file): the text encoder's layers below ``output_layer`` and its embeddings, the VAEs'
    decoders, everything of the transformer.  Headers only."""
    keep = text_encoder_keep(output_layer) if component == "text_encoder" else (
        _decoder_keep if component in ("video_vae", "audio_vae") else None)
    return tensor_sizes(folder_tensors(path, keep))


def resident_bytes(s, component, weights):
    """Approximate resident bytes of a component of sizes ``s`` (:func:`tensor_sizes`)
    loaded in weights mode ``weights``: matrices in that mode, everything else float32
    (the text encoder's embedding table stays bf16)."""
    other = s["params"] - s["matrix_params"]
    per_other = 2.0 if component == "text_encoder" else 4.0
    if component in ("transformer", "text_encoder") and weights in ("fp32", "bf16"):
        # the DiT and the text encoder multiply bf16/fp32 checkpoint tensors in place in
        # both modes (fp32 widens bf16 inside the kernel, h3cy.weights.linears): the matrices
        # cost what they cost on disk (bf16 mode over a float32 checkpoint converts: 2 bytes)
        disk = s.get("matrix_bytes_on_disk", s["matrix_params"] * 2)
        mat = disk if weights == "fp32" else min(disk, s["matrix_params"] * 2)
        return int(mat + other * per_other)
    return int(s["matrix_params"] * BYTES_PER_PARAM[weights] + other * per_other)


@dataclass
class ModelFolder:
    """Where each component of a model lives.  ``paths[c]`` is None when ``c`` is missing."""
    root: str
    layout: str                       # "release" or "diffusers"
    paths: dict = field(default_factory=dict)
    _sizes: dict = field(default=None, repr=False, compare=False)

    @property
    def missing(self):
        return [c for c in COMPONENTS if self.paths.get(c) is None]

    def require(self, components=COMPONENTS):
        miss = [c for c in components if self.paths.get(c) is None]
        if miss and self.layout == "files":
            raise CheckpointError(f"missing component(s) {', '.join(miss)}: give a model folder or "
                                  + ", ".join(f"{c}=FILE" for c in miss))
        if miss:
            sub = _SUBDIRS[self.layout]
            raise CheckpointError(
                f"{self.root}: missing component(s) {', '.join(miss)} (expected folder(s) "
                + ", ".join(f"{sub[c]}/" for c in miss) + f" in the {self.layout} layout)")
        return self

    def sizes(self):
        """Per component: ``{"params": n, "bytes_on_disk": b, "dtypes": {...}, "matrix_params": m,
        "matrix_bytes_on_disk": mb}``
        counting only what t2va reads (text layers 0..49 + embeddings; VAE decoders).
        The headers are read once per ModelFolder (``info`` asks for every mode)."""
        if self._sizes is None:
            self._sizes = self._read_sizes()
        return self._sizes

    def _read_sizes(self):
        out = {}
        for c in ("text_encoder", "transformer", "video_vae", "audio_vae"):
            p = self.paths.get(c)
            if p is None:
                continue
            out[c] = component_sizes(p, c)
        return out

    def resident_bytes(self, component, weights):
        """Approximate resident bytes of ``component`` loaded in weights mode ``weights``
        (matrices in that mode, everything else float32; the embedding table stays bf16)."""
        s = self.sizes().get(component)
        return 0 if s is None else resident_bytes(s, component, weights)


def _component_ok(c, d):
    if not os.path.isdir(d):
        return False
    if c == "tokenizer":
        return _is_tokenizer(d)
    return os.path.isfile(os.path.join(d, "config.json")) and _has_weights(d)


def find_model(path):
    """Detect the layout of ``path`` and locate its components (missing ones are None).

    Raises CheckpointError when ``path`` is not a folder or looks like no MiniMax-H3 layout.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such model folder")
    root = path
    if os.path.isdir(os.path.join(path, "FL2VA")):
        root = os.path.join(path, "FL2VA")
    layout = None
    index = os.path.join(root, "model_index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                mi = json.load(f)
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{index}: not valid JSON ({e})") from None
        if isinstance(mi, dict):
            layout = "diffusers" if "vae" in mi else ("release" if "video_vae" in mi else None)
    if layout is None:
        if os.path.isdir(os.path.join(root, "video_vae")):
            layout = "release"
        elif os.path.isdir(os.path.join(root, "vae")):
            layout = "diffusers"
        else:
            raise CheckpointError(
                f"{path}: not a MiniMax-H3 model folder (expected FL2VA/, or transformer/ with "
                "video_vae/ (release layout) or vae/ (diffusers layout))")
    paths = {}
    for c, sub in _SUBDIRS[layout].items():
        d = os.path.join(root, sub)
        paths[c] = d if _component_ok(c, d) else None
    # the release keeps the tokenizer beside the text encoder; a diffusers folder may put the
    # tokenizer files inside text_encoder/
    if paths["tokenizer"] is None and paths["text_encoder"] and _is_tokenizer(paths["text_encoder"]):
        paths["tokenizer"] = paths["text_encoder"]
    return ModelFolder(root=root, layout=layout, paths=paths)


def with_component_files(model=None, **files):
    """Where each component lives when the user names files: a model folder (``model``, or
    None) with each component given in ``files`` (a folder or a single file, e.g. Comfy-Org's
    ``.safetensors``) taking the folder's place.  The folder's layout names the result; with
    no folder it is "files".  CheckpointError when a named path does not exist."""
    unknown = set(files) - set(COMPONENTS)
    if unknown:
        raise CheckpointError(f"unknown component(s) {', '.join(sorted(unknown))} (known: {', '.join(COMPONENTS)})")
    given = {c: os.fspath(p) for c, p in files.items() if p is not None}
    for c, p in given.items():
        if not os.path.exists(p):
            raise CheckpointError(f"{p}: no such {c} file or folder")
    if model is not None:
        mf = find_model(model)
    elif given:
        root = os.path.dirname(os.path.abspath(next(iter(given.values()))))
        mf = ModelFolder(root=root, layout="files", paths={c: None for c in COMPONENTS})
    else:
        raise CheckpointError("no model: give a model folder or a file per component")
    mf.paths.update(given)
    return mf
