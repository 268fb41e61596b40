"""What a single tensor file holds: which MiniMax-H3 component, under which names, with
which quantised formats — told from its keys, dtypes and per-tensor ``comfy_quant`` blobs
(headers only; no tensor data is read).

ComfyUI users have single files (Comfy-Org's repacks: the DiT, the text encoder, the video
VAE, the audio VAE, each in one ``.safetensors``), not the release's folders. Those files
carry no config.json and no index; their key names are the release's own (``blocks.N.``,
``attn.qkv_proj``, ``mlp.fc1``), sometimes under ComfyUI's ``model.diffusion_model.``
prefix, and their fused QKV rows are stacked ``[q; k; v]`` where the release's shards
interleave them per head.  The tensors cannot tell the two row orders apart, so the kind of
file decides (a single file is stacked) and :func:`detect` says what it assumed.
"""
import os
from dataclasses import dataclass, field

from .comfy_quant import parse_blob
from .files import TensorFiles, checkpoint_error
from .gguf import RUNNABLE_TYPES

__all__ = ["FileKind", "detect", "detect_component", "COMPONENT_SIGNATURES"]

# component -> ((naming, keys that must all be present), ...), tried in order after a prefix
COMPONENT_SIGNATURES = {
    "transformer": (("original", ("video_patch_proj.weight", "audio_patch_proj.weight")),
                    ("diffusers", ("proj_in.weight", "audio_proj_in.weight", "context_embedder.weight"))),
    "text_encoder": (("comfy", ("model.layers.0.self_attn.q_proj.weight",)),
                     ("transformers", ("model.language_model.layers.0.self_attn.q_proj.weight",))),
    "video_vae": (("original", ("decoder.x_embedder.weight",)),
                  ("diffusers", ("decoder.proj_in.weight",))),
    "audio_vae": (("diffusers", ("dec_in_proj.weight", "decoder.conv_pre.weight_v")),
                  ("folded", ("dec_in_proj.weight", "decoder.conv_pre.weight"))),
}
# key prefixes other tools put in front of a component's names (ComfyUI's model wrapper)
PREFIXES = ("", "model.diffusion_model.", "diffusion_model.")
QUANT_SUFFIX = ".comfy_quant"
FLOAT_DTYPES = ("F32", "BF16", "F16")


@dataclass
class FileKind:
    """What :func:`detect` found in one file.

    Attributes
    ----------
    path : str
    component : str         "transformer", "text_encoder", "video_vae" or "audio_vae"
    naming : str            whose tensor names: "original" (the release's and Comfy-Org's),
                            "diffusers", "comfy", "transformers"
    prefix : str            stripped from every name ("" or "model.diffusion_model.", ...)
    qkv_layout : str|None   the transformer's fused QKV rows: "stacked" for a single file
    adaln : str|None        the transformer's modulation: "full" (time embedder + AdaLN
                            projections) or "curve" (the pruned ``adaln_t_table`` form)
    quant : dict            quantised format -> number of tensors (``comfy_quant`` blobs,
                            integer/fp8 weights); empty for a float file
    dtypes : dict           stored dtype -> number of tensors
    assumed : list of str   what could not be read from the file and was assumed
    """
    path: str
    component: str
    naming: str
    prefix: str = ""
    qkv_layout: str = None
    adaln: str = None
    quant: dict = field(default_factory=dict)
    dtypes: dict = field(default_factory=dict)
    quant_tensors: dict = field(default_factory=dict)   # layer name -> its format
    assumed: list = field(default_factory=list)

    @property
    def quantised(self):
        return bool(self.quant)

    def describe(self):
        """Lines for ``h3cy info FILE``."""
        out = [f"file      : {self.path}",
               f"component : {self.component} ({self.naming} tensor names"
               + (f", prefix {self.prefix!r})" if self.prefix else ")")]
        if self.adaln is not None:
            out.append(f"adaln     : {'pruned curve form (adaln_t_table)' if self.adaln == 'curve' else 'full'}")
        if self.qkv_layout is not None:
            out.append(f"qkv rows  : {self.qkv_layout}")
        out.append("dtypes    : " + ", ".join(f"{k} x{v}" for k, v in sorted(self.dtypes.items())))
        out.append("quantised : " + (", ".join(f"{k} x{v}" for k, v in sorted(self.quant.items()))
                                     if self.quant else "none (float tensors)"))
        out += [f"assumed   : {a}" for a in self.assumed]
        return out


