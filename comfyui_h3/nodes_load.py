"""H3 Model Loader: find MiniMax-H3 models in ComfyUI's model folders, open them with h3cy,
and keep one loaded pipeline cached by (paths, mode).

Where models are looked for (each becomes one entry of the loader's ``model`` list):

- ``models/h3/<name>/`` — a model folder in either layout h3cy reads: the official release
  (``<name>/FL2VA/...`` or the ``FL2VA`` folder itself) or diffusers (``model_index.json`` +
  ``transformer/ text_encoder/ tokenizer/ vae/ audio_vae/``).  Listed as ``<name>``.
- the same whole-model folders placed in ``models/diffusion_models/``, listed as
  ``diffusion_models/<name>``.
- Comfy-style split components sharing one ``<name>``: ``models/diffusion_models/<name>/``
  (the transformer folder: ``config.json`` + ``*.safetensors``), ``models/text_encoders/<name>/``
  (the text encoder, with its tokenizer files inside or in a ``tokenizer/`` subfolder) and
  ``models/vae/<name>/`` holding ``video_vae/`` and ``audio_vae/``.  Listed as
  ``split/<name>``; h3cy opens them through a release-layout folder of symlinks that the
  pack assembles under h3cy's cache directory.
"""
import json
import os
import threading

import folder_paths

from . import _h3

H3_FOLDER = "h3"
WEIGHT_MODES = ["auto", "int8", "int4", "bf16", "fp16", "fp32"]
STREAMING = {"auto": "auto", "on": True, "off": False}
NO_MODEL = "(no MiniMax-H3 model found: put one in models/h3/)"


def register_folder():
    """Register ``models/h3`` with ComfyUI (idempotent; extra_model_paths.yaml may add more),
    and ComfyUI-GGUF's ``unet_gguf`` / ``clip_gguf`` keys (:func:`register_gguf_folders`)."""
    folder_paths.add_model_folder_path(H3_FOLDER, os.path.join(folder_paths.models_dir, H3_FOLDER))
    register_gguf_folders()


# ComfyUI-GGUF's folder keys (city96/ComfyUI-GGUF, nodes.py): "unet_gguf" over the diffusion
# models' folders and "clip_gguf" over the text encoders', each listing .gguf files.
# ComfyUI folder -> (key, the folders it takes its paths from, first present)
GGUF_FOLDERS = {"diffusion_models": ("unet_gguf", ("diffusion_models", "unet")),
                "text_encoders": ("clip_gguf", ("text_encoders", "clip"))}


def register_gguf_folders():
    """Register ``unet_gguf`` and ``clip_gguf`` as ComfyUI-GGUF does, when they are absent
    (ComfyUI-GGUF not installed, or imported after this package): the base folder's list of
    paths itself (shared, so a path added to one later shows in both) with the ``.gguf``
    extension.  Keys already present (ComfyUI-GGUF's, or extra_model_paths.yaml's) are left
    as they are; either way the files loader lists them."""
    table = folder_paths.folder_names_and_paths
    for key, targets in GGUF_FOLDERS.values():
        if key in table:
            continue
        target = next((t for t in targets if t in table), None)
        if target is not None:
            table[key] = (table[target][0], {GGUF_SUFFIX})


def _paths(name):
    try:
        return [p for p in folder_paths.get_folder_paths(name) if os.path.isdir(p)]
    except KeyError:
        return []


def _subdirs(base):
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [(n, os.path.join(base, n)) for n in names
            if not n.startswith(".") and os.path.isdir(os.path.join(base, n))]


def _is_model_folder(path):
    """A whole model (either layout) with every component present."""
    h3cy = _h3.h3cy
    if h3cy is None:
        return os.path.isdir(os.path.join(path, "FL2VA")) or os.path.isfile(os.path.join(path, "model_index.json"))
    try:
        return not h3cy.find_model(path).missing
    except (h3cy.CheckpointError, OSError):
        return False


def _has_config(path):
    return os.path.isfile(os.path.join(path, "config.json")) and any(
        n.endswith(".safetensors") for n in os.listdir(path))


def _looks_like_transformer(path):
    if not _has_config(path):
        return False
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and ("MiniMaxH3" in str(cfg.get("_class_name", ""))
                                      or "audio_latents_dim" in cfg or "audio_in_channels" in cfg)


