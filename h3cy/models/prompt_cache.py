"""On-disk cache of prompt encodings, and :func:`encode_prompt`.

Encoding a prompt runs 50 layers of a 32B model; the result ([L, 5120] float32) is small.
Each entry is one file named by a sha256 key over the prompt text, the encoder's files
(path, size, mtime of config.json, the index and every shard read), the weights mode, the
output layer, the kernel path and the entry format version.  File layout::

    b"H3CYP001" | u32 header length | header JSON {shape, sha256 of the data} | float32 data

A read checks the magic, the header, the size and the data's sha256: a corrupt or
truncated entry is ignored (and removed) and the prompt recomputed.  Writes go to a temp
file in the same folder, then ``os.replace``: a reader never sees half an entry.
"""
import hashlib
import json
import logging
import os
import struct
import tempfile

import numpy as np

from .. import _config
from ..errors import H3ValueError

log = logging.getLogger("h3cy")

FORMAT_VERSION = 1
_MAGIC = b"H3CYP001"


def default_dir():
    """``$H3CY_CACHE_DIR/prompts``, else ``~/.cache/h3cy/prompts``."""
    return os.path.join(_config.cache_root(), "prompts")


def encoder_identity(text_encoder):
    """What an encoding depends on besides the prompt: the files (path, size, mtime), the
    weights mode, the output layer and the kernel path."""
    return _identity(text_encoder.files, text_encoder.weights, text_encoder.output_layer,
                     text_encoder.isa)


def _identity(paths, weights, output_layer, isa):
    files = []
    for p in paths:
        st = os.stat(p)
        files.append([os.path.abspath(p), st.st_size, st.st_mtime_ns])
    return {"files": files, "weights": weights, "output_layer": int(output_layer), "isa": isa,
            "version": FORMAT_VERSION}


def cache_key(prompt, identity, images=()):
    """images: each image's identifying bytes (image_processor.image_bytes: size and RGB
    pixels); none keeps a text-only prompt's key as it was."""
    h = hashlib.sha256()
    h.update(json.dumps(identity, sort_keys=True).encode())
    h.update(b"\0prompt\0")
    h.update(prompt.encode("utf-8", "surrogatepass"))
    for i, b in enumerate(images):
        h.update(f"\0image {i} {len(b)}\0".encode())
        h.update(b)
    return h.hexdigest()


def entry_path(folder, key):
    return os.path.join(folder, key[:2], key + ".h3p")