# quantised formats (as detect labels them) a loader can run as stored (weights.comfy_quant)
RUNNABLE_QUANT = ("int8_tensorwise", "int8_tensorwise+convrot")
# what each component's loader reads: the int8 formats as stored; the text encoder NVFP4 too
# (run as stored on the NVFP4 GEMM: csrc/gemm_nvfp4.c)
# GGUF files (weights.gguf): the block types h3cy's GGUF GEMM runs as stored
GGUF_QUANT = RUNNABLE_TYPES
COMPONENT_QUANT = {"transformer": RUNNABLE_QUANT + GGUF_QUANT,
                   "text_encoder": RUNNABLE_QUANT + ("nvfp4",) + GGUF_QUANT,
                   "video_vae": RUNNABLE_QUANT, "audio_vae": ()}


def detect_component(path, component, files=None, quantised_ok=lambda layer: False, runs=None):
    """:func:`detect`, then the checks every loader of a single file makes: the file holds
    ``component`` (CheckpointError naming what it holds instead) and no quantised tensor
    h3cy cannot run yet (``quantised_ok(layer)`` lets a loader ignore layers it never reads,
    like the video VAE's encoder; ``runs``: the formats the loader reads, by default
    :data:`COMPONENT_QUANT` of the component)."""
    runs = COMPONENT_QUANT.get(component, ()) if runs is None else runs
    kind = detect(path, files)
    if kind.component != component:
        raise checkpoint_error(path, None, f"this file holds the {kind.component}, not the {component}")
    blocked = sorted(layer for layer, fmt in kind.quant_tensors.items()
                     if fmt not in runs and not quantised_ok(layer))
    if blocked:
        fmts = sorted({kind.quant_tensors[b] for b in blocked})
        raise checkpoint_error(path, blocked[0], f"quantised tensors ({', '.join(fmts)}) are not "
                               "supported yet; h3cy reads float (F32/BF16/F16) single files"
                               + (f" and {', '.join(runs)}" if runs else ""))
    return kind


def _quant_format(files, name):
    """The format a ``<layer>.comfy_quant`` blob names (UTF-8 JSON in a U8 tensor; a
    malformed blob is a CheckpointError naming it: weights.comfy_quant.parse_blob)."""
    spec = parse_blob(files.get(name, dtypes=("U8", "I8")), files.path_of(name), name)
    return spec.format + ("+convrot" if spec.convrot else "")


def detect(path, files=None):
    """Tell what a single tensor file holds (headers only).

    Parameters
    ----------
    path : str or os.PathLike
    files : TensorFiles, optional — the file already open (not closed here)

    Returns
    -------
    FileKind

    Raises
    ------
    CheckpointError
        The file cannot be read, or holds no MiniMax-H3 component h3cy knows (the message
        lists the keys it looked for).
    """
    path = os.fspath(path)
    own = files is None
    if own:
        files = TensorFiles([path])
    try:
        names = set(files.names())
        found = None
        for prefix in PREFIXES:
            for component, signatures in COMPONENT_SIGNATURES.items():
                for naming, keys in signatures:
                    if all(prefix + k in names for k in keys):
                        found = (component, naming, prefix)
                        break
                if found:
                    break
            if found:
                break
        if found is None:
            looked = "; ".join(f"{c}: {' + '.join(k)}" for c, sigs in COMPONENT_SIGNATURES.items()
                               for _, k in sigs)
            raise checkpoint_error(path, None, "not a MiniMax-H3 component h3cy knows: none of the "
                                   f"expected tensor names ({looked}) is present")
        component, naming, prefix = found
        kind = FileKind(path, component, naming, prefix)
        for n in names:
            if not n.startswith(prefix):
                continue
            dt = files.info(n).dtype
            kind.dtypes[dt] = kind.dtypes.get(dt, 0) + 1
            if n.endswith(QUANT_SUFFIX):
                fmt = _quant_format(files, n)
                kind.quant[fmt] = kind.quant.get(fmt, 0) + 1
                kind.quant_tensors[n[len(prefix):-len(QUANT_SUFFIX)]] = fmt
        for n in names:      # integer / fp8 weights without a blob still are quantised tensors
            if n.startswith(prefix) and n.endswith(".weight"):
                dt = files.info(n).dtype
                layer = n[len(prefix):-len(".weight")]
                if dt not in FLOAT_DTYPES and layer not in kind.quant_tensors:
                    kind.quant_tensors[layer] = dt
                    kind.quant[dt] = kind.quant.get(dt, 0) + 1
        if component == "transformer":
            kind.adaln = "curve" if prefix + "adaln_t_table" in names else "full"
            if naming == "original":
                kind.qkv_layout = "stacked"
                kind.assumed.append("fused attn.qkv_proj rows stacked [q; k; v] (a single file; the "
                                    "release's sharded folders interleave them per head)")
            kind.assumed.append("configuration inferred from the tensor shapes; norm eps, RoPE theta "
                                "and patch size from the released configuration")
        return kind
    finally:
        if own:
            files.close()