def _split_components(name):
    """The component folders of a Comfy-style split model ``name``, or None if incomplete."""
    def first(kind, test):
        for base in _paths(kind):
            p = os.path.join(base, name)
            if os.path.isdir(p) and test(p):
                return p
        return None
    dit = first("diffusion_models", _looks_like_transformer)
    te = first("text_encoders", _has_config)
    vae = first("vae", lambda p: os.path.isdir(os.path.join(p, "video_vae")) and os.path.isdir(os.path.join(p, "audio_vae")))
    if dit is None or te is None or vae is None:
        return None
    tok = os.path.join(te, "tokenizer") if os.path.isdir(os.path.join(te, "tokenizer")) else te
    return {"transformer": dit, "text_encoder": te, "tokenizer": tok,
            "video_vae": os.path.join(vae, "video_vae"), "audio_vae": os.path.join(vae, "audio_vae")}


def list_models():
    """``{label: source}`` where source is a folder path, or a dict of split components."""
    found = {}
    for base in _paths(H3_FOLDER):
        if _is_model_folder(base):
            found.setdefault(os.path.basename(os.path.normpath(base)), base)
        for n, p in _subdirs(base):
            if _is_model_folder(p):
                found.setdefault(n, p)
    for base in _paths("diffusion_models"):
        for n, p in _subdirs(base):
            if _is_model_folder(p):
                found.setdefault(f"diffusion_models/{n}", p)
            else:
                comps = _split_components(n)
                if comps is not None:
                    found.setdefault(f"split/{n}", comps)
    return found


def model_options():
    names = sorted(list_models())
    return names if names else [NO_MODEL]


def _assemble(name, comps):
    """A release-layout folder of symlinks for split components (rebuilt if they moved)."""
    h3cy = _h3.require()
    root = os.path.join(h3cy.cache_dir(), "comfyui-split", name.replace("/", "_"))
    fl = os.path.join(root, "FL2VA")
    os.makedirs(fl, exist_ok=True)
    for comp, target in comps.items():
        link = os.path.join(fl, comp)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link, target_is_directory=True)
    h3cy.weights.model_folder.find_model(root).require()
    return root


def resolve(model):
    """The folder h3cy.load should open for a ``model`` list entry."""
    if model == NO_MODEL:
        raise FileNotFoundError(
            "No MiniMax-H3 model was found. Put the model folder (the official release with FL2VA/, "
            f"or a diffusers-layout folder) into one of {_paths(H3_FOLDER) or ['ComfyUI/models/h3']} "
            "and refresh (press R) — see comfyui_h3/README.md.")
    found = list_models()
    if model not in found:
        raise FileNotFoundError(f"MiniMax-H3 model {model!r} is not in ComfyUI's model folders "
                                f"(found: {sorted(found) or 'none'}); refresh the page and pick another.")
    src = found[model]
    return _assemble(model, src) if isinstance(src, dict) else src


class H3Model:
    """What flows along an ``H3_MODEL`` link: the settings of one loaded pipeline, and the
    LoRAs on it.

    ``pipeline()`` returns the cached h3cy pipeline, reopening it when another model was
    loaded since (the cache holds one) and re-patching its LoRAs to this handle's;
    ``lock`` serialises generations on the base pipeline (shared by every LoRA set on it).
    A handle is never changed: :meth:`with_lora` returns a new one.
    """

    def __init__(self, path, weights, threads, streaming, files=None, loras=()):
        self.path, self.weights, self.threads, self.streaming = path, weights, threads, streaming
        self.files = files or {}       # component -> single file (H3 Model Loader from files)
        self.loras = tuple(loras)      # ((realpath, strength), ...) in the order applied

    @property
    def base_key(self):
        """What the cached pipeline is opened from (LoRAs aside)."""
        where = (os.path.realpath(self.path) if self.path else None,
                 tuple(sorted((c, os.path.realpath(p)) for c, p in self.files.items())))
        return (where, self.weights, self.threads, self.streaming)

    @property
    def key(self):
        return self.base_key + (self.loras,)

    def with_lora(self, path, strength):
        """A handle on the same base with one more LoRA (stacked after this one's)."""
        return H3Model(self.path, self.weights, self.threads, self.streaming, dict(self.files),
                       self.loras + ((os.path.realpath(path), float(strength)),))

    def pipeline(self):
        return _CACHE.get(self)

    @property
    def lock(self):
        return _CACHE.lock_for(self.base_key)

    def __repr__(self):
        what = self.path or ", ".join(os.path.basename(p) for p in self.files.values())
        extra = "".join(f" +{os.path.basename(p)}@{s:g}" for p, s in self.loras)
        return f"<H3_MODEL {what} weights={self.weights} streaming={self.streaming}{extra}>"


