"""Prompt -> text states -> denoised latents -> RGB frames and stereo audio.

>>> import h3cy
>>> pipe = h3cy.load("MiniMax-H3", weights="int8")               # doctest: +SKIP
>>> res = pipe.generate("A red fox walking through snow", seconds=2, steps=20)   # doctest: +SKIP
>>> res.save("fox.mp4")                                           # doctest: +SKIP

Phases run one after another and each loads, uses and releases its component, so the text
encoder, the transformer and the decoders are never resident together (``keep_loaded=True``
keeps them for repeated calls).  Every phase reports ``on_progress(done, total, phase)`` with
phase ``"encode"``, ``"denoise"``, ``"decode_video"`` or ``"decode_audio"`` -- and with
keyframes (``first_frame=`` / ``last_frame=``) ``"vision"`` (the text encoder's vision tower)
and ``"encode_video"`` (the video VAE's encoder) --, and every phase stops within one
block/layer when ``cancel`` (an :class:`h3cy.CancelToken`) is set.
"""
import contextlib
import logging
import threading
import time

import numpy as np

from ._memory import available_memory, fmt_bytes, peak_rss
from .errors import Busy, Cancelled, H3ValueError
from .sampling.layout import Geometry
from . import ops
from .weights.model_folder import with_component_files
from .result import Result

log = logging.getLogger("h3cy")

__all__ = ["load", "Pipeline"]

WEIGHT_MODES = ("fp32", "bf16", "fp16", "int8", "int4")
VAE_WEIGHT_MODES = ("fp32", "bf16", "fp16", "int8")
# fraction of the available memory a resident component may take before "auto" streams it
AUTO_STREAM_FRACTION = ops.measurement.FIT_FRACTION     # the one rule weights="auto" uses too


def load(path=None, weights="auto", streaming="auto", threads=None, cache_dir=None, vae_weights="auto",
         keep_loaded=False, isa=None, attention=None, *, dit=None, text_encoder=None, video_vae=None,
         audio_vae=None, tokenizer=None, loras=(), lora_merge=False):
    """Open a MiniMax-H3 model -- a folder, single files per component, or both -- for
    generation.

    Parameters
    ----------
    path : the official repository root (holding ``FL2VA/``), an ``FL2VA/`` folder, or a
        diffusers-layout folder (``model_index.json`` + ``transformer/ text_encoder/
        tokenizer/ vae/ audio_vae/``); optional when every component is given below.
        Every component is checked now; a missing one raises :class:`h3cy.CheckpointError`
        naming it.
    dit, text_encoder, video_vae, audio_vae, tokenizer : a folder or a single file (ComfyUI's
        ``.safetensors``: ``dit="minimax_h3_fl2va_pruned_bf16.safetensors"``) per component,
        taking the place of that component of ``path``.  Without a tokenizer, single files
        use the released tokenizer shipped with h3cy.
    weights : weights mode of the transformer and the text encoder (fp32, bf16, fp16, int8,
        int4, or "auto", the default, chosen per component: linears stored quantised run as
        stored; a float file runs the faster of bf16 and int8 on this CPU by the measurement
        ``h3cy selfcheck`` stored (int8 without one: the static rule) among those whose
        resident size fits 80% of the memory available, int4 when neither fits; see
        :mod:`h3cy.weights.auto`).  The modes chosen are in ``component_weights``.
    streaming : True, False or "auto" — stream blocks/layers from disk instead of keeping
        them resident.  "auto" streams a component when its resident size in ``weights``
        exceeds 80% of the memory available to the process (the smaller of MemAvailable
        and the cgroup limit).
    threads : int, optional — default :func:`h3cy.get_num_threads`
    cache_dir : where converted weights (fp16/int8/int4 caches) and encoded prompts go;
        False: nothing is written (weights converted in memory at every load, prompts
        encoded every time)
    vae_weights : weights mode of the two decoders: "auto" (the default; fp32 for float
        files, as released), fp32, bf16, fp16 or int8
    keep_loaded : keep every component resident between calls (faster repeated calls, more
        memory)
    isa : kernel path override (see :func:`h3cy.ops.active_isa`)
    attention : products inside the transformer's and the video decoder's attention: None
        or "auto" (bf16 pairs for bf16 and int8/int4 weights where the CPU has bf16 dot
        products, float32 otherwise), "fp32" or "bf16" (see :func:`h3cy.ops.attention_bf16`)
    loras : sequence of ``path`` or ``(path, strength)`` — LoRAs for the transformer (see
        :meth:`Pipeline.load_lora`), checked now
    lora_merge : merge those LoRAs into the transformer's weights (cached) instead of
        running them beside the base: a step then costs what the bare base costs (see
        :meth:`h3cy.DiT.load_lora`; a streaming transformer runs them at run time)
    """
    pipe = Pipeline(path, weights=weights, streaming=streaming, threads=threads, cache_dir=cache_dir,
                    vae_weights=vae_weights, keep_loaded=keep_loaded, isa=isa, attention=attention, dit=dit,
                    text_encoder=text_encoder, video_vae=video_vae, audio_vae=audio_vae, tokenizer=tokenizer)
    for item in loras:
        p, s = (item, 1.0) if isinstance(item, (str, bytes)) or hasattr(item, "__fspath__") else item
        pipe.load_lora(p, strength=s, merge=lora_merge)
    return pipe