def load(path):
    """The cached array, or None if the entry is missing, truncated or corrupt (removed)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("h3cy: prompt cache entry %s unreadable (%s)", path, e)
        return None
    try:
        if raw[:8] != _MAGIC or len(raw) < 12:
            raise ValueError("bad magic")
        (n,) = struct.unpack("<I", raw[8:12])
        head = json.loads(raw[12:12 + n].decode("utf-8"))
        data = raw[12 + n:]
        shape = tuple(int(s) for s in head["shape"])
        if len(data) != int(np.prod(shape)) * 4:
            raise ValueError(f"{len(data)} data bytes for shape {shape}")
        if hashlib.sha256(data).hexdigest() != head["sha256"]:
            raise ValueError("checksum mismatch")
        return np.frombuffer(data, dtype="<f4").reshape(shape).astype(np.float32)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error) as e:
        log.warning("h3cy: prompt cache entry %s is corrupt (%s); recomputing", path, e)
        try:
            os.remove(path)
        except OSError:
            pass
        return None


def store(path, array):
    """Write atomically (temp file + rename).  Failure to write is logged, not raised."""
    a = np.ascontiguousarray(array, dtype="<f4")
    data = a.tobytes()
    head = json.dumps({"shape": list(a.shape), "sha256": hashlib.sha256(data).hexdigest()}).encode()
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + struct.pack("<I", len(head)) + head + data)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        log.warning("h3cy: cannot write prompt cache entry %s (%s)", path, e)
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass


def encode_prompt(text_encoder, prompt, tokenizer=None, cache_dir=None, on_progress=None, cancel=None,
                  images=None, return_tags=False):
    """Encode a prompt as MiniMax-H3's conditioning: ``hidden_states[50]`` of the tokens
    (spec §3.1: verbatim, no chat template, no special tokens added); with ``images``, the
    fl2va presentation (diffusers' MiniMaxH3FL2VATextEncoderStep): per image ``"<Picture i>: "``
    and its vision block, then the prompt (:meth:`h3cy.TextEncoder.presentation`).

    Parameters
    ----------
    text_encoder : h3cy.TextEncoder
    prompt : str — not empty (whitespace is a valid prompt)
    tokenizer : h3cy.Tokenizer, optional — default: found next to the encoder (its own
        folder, else the release layout's sibling ``../tokenizer``)
    cache_dir : str or os.PathLike or False, optional — the prompt cache folder (default
        ``$H3CY_CACHE_DIR/prompts``, else ``~/.cache/h3cy/prompts``); False disables it.
        The key covers the images' sizes and pixels too
    on_progress : callable(done, total, phase), optional — phase "vision" per vision block
        (with images), then "encode" per layer; throttled, always at the end of each phase
        (a cache hit reports (total, total, "encode") once)
    cancel : h3cy.CancelToken, optional — stops within one block or layer, raising h3cy.Cancelled
    images : list, optional — keyframes: numpy (H, W, 3) uint8 RGB arrays, paths of image
        files or PIL images, used as given (the Qwen3-VL processor's own resize applies);
        checked before any heavy work (H3ValueError: wrong shape/dtype, unreadable file,
        a side under 16 pixels, aspect ratio above 200)
    return_tags : bool — also return the rows' tags (int64 (num_tokens,): 1 text, 0 a vision
        block's rows)

    Returns
    -------
    ndarray of shape (num_tokens, hidden_size), float32 (``encoder_hidden_states`` of the
    DiT); with return_tags, ``(states, tags)``
    """
    if not isinstance(prompt, str):
        raise H3ValueError(f"prompt must be a str, got {type(prompt).__name__}")
    if prompt == "":
        raise H3ValueError("the prompt is empty (whitespace is a valid prompt)")
    images = [] if images is None else images
    if isinstance(images, (str, os.PathLike, np.ndarray)) or not hasattr(images, "__len__"):
        raise H3ValueError("images must be a list (of numpy arrays, paths or PIL images)")
    tok = tokenizer
    if len(images):
        if tok is None:
            tok = text_encoder.tokenizer
        ids, tags, prepared, _ = text_encoder.presentation(prompt, images, tok)
        from .image_processor import image_bytes
        keys = [image_bytes(im) for im in prepared]
    else:
        ids = tags = prepared = None
        keys = []
    path = None
    if cache_dir is not False:
        folder = default_dir() if cache_dir is None else os.fspath(cache_dir)
        path = entry_path(folder, cache_key(prompt, encoder_identity(text_encoder), keys))
        hit = load(path)
        if hit is not None:
            if on_progress is not None:
                on_progress(text_encoder.num_layers, text_encoder.num_layers, "encode")
            if return_tags and tags is None:
                tags = np.ones(hit.shape[0], np.int64)
            return (hit, tags) if return_tags else hit
    if ids is None:
        tok = tok if tok is not None else text_encoder.tokenizer
        ids = tok.encode(prompt)
        tags = np.ones(len(ids), np.int64)
    out = text_encoder.encode(ids, on_progress=on_progress, cancel=cancel, images=prepared or None)
    if path is not None:
        store(path, out)
    return (out, tags) if return_tags else out


def cached_prompt(folder, prompt, weights, cache_dir=None, isa=None, output_layer=50):
    """The cached encoding of ``prompt`` by the text encoder in ``folder`` loaded in mode
    ``weights``, or None — without loading the encoder (only its config, index and shard
    headers are read), so a pipeline skips loading it on a cache hit."""
    from .. import ops
    from .text_encoder import TextEncoderSource
    if cache_dir is False:
        return None
    src = TextEncoderSource(os.fspath(folder), int(output_layer))
    try:
        files = src.files
    finally:
        src.close()
    identity = _identity(files, weights, output_layer, ops.resolve_isa(isa))
    d = default_dir() if cache_dir is None else os.fspath(cache_dir)
    return load(entry_path(d, cache_key(prompt, identity)))