class _PipelineCache:
    """One loaded pipeline at a time, keyed by (path, weights, threads, streaming); the
    LoRAs of the handle asking are patched onto it (the base weights stay shared: a LoRA is
    a run-time side product in h3cy, never a copy of the transformer)."""

    def __init__(self):
        self._mutex = threading.Lock()
        self.key, self.pipe = None, None
        self.loras = ()                # ((path, strength), ...) now on self.pipe
        self._locks = {}
        self.loads = 0                 # how many times a pipeline was opened (tests read it)
        self.patches = 0               # how many times the LoRA set was rebuilt (tests read it)

    def lock_for(self, key):
        with self._mutex:
            return self._locks.setdefault(key, threading.Lock())

    def _patch_locked(self, loras):
        """Make the pipeline's LoRAs ``loras``: only the strengths when the files are the
        same, else unload all and load these; a file that fails leaves no LoRA on."""
        if loras == self.loras:
            return
        pipe = self.pipe
        names = [f"{i}:{os.path.basename(p)}" for i, (p, _) in enumerate(loras)]
        if [p for p, _ in loras] == [p for p, _ in self.loras]:
            for name, (_, s) in zip(names, loras):
                pipe.set_lora_strength(name, s)
            self.loras = loras
            return
        for name in list(pipe.loras):
            pipe.unload_lora(name)
        self.loras = ()
        self.patches += 1
        try:
            for name, (p, s) in zip(names, loras):
                pipe.load_lora(p, strength=s, name=name)
        except BaseException:
            for name in list(pipe.loras):
                pipe.unload_lora(name)
            raise
        self.loras = loras

    def get(self, model):
        with self._mutex:
            pipe = self._open_locked(model)
            self._patch_locked(model.loras)
            return pipe

    def _open_locked(self, model):
        h3cy = _h3.require()
        if self.pipe is not None and self.key == model.base_key:
            return self.pipe
        self._release_locked()
        try:
            # converted-weight caches go to h3cy's cache folder, never into ComfyUI's
            # models folders (often shared or read-only)
            pipe = h3cy.load(model.path, weights=model.weights, streaming=STREAMING[model.streaming],
                             threads=model.threads or None, cache_dir=h3cy.cache_dir(), **model.files)
        except MemoryError as e:
            raise MemoryError(f"{e} — not enough memory to load {model!r} in weights={model.weights}: "
                              "pick weights int4 (about half of int8) or streaming 'on' in H3 Model "
                              "Loader") from e
        self.key, self.pipe = model.base_key, pipe
        self.loads += 1
        return pipe

    def _release_locked(self):
        if self.pipe is not None:
            self.pipe.release()
        self.key, self.pipe, self.loras = None, None, ()

    def release(self):
        with self._mutex:
            self._release_locked()


_CACHE = _PipelineCache()


def load_model(model, weights="auto", threads=0, streaming="auto"):
    """H3 Model Loader's execute: resolve, open (or reuse) and return an H3Model."""
    _h3.require()
    if weights not in WEIGHT_MODES:
        raise ValueError(f"weights must be one of {WEIGHT_MODES}, got {weights!r}")
    if streaming not in STREAMING:
        raise ValueError(f"streaming must be one of {sorted(STREAMING)}, got {streaming!r}")
    handle = H3Model(resolve(model), weights, int(threads), streaming)
    handle.pipeline()              # open now, so a missing file is reported by this node
    return (handle,)


# -- H3 Model Loader from files: ComfyUI's own diffusion_models / text_encoders / vae files ---
FILE_SUFFIXES = (".safetensors", ".sft")
# GGUF files (the sd.cpp / unsloth sets; ComfyUI-GGUF users keep them in models/unet and
# models/clip): ComfyUI lists only its own extensions for these folders, so the loader looks
# for them itself, in the same folders
GGUF_SUFFIX = ".gguf"
GGUF_ROLES = ("dit", "text_encoder")
# node input -> (ComfyUI folder, h3cy component, what the user calls it)
FILE_INPUTS = {"dit": ("diffusion_models", "transformer", "diffusion model"),
               "text_encoder": ("text_encoders", "text_encoder", "text encoder"),
               "video_vae": ("vae", "video_vae", "video VAE"),
               "audio_vae": ("vae", "audio_vae", "audio VAE")}


def _no_file(folder):
    return f"(no .safetensors in models/{folder}/)"


def _gguf_files(folder):
    """The .gguf files of ``folder``: those ComfyUI lists under its GGUF key (``unet_gguf``,
    ``clip_gguf``: :data:`GGUF_FOLDERS`) and those under ``folder``'s own paths (recursively,
    relative names, the first path winning on duplicates, as ComfyUI lists files)."""
    out = set()
    key = GGUF_FOLDERS.get(folder, (None,))[0]
    try:
        out |= {n for n in folder_paths.get_filename_list(key) if n.lower().endswith(GGUF_SUFFIX)}
    except KeyError:
        pass
    try:
        bases = folder_paths.get_folder_paths(folder)
    except KeyError:
        return sorted(out)
    for base in bases:
        if not os.path.isdir(base):
            continue
        for root, _dirs, files in os.walk(base, followlinks=True):
            for n in files:
                if n.lower().endswith(GGUF_SUFFIX):
                    out.add(os.path.relpath(os.path.join(root, n), base))
    return sorted(out)