class Pipeline:
    """A MiniMax-H3 model on disk, ready to generate.  Build it with :func:`h3cy.load`."""

    def __init__(self, path=None, weights="auto", streaming="auto", threads=None, cache_dir=None,
                 vae_weights="auto", keep_loaded=False, isa=None, attention=None, *, dit=None,
                 text_encoder=None, video_vae=None, audio_vae=None, tokenizer=None):
        if weights != "auto":
            weights = ops.resolve_weights(weights, WEIGHT_MODES)
        ops.attention_bf16(attention, "int8" if weights == "auto" else weights)   # a bad value fails now
        self.attention = attention
        try:     # "auto": a float decoder runs fp32, as released
            vae_weights = ops.resolve_weights(vae_weights, VAE_WEIGHT_MODES, auto="fp32")
        except H3ValueError:
            raise H3ValueError(f"vae_weights must be one of {VAE_WEIGHT_MODES} or 'auto', "
                               f"got {vae_weights!r}") from None
        if streaming not in (True, False, "auto"):
            raise H3ValueError(f"streaming must be True, False or 'auto', got {streaming!r}")
        files = dict(transformer=dit, text_encoder=text_encoder, video_vae=video_vae, audio_vae=audio_vae,
                     tokenizer=tokenizer)
        self.folder = with_component_files(path, **files)
        if self.folder.paths["tokenizer"] is None and self.folder.paths["text_encoder"] is not None:
            # single files carry no tokenizer: the package's copy of the released one
            from .models.tokenizer import DEFAULT_FOLDER
            self.folder.paths["tokenizer"] = DEFAULT_FOLDER
            log.info("h3cy: no tokenizer given; using the released tokenizer shipped with h3cy")
        self.folder.require()
        # every component's file headers now (sizes and offsets checked, no data read): a
        # truncated shard fails here, naming it, not minutes later in whichever phase reads it
        self.folder.sizes()
        self.path = path
        # the mode of each phase's component: "auto" is resolved per component from its
        # files, this CPU's stored GEMM measurement and the memory (h3cy.weights.auto);
        # phases run one at a time, so each component must fit on its own
        if weights == "auto":
            from .weights.auto import auto_weights
            sizes = self.folder.sizes()
            self.component_weights = {
                c: auto_weights(c, self.folder.paths[c], isa, streaming=streaming is True, sizes=sizes.get(c))
                for c in ("text_encoder", "transformer")}
        else:
            self.component_weights = {"text_encoder": weights, "transformer": weights}
        self.weights, self.vae_weights = self.component_weights["transformer"], vae_weights
        self.streaming = streaming
        self.threads, self.cache_dir, self.isa = threads, cache_dir, isa
        self.keep_loaded = bool(keep_loaded)
        self._loaded = {}
        self._lock = threading.Lock()
        self._loras = {}          # name -> (path, strength, merge), applied whenever the DiT is built
        self._check_configs()

    # -- LoRAs ----------------------------------------------------------------------------------
    def load_lora(self, path, strength=1.0, name=None, merge=False):
        """Add a LoRA to the transformer (:meth:`h3cy.DiT.load_lora`): the file is checked
        against the transformer's config now (an unmatched key raises CheckpointError naming
        it, and nothing is added), and applied every time the pipeline builds the
        transformer for a phase, and at once to a transformer kept loaded.  ``merge``: merged
        into the weights (:meth:`h3cy.DiT.load_lora`), except on a streaming transformer,
        which runs it at run time.  Returns its name."""
        import os
        from .weights.lora import read_lora
        if name is None:
            name = os.path.splitext(os.path.basename(os.fspath(path).rstrip("/")))[0]
        if name in self._loras:
            raise H3ValueError(f"a LoRA named {name!r} is loaded already; unload_lora({name!r}) first "
                               "or pass another name=")
        read_lora(path, self._transformer_config, "stacked")
        dit = self._loaded.get("transformer")
        if dit is not None:
            dit.load_lora(path, strength=strength, name=name, merge=bool(merge) and not dit.streaming)
        self._loras[name] = (os.fspath(path), float(strength), bool(merge))
        return name

    def unload_lora(self, name):
        """Remove a LoRA added with :meth:`load_lora`."""
        if name not in self._loras:
            raise H3ValueError(f"no LoRA named {name!r} is loaded (loaded: {sorted(self._loras)})")
        del self._loras[name]
        dit = self._loaded.get("transformer")
        if dit is not None:
            dit.unload_lora(name)

    def set_lora_strength(self, name, strength):
        """Change a LoRA's strength (for the next transformer built, and a kept one now)."""
        if name not in self._loras:
            raise H3ValueError(f"no LoRA named {name!r} is loaded (loaded: {sorted(self._loras)})")
        path, _, merge = self._loras[name]
        self._loras[name] = (path, float(strength), merge)
        dit = self._loaded.get("transformer")
        if dit is not None:
            dit.set_lora_strength(name, strength)

    @property
    def loras(self):
        """{name: strength} of the LoRAs added, in order."""
        return {k: s for k, (_, s, _) in self._loras.items()}

    # -- components ----------------------------------------------------------------------------
    def _check_configs(self):
        """Cheap cross-checks between components, so a mismatched folder fails before any
        long phase: the text encoder's width must be the transformer's text_dim.  Each
        config is read by its component's own parser (a bad one fails here, as it would
        at build time)."""
        import os
        from .errors import CheckpointError
        from .models.text_encoder import TextConfig
        from .weights.files import load_json
        from .weights.transformer import TransformerConfig

        def config(component):
            path = os.path.join(self.folder.paths[component], "config.json")
            return load_json(path, f"the {component} config"), path
        te_path, tr_path = self.folder.paths["text_encoder"], self.folder.paths["transformer"]
        if os.path.isfile(te_path):           # a single file: its configuration from its shapes
            from .models.text_encoder import TextEncoderSource
            src = TextEncoderSource(te_path, 0)
            te = src.config
            src.close()
        else:
            te = TextConfig(*config("text_encoder"))
        if os.path.isfile(tr_path):
            from .weights.transformer import open_transformer
            with open_transformer(tr_path) as ckpt:
                tr = ckpt.config
        else:
            tr = TransformerConfig.from_dict(*config("transformer"))
        self._transformer_config = tr     # LoRA files are checked against it (load_lora)
        if te.hidden_size != tr.text_dim:
            raise CheckpointError(f"{self.folder.root}: the text encoder's hidden_size "
                                  f"{te.hidden_size} is not the transformer's text_dim {tr.text_dim}")

    def streaming_for(self, component):
        """Whether ``component`` ("text_encoder" or "transformer") is streamed."""
        if self.streaming != "auto":
            return bool(self.streaming)
        mode = self.component_weights[component]
        need = self.folder.resident_bytes(component, mode)
        room = available_memory()
        stream = room is not None and need > AUTO_STREAM_FRACTION * room
        log.info("h3cy: %s needs ~%s resident in %s, %s available -> %s", component, fmt_bytes(need),
                 mode, fmt_bytes(room), "streaming" if stream else "resident")
        return stream

    def _build(self, component):
        from .models import audio_vae
        from .models import dit as model
        from .models import text_encoder
        from .models import video_vae
        if component == "video_encoder":         # the video VAE's encoder half: keyframes
            from .models.video_encoder import VideoEncoder
            return VideoEncoder.from_pretrained(self.folder.paths["video_vae"], threads=self.threads, isa=self.isa)
        p = self.folder.paths[component]
        if component == "text_encoder":
            return text_encoder.TextEncoder.from_pretrained(
                p, weights=self.component_weights[component], streaming=self.streaming_for(component), threads=self.threads,
                isa=self.isa, cache_dir=self.cache_dir)
        if component == "transformer":
            dit = model.DiT.from_pretrained(
                p, weights=self.component_weights[component], streaming=self.streaming_for(component), threads=self.threads,
                isa=self.isa, cache_dir=self.cache_dir, attention=self.attention)
            try:
                for name, (path, strength, merge) in self._loras.items():
                    dit.load_lora(path, strength=strength, name=name, merge=merge and not dit.streaming)
            except BaseException:
                dit.close()
                raise
            return dit
        if component == "video_vae":
            return video_vae.VideoDecoder.from_pretrained(p, weights=self.vae_weights, threads=self.threads,
                                                          isa=self.isa, attention=self.attention)

        if component == "audio_vae":
            return audio_vae.AudioDecoder.from_pretrained(p, weights=self.vae_weights, threads=self.threads,
                                                          isa=self.isa)
        raise H3ValueError(f"unknown component {component!r}")

    @contextlib.contextmanager
    def _component(self, component):
        """Load (or reuse) a component for one phase; release it afterwards unless kept."""
        obj = self._loaded.get(component)
        if obj is None:
            obj = self._build(component)
            if self.keep_loaded:
                self._loaded[component] = obj
        try:
            yield obj
        finally:
            if not self.keep_loaded:
                close = getattr(obj, "close", None)
                if close is not None:
                    close()
                del obj

    def release(self):
        """Drop every component kept by ``keep_loaded``."""
        for obj in self._loaded.values():
            close = getattr(obj, "close", None)
            if close is not None:
                close()
        self._loaded.clear()

    close = release

    @contextlib.contextmanager
    def _exclusive(self, blocking):
        if not self._lock.acquire(blocking=blocking):
            raise Busy("this pipeline is already running in another thread (blocking=False)")
        try:
            yield
        finally:
            self._lock.release()

    # -- phases --------------------------------------------------------------------------------
    def encode(self, prompt, on_progress=None, cancel=None, images=None, return_tags=False):
        """The prompt's text states ``[L, text_dim]`` float32 (from the on-disk prompt cache
        when this prompt was encoded before with the same encoder and weights mode).

        ``images``: keyframes on the request's canvas (uint8 (H, W, 3), in packed order:
        :func:`h3cy.prepare_keyframes`) shown to the text encoder in the fl2va presentation
        (:func:`h3cy.encode_prompt`); ``return_tags``: also return the rows' tags (1 text,
        0 a vision block's rows), as ``denoise(text_tags=)`` takes them."""
        from .models import prompt_cache
        if not isinstance(prompt, str):
            raise H3ValueError(f"prompt must be a str, got {type(prompt).__name__}")
        if prompt == "":
            raise H3ValueError("prompt is empty; give at least one character (whitespace is a valid prompt)")
        if images:
            # the cache key covers the images' pixels, which only the encoder's processor
            # prepares: encode_prompt looks the cache up once the encoder is loaded
            tok = self._tokenizer()
            with self._component("text_encoder") as te:
                return prompt_cache.encode_prompt(te, prompt, tokenizer=tok, cache_dir=self._prompt_cache_dir(),
                                                  on_progress=on_progress, cancel=cancel, images=list(images),
                                                  return_tags=return_tags)
        if return_tags:
            states = self.encode(prompt, on_progress=on_progress, cancel=cancel)
            return states, np.ones(states.shape[0], np.int64)
        cached = prompt_cache.cached_prompt(self.folder.paths["text_encoder"], prompt,
                                            self.component_weights["text_encoder"],
                                            cache_dir=self._prompt_cache_dir(), isa=self.isa)
        if cached is not None:
            if on_progress is not None:
                on_progress(1, 1, "encode")
            return cached
        tok = self._tokenizer()
        with self._component("text_encoder") as te:
            return prompt_cache.encode_prompt(te, prompt, tokenizer=tok, cache_dir=self._prompt_cache_dir(),
                                              on_progress=on_progress, cancel=cancel)

    def _prompt_cache_dir(self):
        import os
        if self.cache_dir is None or self.cache_dir is False:      # False: no prompt cache
            return self.cache_dir
        return os.path.join(self.cache_dir, "prompts")

    def _tokenizer(self):
        from .models.tokenizer import Tokenizer
        tok = self._loaded.get("tokenizer")
        if tok is None:
            tok = Tokenizer.from_pretrained(self.folder.paths["tokenizer"])
            self._loaded["tokenizer"] = tok      # small: always kept
        return tok

    def encode_keyframes(self, frames, geometry, on_progress=None, cancel=None, posterior_noise=None):
        """The conditioning latents ``(24, 1, h, w)`` of keyframes already on ``geometry``'s
        canvas (:func:`h3cy.encode_image` with the video VAE's encoder; phase
        ``"encode_video"``).  ``posterior_noise``: one array per keyframe (or None: h3cy's
        own draw), as ``encode_image`` takes it."""
        from .keyframes import encode_image
        if posterior_noise is None:
            posterior_noise = [None] * len(frames)
        if isinstance(posterior_noise, np.ndarray) or len(posterior_noise) != len(frames):
            raise H3ValueError(f"posterior_noise must be a list with one array per keyframe ({len(frames)})")
        with self._component("video_encoder") as enc:
            return [encode_image(enc, f, geometry, posterior_noise=n, on_progress=on_progress, cancel=cancel)
                    for f, n in zip(frames, posterior_noise)]

    def denoise(self, prompt_embeds, geometry, **kw):
        """Run the sampler (see :func:`h3cy.denoise`) with the transformer loaded for it."""
        from .sampling.sampler import denoise
        with self._component("transformer") as dit:
            return denoise(dit, prompt_embeds, geometry, **kw)

    def decode(self, video_latent, audio_latent, on_progress=None, cancel=None, on_frames=None,
               on_audio=None, fps=24):
        """Decode latents to a :class:`Result` with uint8 frames and float32 stereo audio.

        The audio is decoded first.  ``on_audio(audio, sample_rate)``, when given, receives it
        before any frame is decoded; ``on_frames(frames_uint8, first_index)`` receives the video
        clip by clip as it is decoded, and the result's ``frames`` is then None — together
        they let a writer stream a long video to disk (``h3cy generate`` does).  Without
        ``on_frames`` the frames are assembled as uint8 clip by clip, never as a float video.
        """
        return self._decode(video_latent, audio_latent, on_progress, cancel, on_frames, on_audio, {},
                            fps=fps)

    def _decode(self, video_latent, audio_latent, on_progress, cancel, on_frames, on_audio, timings,
                fps=24):
        video_latent = np.asarray(video_latent, np.float32)
        audio_latent = np.asarray(audio_latent, np.float32)
        if video_latent.ndim == 5 and video_latent.shape[0] == 1:
            video_latent = video_latent[0]
        if audio_latent.ndim == 4 and audio_latent.shape[0] == 1:
            audio_latent = audio_latent[0]
        # audio first: it is small, and a streaming MP4 writer wants it before the frames
        t0 = time.perf_counter()
        _check_cancel(cancel, "decode_audio")
        with self._component("audio_vae") as adec:
            audio = adec.decode(audio_latent, on_progress=on_progress, cancel=cancel)
            sample_rate = adec.sample_rate
        timings["decode_audio"] = time.perf_counter() - t0
        if on_audio is not None:
            on_audio(audio, sample_rate)
        t0 = time.perf_counter()
        _check_cancel(cancel, "decode_video")
        # uint8 straight from the decoder: each tile region is converted as it is stitched,
        # so neither a float clip nor a float video is ever held
        with self._component("video_vae") as vdec:
            frames = vdec.decode(video_latent, on_frames=on_frames, on_progress=on_progress,
                                 cancel=cancel, uint8=True)
        timings["decode_video"] = time.perf_counter() - t0
        return Result(frames=frames, audio=audio, fps=fps,
                      sample_rate=sample_rate, video_latent=video_latent, audio_latent=audio_latent,
                      timings=timings, peak_rss=peak_rss())

    def generate(self, prompt=None, *, prompt_embeds=None, width=None, height=None, frames=None,
                 seconds=None, steps=None, seed=42, noise=None, schedule=None, reuse=1, layers=None,
                 precision=None, on_step=None, on_progress=None, cancel=None, output="video",
                 on_frames=None, on_audio=None, blocking=True, sampler=None, shift_video=None,
                 shift_audio=None, preset=None, first_frame=None, last_frame=None, text_tags=None,
                 condition_noise=None, posterior_noise=None):
        """Generate a video with sound.

        Parameters
        ----------
        prompt : str — or give ``prompt_embeds`` ``[L, text_dim]`` float32 instead (with
            keyframes, the fl2va presentation's states, and their ``text_tags``)
        width, height : multiples of 32 (default 512x512; with keyframes, both or neither,
            default the canvas of the first keyframe's aspect ratio, as the reference)
        first_frame, last_frame : keyframes (diffusers' ``fl2va``): numpy (H, W, 3) uint8,
            a path or a PIL image.  The first is stretched onto the canvas, the last (when
            both are given) cover-cropped (:func:`h3cy.prepare_keyframes`); the text encoder
            sees them in the prompt (phase "vision"), the video VAE's encoder turns each into
            a latent (phase "encode_video") held in the packed sequence while the rest is
            denoised (``denoise(conditions=)``, docs/sampler.md).  A bad image fails before
            any model loads.
        text_tags, condition_noise : as :func:`h3cy.denoise` (``text_tags`` only with
            ``prompt_embeds``: a prompt is encoded with its own tags)
        posterior_noise : list, optional — per keyframe (first, then last) the posterior
            sample's noise, as :func:`h3cy.encode_image` takes it (the reference's torch draw
            under seed 42, to match it); default h3cy's own draw
        frames / seconds : length (default 22 frames = 0.92 s); frames round up to 17n + 5
        steps, seed, noise, schedule, reuse, layers, precision, on_step, sampler, shift_video,
            shift_audio : as :func:`h3cy.denoise` (defaults: 20 steps, Euler, shifts 12/3)
        preset : "quality", "turbo8" or "turbo4" (:mod:`h3cy.presets`) — fills steps, sampler
            and shifts the call does not give; a turbo preset on a pipeline without a LoRA
            warns once
        on_progress : callable(done, total, phase) for every phase
        cancel : h3cy.CancelToken — stops any phase within one block; raises Cancelled
        output : "video" (decode) or "latent" (skip the decoders)
        on_frames : callable(frames_uint8, first_index) — stream decoded clips (``frames`` of
            the result is then None)
        on_audio : callable(audio, sample_rate) — the decoded audio, before any frame (see
            :meth:`decode`)
        blocking : wait for another generation on this pipeline (True) or raise Busy (False)

        Returns
        -------
        h3cy.Result with ``frames``, ``audio``, ``fps``, ``sample_rate``, ``video_latent``,
        ``audio_latent``, ``save(path)``, ``save_frames(dir)``, ``save_audio(path)``.
        """
        if output not in ("video", "latent"):
            raise H3ValueError(f"output must be 'video' or 'latent', got {output!r}")
        if preset is not None:
            from . import presets
            p = presets.get(preset)
            if schedule is None and shift_video is None and shift_audio is None:
                shift_video, shift_audio = p.shift_video, p.shift_audio
            steps = p.steps if steps is None else steps
            sampler = p.sampler if sampler is None else sampler
            if p.turbo and not self._loras and not getattr(self, "_turbo_warned", False):
                import warnings
                self._turbo_warned = True
                warnings.warn(f"preset {preset!r} is meant for a turbo LoRA or a distilled transformer; "
                              "this pipeline has no LoRA (h3cy.load(loras=...))", RuntimeWarning, stacklevel=2)
        steps = 20 if steps is None else steps
        sampler = "euler" if sampler is None else sampler
        if (prompt is None) == (prompt_embeds is None):
            raise H3ValueError("give exactly one of prompt and prompt_embeds")
        if frames is not None and seconds is not None:
            raise H3ValueError("give frames or seconds, not both")
        if text_tags is not None and prompt_embeds is None:
            raise H3ValueError("text_tags go with prompt_embeds (a prompt is encoded with its own tags)")
        keyframes, anchors = None, ()
        if posterior_noise is not None and first_frame is None and last_frame is None:
            raise H3ValueError("posterior_noise was given without a keyframe")
        if first_frame is not None or last_frame is not None:
            from .keyframes import prepare_keyframes
            # read, checked and put on the canvas now: a bad image fails before any model loads
            keyframes, anchors, (width, height) = prepare_keyframes(first_frame, last_frame, width, height)
            if posterior_noise is not None and (isinstance(posterior_noise, np.ndarray)
                                                or len(posterior_noise) != len(keyframes)):
                raise H3ValueError(f"posterior_noise must be a list with one array per keyframe ({len(keyframes)})")
        width = 512 if width is None else width
        height = 512 if height is None else height
        geometry = (Geometry.from_seconds(seconds, width, height) if seconds is not None
                    else Geometry(width, height, 22 if frames is None else frames))
        timings = {}
        with self._exclusive(blocking):
            if prompt_embeds is None:
                t0 = time.perf_counter()
                _check_cancel(cancel, "encode")
                if keyframes is not None:
                    prompt_embeds, text_tags = self.encode(prompt, on_progress=on_progress, cancel=cancel,
                                                           images=keyframes, return_tags=True)
                else:
                    prompt_embeds = self.encode(prompt, on_progress=on_progress, cancel=cancel)
                timings["encode"] = time.perf_counter() - t0
            conditions = None
            if keyframes is not None:
                t0 = time.perf_counter()
                _check_cancel(cancel, "encode_video")
                latents = self.encode_keyframes(keyframes, geometry, on_progress=on_progress, cancel=cancel,
                                                posterior_noise=posterior_noise)
                conditions = [(0 if a == "first" else -1, z) for a, z in zip(anchors, latents)]
                timings["encode_video"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            _check_cancel(cancel, "denoise")
            video_latent, audio_latent = self.denoise(
                prompt_embeds, geometry, steps=steps, seed=seed, schedule=schedule, noise=noise,
                on_step=on_step, on_progress=on_progress, cancel=cancel, reuse=reuse, layers=layers,
                precision=precision, sampler=sampler, shift_video=shift_video, shift_audio=shift_audio,
                text_tags=text_tags, conditions=conditions, condition_noise=condition_noise)
            timings["denoise"] = time.perf_counter() - t0
            if output == "latent":
                return Result(video_latent=video_latent, audio_latent=audio_latent, geometry=geometry,
                              fps=geometry.fps, timings=timings, peak_rss=peak_rss())
            res = self._decode(video_latent, audio_latent, on_progress, cancel, on_frames, on_audio,
                               timings, fps=geometry.fps)
            res.geometry = geometry
            return res

    def __repr__(self):
        return (f"<h3cy.Pipeline {self.folder.root} ({self.folder.layout} layout) weights={self.weights} "
                f"vae_weights={self.vae_weights} streaming={self.streaming}>")


def _check_cancel(cancel, phase):
    if cancel is not None and cancel.cancelled:
        raise Cancelled(f"cancelled before {phase}")