def file_options(folder, gguf=False):
    """The .safetensors files ComfyUI lists for ``folder`` (its own folders and
    extra_model_paths.yaml's), so existing downloads appear without moving anything; with
    ``gguf``, the .gguf files in the same folders too."""
    try:
        names = [n for n in folder_paths.get_filename_list(folder) if n.lower().endswith(FILE_SUFFIXES)]
    except KeyError:
        names = []
    if gguf:
        names = sorted(set(names) | set(_gguf_files(folder)))
    return names or [_no_file(folder)]


def check_file(role, name):
    """The full path of the file picked for ``role``, after reading its headers: a file that
    is not that component, or that h3cy cannot run, fails here in one line naming it (not
    later, in whichever node first touches it)."""
    folder, component, what = FILE_INPUTS[role]
    if name == _no_file(folder):
        raise FileNotFoundError(f"{what}: no file to pick: put the MiniMax-H3 {what} file in ComfyUI's "
                                f"models/{folder}/ and refresh (press R)")
    path = None
    if name.lower().endswith(GGUF_SUFFIX) and folder in GGUF_FOLDERS:
        path = folder_paths.get_full_path(GGUF_FOLDERS[folder][0], name)     # ComfyUI-GGUF's key
    path = path or folder_paths.get_full_path(folder, name)
    if path is None:
        raise FileNotFoundError(f"{what}: {name!r} is not in ComfyUI's {folder} folders; refresh the page "
                                "and pick another")
    h3cy = _h3.require()
    from h3cy.weights.single_file import detect_component
    encoder = (lambda layer: not layer.startswith("decoder.")) if component == "video_vae" else (lambda layer: False)
    try:
        detect_component(path, component, quantised_ok=encoder)   # what the component's loader checks
    except h3cy.CheckpointError as e:
        raise ValueError(f"{what}: {name} cannot be used: {e}") from None
    return path


def load_files(dit, text_encoder, video_vae, audio_vae, weights="auto", threads=0, streaming="auto"):
    """H3 Model Loader from files' execute: check the four files' headers, then open (or
    reuse) the pipeline.  The tokenizer is the released one shipped with h3cy."""
    _h3.require()
    if weights not in WEIGHT_MODES:
        raise ValueError(f"weights must be one of {WEIGHT_MODES}, got {weights!r}")
    if streaming not in STREAMING:
        raise ValueError(f"streaming must be one of {sorted(STREAMING)}, got {streaming!r}")
    picked = dict(dit=dit, text_encoder=text_encoder, video_vae=video_vae, audio_vae=audio_vae)
    files = {role: check_file(role, name) for role, name in picked.items()}
    handle = H3Model(None, weights, int(threads), streaming, files=files)
    handle.pipeline()
    return (handle,)


# -- H3 LoRA: a LoRA from ComfyUI's models/loras on an H3_MODEL -------------------------------
LORA_FOLDER = "loras"


def _no_lora():
    return f"(no .safetensors in models/{LORA_FOLDER}/)"


def lora_options():
    """The .safetensors files ComfyUI lists under ``models/loras`` (and extra_model_paths)."""
    try:
        names = [n for n in folder_paths.get_filename_list(LORA_FOLDER) if n.lower().endswith(FILE_SUFFIXES)]
    except KeyError:
        names = []
    return names or [_no_lora()]


def apply_lora(model, lora, strength=1.0):
    """H3 LoRA's execute: a new H3_MODEL with this LoRA stacked on ``model``'s.  The file is
    checked against the transformer now (an unmatched key fails in this node, naming it);
    the base pipeline is shared, not copied."""
    _h3.require()
    if not isinstance(model, H3Model):
        raise TypeError(f"expected an H3_MODEL from 'H3 Model Loader', got {type(model).__name__}")
    if lora == _no_lora():
        raise FileNotFoundError(f"no LoRA to pick: put the LoRA file (.safetensors) in ComfyUI's "
                                f"models/{LORA_FOLDER}/ and refresh (press R)")
    path = folder_paths.get_full_path(LORA_FOLDER, lora)
    if path is None:
        raise FileNotFoundError(f"LoRA {lora!r} is not in ComfyUI's {LORA_FOLDER} folders; refresh the page "
                                "and pick another")
    handle = model.with_lora(path, strength)
    with handle.lock:
        handle.pipeline()          # patch now: a LoRA that does not fit is reported by this node
    return (handle,)
