"""h3cy command line.

    h3cy demo [-o demo.mp4] [-p PROMPT]          the whole pipeline on the toy demo model (trained on
                                                 synthetic shapes when the package has it; --random:
                                                 the tiny random model)
    h3cy generate -m MODEL -p PROMPT -o out.mp4  [--width --height --frames|--seconds --steps
                  --seed --weights --vae-weights --threads --streaming --reuse --layers
                  --frames-dir --latent-out --lora FILE[:STRENGTH] --preset --sampler --shift V,A
                  --first-frame IMG --last-frame IMG]
    h3cy generate --dit F --text-encoder F --video-vae D --audio-vae D -p PROMPT -o out.mp4
                                                 single files (ComfyUI's) per component
    h3cy info MODEL                              layout, components, memory per weights mode, auto's choice
    h3cy info FILE.safetensors                   what a single file holds, its inferred config, memory
    h3cy info FILE.gguf                          a GGUF file: block types, name mapping, memory per mode
    h3cy info                                    this CPU: its path, GEMM measurement or the static rule
    h3cy convert MODEL --weights int8            build the weight caches ahead of time
    h3cy batch JOBS.jsonl -m MODEL -o OUTDIR     many jobs, here or on Ray [--ray ADDRESS --workers N
                  --cores-per-actor C --return-outputs --retries N --latents --json]
    (-m demo, in generate, info and batch: the built-in demo model; -m demo-random: the random one)
    h3cy selfcheck [--threads N] [--isa NAME] [--size M,N,K] [--rows M] [--no-save] [--no-measure]
                  check the kernels, time each weights mode at the DiT's shapes (~15-30 s on
                  2 cores) and store it for weights="auto" (h3cy.selfcheck)

Errors in what the user gave (a bad path, an illegal size) print one line and exit with 2;
Ctrl-C stops cleanly, writes nothing half-done and exits with 130.
"""
import argparse
import os
import sys
import time

import numpy as np


def _time(fn, repeat=3):
    from .tuning import best_time
    fn()                           # warm-up: first touch of outputs and workspaces
    return best_time(fn, repeat)


def _print_extensions(isa):
    """On the neon path: the ARMv8.6 extensions its GEMMs use (H3CY_NEON_EXT filters them)."""
    from . import _config, _kernels
    from . import ops
    if isa != "neon" and not _kernels.cpu_extensions():
        return
    use = ops.neon_extensions()
    print(f"neon ext     : {' '.join(use) or 'none'}   (CPU has: {' '.join(_kernels.cpu_extensions()) or 'none'};"
          f" H3CY_NEON_EXT allows: {','.join(_config.neon_extensions()) or 'none'})")


def selfcheck(args):
    """``h3cy selfcheck``: the kernels' results against float64 at ``--size``, then each weights
    mode's GEMM timed at the DiT's shapes (h3cy.tuning.selfcheck), stored for weights="auto"."""
    import warnings

    import h3cy
    from h3cy import ops
    from .ops import measurement
    from .tuning import selfcheck as measure

    # the note on portable int8 kernels asks for this very measurement: not here
    warnings.filterwarnings("ignore", message="h3cy: int[48] weights run", category=RuntimeWarning)

    threads = args.threads or h3cy.get_num_threads()
    isa = ops.resolve_isa(args.isa)
    print(f"h3cy {h3cy.__version__}")
    print(f"CPU          : {measurement.cpu_model()}")
    print(f"ISA path     : {isa}   (available: {', '.join(ops.available_isas())})")
    print(f"CPU features : {' '.join(ops.cpu_features()) or '-'}")
    _print_extensions(isa)
    print(f"threads      : {threads}")
    M, N, K = args.size
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, K), dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal((M, K), dtype=np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    flop = 2.0 * M * N * K
    t_np = _time(lambda: x @ w.T)
    print(f"GEMM M={M} N={N} K={K}: numpy fp32 {flop / t_np / 1e9:8.1f} GFLOP/s")
    ok = True
    bounds = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3, "int8": 3e-2, "int4": 2e-1}
    for mode in ops.WEIGHT_MODES:
        lin = ops.Linear(w, weights=mode, isa=isa, threads=threads)
        out = np.empty((M, N), np.float32)
        y = lin(x, out=out)
        err = float(np.linalg.norm(y - want) / np.linalg.norm(want))
        good = err <= bounds[mode]
        ok &= good
        t = _time(lambda: lin(x, out=out))
        ext = "".join(f" +{e}" for e in lin.extensions)
        print(f"  h3cy {mode:5s} {flop / t / 1e9:8.1f} GFLOP/s  ({np.median(t_np) / t:4.2f}x numpy)"
              f"  rel-L2 vs float64 {err:.1e} {'ok' if good else 'FAILED'}{ext}")
    if ok and not args.no_measure:
        print(f"timing one DiT block's linears in each weights mode at {args.rows} rows "
              f"(what weights='auto' follows) ...", flush=True)
        rec = measure(threads=threads, isa=isa, rows=args.rows, shapes=args.shapes, save=not args.no_save,
                      progress=lambda line: print(line, flush=True))
        secs = rec["seconds"]
        print("  per block: " + ", ".join(f"{m} {secs[m]:.3f} s" for m in measurement.MEASURED_MODES)
              + f"  ({rec['wall_s']:.0f} s in all)")
        slow = next(m for m in measurement.AUTO_CANDIDATES if m != rec["fastest"])
        print(f"  fastest of bf16 and int8: {rec['fastest']} ({secs[slow] / secs[rec['fastest']]:.2f}x {slow}'s "
              f"speed): weights='auto' runs it for float checkpoints that fit the memory")
        if "path" in rec:
            print(f"  stored: {rec['path']}")
    print("selfcheck: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def _shapes(text):
    """``NxK[,NxK...]`` -> {name: (N, K)} (selfcheck's hidden --shapes, for quick tests)."""
    out = {}
    try:
        for i, part in enumerate(text.split(",")):
            n, k = (int(v) for v in part.lower().split("x"))
            if min(n, k) < 1:
                raise ValueError
            out[f"shape{i}"] = (n, k)
    except ValueError:
        raise argparse.ArgumentTypeError("shapes must be NxK[,NxK...] (positive integers)") from None
    return out


def _auto_lines(isa):
    """``h3cy info``'s lines on this CPU: the stored GEMM measurement or the static rule."""
    from .ops import measurement
    lines = [f"CPU       : {measurement.cpu_model()} (ISA path {isa})"]
    rec = measurement.load_measurement(isa)
    if rec is None:
        mode, why = measurement.static_choice(isa)
        lines.append(f"measured  : none stored for this CPU and path ({measurement.measurement_path(isa)}); "
                     "`h3cy selfcheck` measures")
        lines.append(f"auto      : {mode} for float checkpoints, by the static rule for {isa} ({why})")
        return lines
    secs = rec["seconds"]
    lines.append(f"measured  : {rec['path']} ({rec.get('measured_at', '?')}, {rec.get('threads', '?')} threads, "
                 f"{rec.get('rows', '?')} rows)")
    lines.append("            one DiT block's linears: " + ", ".join(
        f"{m} {secs[m]:.3f} s" for m in measurement.MEASURED_MODES if isinstance(secs.get(m), (int, float))))
    fast = min(measurement.AUTO_CANDIDATES, key=lambda m: secs[m])
    lines.append(f"auto      : {fast} for float checkpoints that fit the memory (measured fastest of bf16 and int8)")
    return lines


def _size(text):
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("size must be M,N,K (three integers)")
    if min(m, n, k) < 1:
        raise argparse.ArgumentTypeError("size values must be >= 1")
    return m, n, k


# ---------------------------------------------------------------------------------------------
# progress: one tqdm bar per phase
# ---------------------------------------------------------------------------------------------
class _PhaseBars:
    """``on_progress(done, total, phase)`` -> a tqdm bar per phase (closed when the phase
    changes or at the end)."""

    LABELS = {"encode": "encode prompt", "denoise": "denoise", "decode_video": "decode video",
              "decode_audio": "decode audio"}

    def __init__(self, enabled=True):
        self.enabled = enabled
        self.bar = None
        self.phase = None

    def __call__(self, done, total, phase):
        if not self.enabled:
            return
        from tqdm import tqdm
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = tqdm(total=total, desc=f"{self.LABELS.get(phase, phase):14s}", unit="blk",
                            leave=True, dynamic_ncols=True)
        self.bar.n = done
        self.bar.refresh()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _summary(res, wall):
    from ._memory import fmt_bytes
    parts = [f"{k} {v:.1f}s" for k, v in res.timings.items()]
    print(f"done in {wall:.1f}s ({', '.join(parts)}); peak memory {fmt_bytes(res.peak_rss)}")


def _streaming(text):
    v = text.lower()
    if v in ("auto",):
        return "auto"
    if v in ("on", "yes", "true", "1"):
        return True
    if v in ("off", "no", "false", "0"):
        return False
    raise argparse.ArgumentTypeError("streaming must be auto, on or off")


def _lora_arg(text):
    """``FILE[:STRENGTH]`` -> (path, strength).  The strength is the part after the last
    colon when that part is a number; a path that itself holds a colon is taken whole when
    it exists."""
    from .errors import H3ValueError
    path, sep, tail = text.rpartition(":")
    if not sep or (os.path.exists(text) and not _is_number(tail)):
        path, strength = text, 1.0
    else:
        try:
            strength = float(tail)
        except ValueError:
            raise H3ValueError(f"--lora {text!r}: the strength after ':' must be a number, got {tail!r} "
                               "(FILE[:STRENGTH])") from None
        if not np.isfinite(strength):
            raise H3ValueError(f"--lora {text!r}: the strength must be finite, got {tail!r}")
    if not path:
        raise H3ValueError(f"--lora {text!r}: no file before ':' (FILE[:STRENGTH])")
    if not os.path.exists(path):
        raise H3ValueError(f"--lora: no such file: {path}")
    return path, strength


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def _shift_arg(text):
    """``V,A`` -> (shift_video, shift_audio), both positive and finite."""
    from .errors import H3ValueError
    try:
        v, a = (float(x) for x in text.split(","))
    except ValueError:
        raise H3ValueError(f"--shift must be V,A (two numbers: the video and audio shifts, e.g. 6,3), "
                           f"got {text!r}") from None
    if not (np.isfinite(v) and np.isfinite(a) and v > 0 and a > 0):
        raise H3ValueError(f"--shift values must be positive, got {text!r}")
    return v, a


def _sampling_args(args):
    """The few-step options, checked before any model is opened: (loras, keywords for
    Pipeline.generate).  Explicit --steps/--sampler/--shift win over --preset."""
    from . import presets
    from .errors import H3ValueError
    from .sampling.res_multistep import SAMPLERS
    loras = [_lora_arg(t) for t in (args.lora or [])]
    if args.preset is not None:
        presets.get(args.preset)          # H3ValueError listing the presets
    if args.sampler is not None and args.sampler not in SAMPLERS:
        raise H3ValueError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {args.sampler!r}")
    kw = dict(preset=args.preset, sampler=args.sampler, steps=args.steps)
    if args.shift is not None:
        kw["shift_video"], kw["shift_audio"] = _shift_arg(args.shift)
    return loras, kw


def _preview_hook(args):
    """``--preview PNG``: an on_step hook rewriting the PNG after every step (each latent
    pixel drawn 4x4), or None."""
    path = getattr(args, "preview", None)          # `demo` builds its own namespace without it
    tae = getattr(args, "preview_tae", None)
    if path is None:
        if tae is not None:
            from .errors import H3ValueError
            raise H3ValueError("--preview-tae needs --preview PNG (the image it draws)")
        return None
    from .media import PreviewWriter
    if tae is not None:
        from .taeh3 import TAEH3Decoder
        tae = TAEH3Decoder.from_file(tae, threads=args.threads, space_upscale=False, time_upscale=False)
    return PreviewWriter(path, mode=getattr(args, "preview_mode", "sheet"), scale=4 if tae is None else 2,
                         tae=tae)


def generate(args):
    """Generate, streaming the decoded clips straight into the MP4 (and the PNG folder), so
    a long video never sits in memory; files appear under their names only when complete."""
    import shutil

    import h3cy
    from . import media
    loras, sampling = _sampling_args(args)           # bad values fail before any model is built
    on_step = _preview_hook(args)                   # a bad --preview-tae file fails before the load
    first, last = getattr(args, "first_frame", None), getattr(args, "last_frame", None)
    width, height = args.width, args.height
    if first is not None or last is not None:
        # the keyframes are read and checked now, before any model loads; without --width and
        # --height the canvas comes from the first one's aspect ratio, as the reference's
        _, _, (width, height) = h3cy.prepare_keyframes(first, last, width, height)
    width, height = (512 if width is None else width), (512 if height is None else height)
    args.model = _model_arg(args.model, args.cache_dir)
    pipe = h3cy.load(args.model, weights=args.weights, streaming=args.streaming, threads=args.threads,
                     cache_dir=args.cache_dir, vae_weights=args.vae_weights, isa=args.isa,
                     attention=args.attention, dit=args.dit, text_encoder=args.text_encoder,
                     video_vae=args.video_vae, audio_vae=args.audio_vae, tokenizer=args.tokenizer,
                     loras=loras)
    g = (h3cy.Geometry.from_seconds(args.seconds, width, height) if args.seconds is not None
         else h3cy.Geometry(width, height, 22 if args.frames is None else args.frames))
    decode = args.output is not None or args.frames_dir is not None
    sinks = {}
    frames_tmp = None if args.frames_dir is None else args.frames_dir.rstrip("/") + f".partial-{os.getpid()}"

    def on_audio(audio, sample_rate):
        if args.output:
            sinks["mp4"] = media.Mp4Writer(args.output, g.width, g.height, fps=g.fps,
                                           audio=media.fit_audio(audio, g.frames, g.fps, sample_rate),
                                           sample_rate=sample_rate)

    def on_frames(frames, first):
        if "mp4" in sinks:
            sinks["mp4"].add_frames(frames)
        if frames_tmp is not None:
            media.write_frames(frames_tmp, frames, first_index=first)

    bars = _PhaseBars(not args.quiet)
    t0 = time.perf_counter()
    try:
        res = pipe.generate(args.prompt, width=g.width, height=g.height, frames=g.frames, seed=args.seed,
                            reuse=args.reuse, layers=args.layers, on_progress=bars, on_step=on_step,
                            output="video" if decode else "latent", on_frames=on_frames, on_audio=on_audio,
                            first_frame=first, last_frame=last, **sampling)
        bars.close()
        if "mp4" in sinks:
            sinks.pop("mp4").close()
            print(f"video -> {args.output} ({g.frames} frames {g.width}x{g.height} @ {g.fps} fps, "
                  f"stereo audio {res.sample_rate} Hz)")
        if frames_tmp is not None:
            if os.path.isdir(args.frames_dir):
                shutil.rmtree(args.frames_dir)
            os.replace(frames_tmp, args.frames_dir)
            print(f"frames -> {args.frames_dir}/")
        if args.latent_out:
            res.save_latents(args.latent_out)
            print(f"latents -> {args.latent_out}")
    finally:
        bars.close()
        if "mp4" in sinks:
            sinks.pop("mp4").abort()
        if frames_tmp is not None and os.path.isdir(frames_tmp):
            shutil.rmtree(frames_tmp, ignore_errors=True)
    _summary(res, time.perf_counter() - t0)
    return 0


def info_file(path):
    """``h3cy info FILE``: what a single file holds, the configuration h3cy infers from its
    shapes, and the memory each weights mode needs."""
    from ._memory import available_memory, fmt_bytes
    from .weights.model_folder import resident_bytes, tensor_sizes
    from .weights.single_file import detect
    kind = detect(path)
    for line in kind.describe():
        print(line)
    from . import ops
    isa = ops.active_isa()
    gguf = os.fspath(path).endswith(".gguf")
    if kind.component == "transformer" and (gguf or not kind.quantised):
        from .errors import CheckpointError
        from .weights.transformer import open_transformer
        try:
            with open_transformer(path) as ckpt:
                cfg = ckpt.config.to_dict()
            print("config    : " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
        except CheckpointError as e:
            if not gguf:
                raise
            print(f"config    : not inferred ({e})")     # the mapping line below says more
    if gguf:
        # the GGUF header, its block types, the name mapping and the memory per mode
        from .weights.gguf_info import gguf_lines
        for line in gguf_lines(path, kind):
            print(line)
        for line in _auto_lines(isa):
            print(line)
        if kind.component in ("transformer", "text_encoder"):
            print("weights='auto' runs this file as stored (quantised blocks on the GGUF GEMM, "
                  "float tensors float32)")
        return 0
    from .weights.files import open_tensor_file
    f = open_tensor_file(path)
    try:
        tensors = {n[len(kind.prefix):]: (t.dtype, tuple(t.shape)) for n, t in f.tensors.items()
                   if n.startswith(kind.prefix)}
    finally:
        f.close()
    s = tensor_sizes(tensors)
    print(f"params    : {s['params'] / 1e9:.3f} B, {fmt_bytes(s['bytes_on_disk'])} on disk")
    room = available_memory()
    print(f"memory available to this process: {fmt_bytes(room)}")
    for mode in ("fp32", "bf16", "fp16", "int8", "int4"):
        need = resident_bytes(s, kind.component, mode)
        fits = room is None or need <= 0.8 * room
        print(f"  {mode:5s} {fmt_bytes(need):>10s} resident  -> {'fits' if fits else 'stream'}")
    for line in _auto_lines(isa):
        print(line)
    if kind.component in ("transformer", "text_encoder"):
        from .weights.auto import auto_choice
        c = auto_choice(kind.component, path, isa, sizes=s, room=room)
        print(f"weights='auto' runs this file {c.mode} ({c.reason})")
    return 0


def info(args):
    from ._memory import available_memory, fmt_bytes
    from . import ops
    from .weights.model_folder import COMPONENTS, find_model
    if args.model is None:           # this CPU only: its path, the measurement or the static rule
        for line in _auto_lines(ops.active_isa()):
            print(line)
        return 0
    args.model = _model_arg(args.model)
    if os.path.isfile(args.model):
        return info_file(args.model)
    mf = find_model(args.model)
    from . import ops
    from .errors import H3Error
    try:  # the path this machine runs (an invalid H3CY_ISA/H3CY_NEON_EXT is shown, not fatal here)
        isa = ops.resolve_isa(None)
        ext = "".join(f" +{e}" for e in ops.neon_extensions()) if isa == "neon" else ""
        print(f"kernels : {isa}{ext}   (H3CY_ISA, H3CY_NEON_EXT choose)")
    except H3Error as e:
        print(f"kernels : {e}")
    print(f"model   : {mf.root}")
    print(f"layout  : {mf.layout}")
    sizes = mf.sizes()
    for c in COMPONENTS:
        p = mf.paths.get(c)
        if p is None:
            print(f"  {c:13s} MISSING")
            continue
        s = sizes.get(c)
        if s is None:
            print(f"  {c:13s} {p}")
            continue
        dts = ", ".join(f"{k} {v / s['params']:.0%}" for k, v in sorted(s["dtypes"].items()))
        n = s["params"]
        count = f"{n / 1e9:6.2f} B" if n >= 1e9 else f"{n / 1e6:6.2f} M"
        print(f"  {c:13s} {count} params used, {fmt_bytes(s['bytes_on_disk']):>10s} "
              f"on disk ({dts})  {p}")
    if mf.missing:
        print(f"missing component(s): {', '.join(mf.missing)}")
        return 1
    room = available_memory()
    print(f"memory available to this process: {fmt_bytes(room)}")
    print("resident memory per phase (phases run one at a time; the largest sets the need):")
    vae = max(mf.resident_bytes("video_vae", "fp32"), mf.resident_bytes("audio_vae", "fp32"))
    for mode in ("fp32", "bf16", "fp16", "int8", "int4"):
        te, dit = mf.resident_bytes("text_encoder", mode), mf.resident_bytes("transformer", mode)
        need = max(te, dit, vae)
        fits = room is None or need <= 0.8 * room
        print(f"  {mode:5s} text encoder {fmt_bytes(te):>10s}  transformer {fmt_bytes(dit):>10s}  "
              f"decoders (fp32) {fmt_bytes(vae):>10s}  -> {'fits' if fits else 'stream'}")
    isa = ops.active_isa()
    for line in _auto_lines(isa):
        print(line)
    from .weights.auto import auto_choice
    choice = {c: auto_choice(c, mf.paths[c], isa, sizes=sizes.get(c), room=room)
              for c in ("text_encoder", "transformer")}
    te, dit = choice["text_encoder"], choice["transformer"]
    print(f"weights='auto' runs: text encoder {te.mode}, transformer {dit.mode} ({dit.reason})")
    print("recommended: --weights auto" + (f"  (= {dit.mode})" if te.mode == dit.mode else ""))
    return 0


def convert(args):
    from .models import dit as model
    from .weights.model_folder import find_model
    mf = find_model(args.model).require(("transformer", "text_encoder"))
    t0 = time.perf_counter()
    print(f"transformer -> {args.weights} cache ...", flush=True)
    dit = model.DiT.from_pretrained(mf.paths["transformer"], weights=args.weights, streaming=True,
                                    cache_dir=args.cache_dir, isa=args.isa)
    dit.close()
    del dit
    from .models import text_encoder
    print(f"text encoder -> {args.weights} cache ...", flush=True)
    te = text_encoder.TextEncoder.from_pretrained(mf.paths["text_encoder"], weights=args.weights,
                                                  streaming=True, cache_dir=args.cache_dir, isa=args.isa)
    close = getattr(te, "close", None)
    if close:
        close()
    print(f"done in {time.perf_counter() - t0:.1f}s")
    return 0


def demo(args):
    from . import demo as demo_mod
    trained = None if args.random else demo_mod.trained_model()
    if trained is not None:
        print(f"h3cy demo: {demo_mod.TRAINED_NOTE}. Same architecture as MiniMax-H3, toy size - "
              "not MiniMax-H3's quality (`h3cy demo -h` lists its vocabulary).")
        print(f"demo model (release layout): {trained}")
        st = demo_mod.trained_settings(trained)
        args.model = trained
        args.prompt = args.prompt or demo_mod.SHAPES_PROMPT
        args.width, args.height, args.frames, args.steps = st["width"], st["height"], st["frames"], st["steps"]
        args.shift = f"{st['shift_video']},{st['shift_audio']}"
    else:
        print("h3cy demo: a tiny model with RANDOM weights - it shows the plumbing (prompt -> text "
              "states -> denoising -> video and audio decoders -> MP4), not MiniMax-H3's quality.")
        path = demo_mod.build_demo_model(args.cache_dir)
        print(f"demo model (release layout): {path}")
        args.model = path
        args.prompt = args.prompt or demo_mod.DEMO_PROMPT
        # 384x256 and 39 frames: several spatial tiles and two temporal clips, so the demo
        # exercises the decoders' tiling and cross-fades too
        args.width, args.height, args.frames, args.steps = 384, 256, 39, 10
        args.shift = None
    args.weights, args.vae_weights, args.streaming = "fp32", "fp32", False
    args.seconds = None
    args.reuse, args.layers, args.frames_dir, args.latent_out = 1, None, None, None
    args.attention = None
    args.lora, args.preset, args.sampler = None, None, None
    args.dit = args.text_encoder = args.video_vae = args.audio_vae = args.tokenizer = None
    print(f"prompt: {args.prompt!r}")
    return generate(args)


def _model_arg(model, cache_dir=None):
    """``-m demo``: the built-in demo model (the trained one when the package has it, else the
    random one, built once); ``-m demo-random``: the random one -- unless a path of that name
    exists."""
    if model not in ("demo", "demo-random"):
        return model
    from .demo import resolve_model
    return resolve_model(model, cache_dir)


# ---------------------------------------------------------------------------------------------
# batch: many jobs, here or on a Ray cluster
# ---------------------------------------------------------------------------------------------
class _BatchProgress:
    """The batch's events -> one tqdm bar over the jobs whose postfix shows each running
    job's phase and step, or (``--json``) one JSON line per event on stdout."""

    def __init__(self, json_lines=False, quiet=False):
        self.json_lines, self.quiet = json_lines, quiet
        self.bar = None
        self.running = {}          # id -> "phase done/total"
        self._last_json = {}       # id -> (phase, time) of the last progress line printed
        self._last_draw = 0.0

    def __call__(self, ev):
        if self.json_lines:
            self._json(ev)
        elif not self.quiet:
            self._tqdm(ev)

    def _json(self, ev):
        import json
        if ev["event"] == "progress":       # at most two lines a second per job, and each phase change
            last = self._last_json.get(ev["id"])
            now = time.monotonic()
            if last is not None and last[0] == ev["phase"] and now - last[1] < 0.5 and ev["done"] < ev["total"]:
                return
            self._last_json[ev["id"]] = (ev["phase"], now)
        print(json.dumps({k: v for k, v in ev.items() if k != "actor"}), flush=True)

    def _tqdm(self, ev):
        from tqdm import tqdm
        kind = ev["event"]
        if kind == "start":
            if ev["skipped"] or ev["invalid"]:
                print(f"{ev['jobs']} jobs: {ev['skipped']} done before (skipped), {ev['invalid']} invalid, "
                      f"{ev['to_run']} to run", file=sys.stderr)
            self.bar = tqdm(total=ev["to_run"], desc="jobs", unit="clip", dynamic_ncols=True)
        elif kind == "job_start":
            self.running[ev["id"]] = "start"
        elif kind == "progress":
            self.running[ev["id"]] = f"{ev['phase']} {ev['done']}/{ev['total']}"
        elif kind == "retry":
            self.bar.write(f"job {ev['id']}: its worker died ({ev['reason']}); retrying (attempt {ev['attempt']})")
        elif kind == "job_end":
            self.running.pop(ev["id"], None)
            if ev["status"] == "failed":
                (self.bar.write if self.bar else print)(f"job {ev['id']} failed: {ev['error']}")
            if self.bar is not None and ev.get("attempts"):
                self.bar.update(1)
        elif kind == "end":
            self.close()
            return
        if self.bar is not None:
            now = time.monotonic()
            fresh = kind != "progress" or now - self._last_draw >= 0.2
            if fresh:
                self._last_draw = now
            self.bar.set_postfix_str(" | ".join(f"{k}: {v}" for k, v in list(self.running.items())[:4]),
                                     refresh=fresh)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def batch(args):
    """``h3cy batch JOBS.jsonl -m MODEL -o OUTDIR``: exit 0 when every job is done, 1 when
    some failed (the manifest says why), 130 on Ctrl-C."""
    from . import batch as batch_mod
    if not os.path.isfile(args.jobs):
        raise FileNotFoundError(f"jobs file not found: {args.jobs}")
    progress = _BatchProgress(json_lines=args.json, quiet=args.quiet)
    load_kw = dict(weights=args.weights, vae_weights=args.vae_weights, streaming=args.streaming,
                   threads=args.threads, cache_dir=args.cache_dir, keep_loaded=args.keep_loaded,
                   attention=args.attention)
    try:
        manifest = batch_mod.run(args.jobs, args.model, args.output, ray=args.ray, workers=args.workers,
                                 cores_per_actor=args.cores_per_actor, shared_outdir=not args.return_outputs,
                                 retries=args.retries, latents=args.latents, on_event=progress, **load_kw)
    except KeyboardInterrupt:
        progress.close()
        print(f"\nh3cy: interrupted; the running jobs were cancelled, finished outputs are kept in {args.output}/ "
              "and a rerun of this command runs the rest", file=sys.stderr)
        return 130
    finally:
        progress.close()
    failed = [r for r in manifest if r["status"] != "done"]
    if not args.json:
        print(f"{len(manifest) - len(failed)} of {len(manifest)} jobs done -> {args.output}/ "
              f"(manifest: {os.path.join(args.output, batch_mod.MANIFEST)})")
    return 1 if failed else 0


def _add_batch_parser(sub):
    b = sub.add_parser("batch", help="many generations from a JSONL file, here or on a Ray cluster")
    b.add_argument("jobs", help="JSONL: one JSON object of generate's keywords per line, optional id")
    b.add_argument("-m", "--model", required=True, help="model folder, or demo (the built-in demo model)")
    b.add_argument("-o", "--output", required=True, help="output folder: <id>.mp4 and manifest.jsonl")
    b.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run on Ray: auto, ray://host:port, or local (start a local Ray instance)")
    b.add_argument("--workers", type=int, default=None, help="Ray actors (default: one per node; local: 1)")
    b.add_argument("--cores-per-actor", type=int, default=None, help="one Ray actor per this many cores of each node")
    b.add_argument("--return-outputs", action="store_true",
                   help="OUTDIR is not shared storage: actors send the files back and the driver writes them")
    b.add_argument("--retries", type=int, default=2, help="reruns of a job whose actor died (default 2)")
    b.add_argument("--latents", action="store_true", help="also write <id>.npz with the latents")
    b.add_argument("--weights", default="auto", choices=("auto", "fp32", "bf16", "fp16", "int8", "int4"))
    b.add_argument("--vae-weights", default="auto", choices=("auto", "fp32", "bf16", "fp16", "int8"))
    b.add_argument("--streaming", type=_streaming, default="auto", help="auto, on or off")
    b.add_argument("--keep-loaded", action="store_true",
                   help="keep every component resident between jobs (faster, needs all of them in memory)")
    b.add_argument("--threads", type=int, default=None, help="threads per worker (default: its cores)")
    b.add_argument("--cache-dir", default=None)
    b.add_argument("--attention", default=None, choices=("auto", "fp32", "bf16"))
    b.add_argument("--json", action="store_true", help="JSON progress lines on stdout instead of the bar")
    b.add_argument("-q", "--quiet", action="store_true")


def main(argv=None):
    from .errors import Cancelled, H3Error
    p = argparse.ArgumentParser(prog="h3cy", description="MiniMax-H3 (text to video with sound) on the CPU")
    sub = p.add_subparsers(dest="cmd", required=True)
    sc = sub.add_parser("selfcheck", help="check the kernels, time each weights mode's GEMM at the model's "
                        "shapes and store the result for weights=auto")
    sc.add_argument("--threads", type=int, default=None)
    sc.add_argument("--isa", default=None, help="ref, avx2, avxvnni, avx512, amx or neon")
    sc.add_argument("--size", type=_size, default=(512, 2048, 2048), help="M,N,K of the correctness check")
    sc.add_argument("--rows", type=int, default=256,
                    help="activation rows of the timed GEMMs (default 256; 2048, the model's usual size, "
                    "takes ~8x longer)")
    sc.add_argument("--no-save", action="store_true", help="time, but do not store the measurement")
    sc.add_argument("--no-measure", action="store_true", help="only the correctness check")
    sc.add_argument("--shapes", type=_shapes, default=None, help=argparse.SUPPRESS)   # NxK,...: tests

    g = sub.add_parser("generate", help="prompt -> MP4 with sound")
    g.add_argument("-m", "--model", default=None, help="model folder (repository root, FL2VA/ or diffusers layout); "
                   "optional when every component is given as a file")
    for flag, what in (("--dit", "transformer"), ("--text-encoder", "text encoder"),
                       ("--video-vae", "video VAE"), ("--audio-vae", "audio VAE"), ("--tokenizer", "tokenizer")):
        g.add_argument(flag, default=None, help=f"the {what} as a single file (ComfyUI's .safetensors) or a "
                       "folder, in place of the model folder's")
    g.add_argument("-p", "--prompt", required=True)
    g.add_argument("-o", "--output", default=None, help="MP4 to write")
    g.add_argument("--width", type=int, default=None,
                   help="default 512, or with a keyframe the canvas of the first one's aspect ratio")
    g.add_argument("--height", type=int, default=None)
    g.add_argument("--first-frame", default=None, metavar="IMG",
                   help="keyframe the video starts from (an image file; fl2va, stretched onto the canvas)")
    g.add_argument("--last-frame", default=None, metavar="IMG",
                   help="keyframe the video ends on (alone, or with --first-frame: cover-cropped onto its canvas)")
    length = g.add_mutually_exclusive_group()
    length.add_argument("--frames", type=int, default=None, help="frames (rounded up to 17n+5; default 22)")
    length.add_argument("--seconds", type=float, default=None)
    g.add_argument("--steps", type=int, default=None,
                   help="denoiser evaluations (default 20, or the preset's)")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--weights", default="auto", choices=("auto", "fp32", "bf16", "fp16", "int8", "int4"),
                   help="auto (default): stored-quantised files as stored; float files the faster of "
                   "bf16 and int8 on this CPU (h3cy selfcheck measures; int8 without a measurement) that "
                   "fits memory, int4 when neither fits")
    g.add_argument("--vae-weights", default="auto", choices=("auto", "fp32", "bf16", "fp16", "int8"),
                   help="auto (default): fp32 for float files, as released")
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--streaming", type=_streaming, default="auto", help="auto, on or off")
    g.add_argument("--reuse", type=int, default=1, help="approximation: evaluate every N-th step")
    g.add_argument("--layers", type=int, default=None, help="approximation: run only K blocks")
    g.add_argument("--frames-dir", default=None, help="also write PNG frames here")
    g.add_argument("--latent-out", default=None, help="also write the latents (.npz)")
    g.add_argument("--preview", default=None, metavar="PNG",
                   help="rewrite this PNG after every step with the step's clean estimate (latent->RGB)")
    g.add_argument("--preview-mode", default="sheet", choices=("sheet", "middle"),
                   help="--preview shows every latent frame (sheet) or the middle one")
    g.add_argument("--preview-tae", default=None, metavar="SAFETENSORS",
                   help="--preview decodes with this taeh3 file (TAE, at 2x latent size) instead of latent->RGB")
    g.add_argument("--cache-dir", default=None)
    g.add_argument("--isa", default=None)
    g.add_argument("--attention", default=None, choices=("auto", "fp32", "bf16"),
                   help="attention products (default auto: bf16 for bf16/int8/int4 weights where the CPU has them)")
    g.add_argument("--lora", action="append", default=None, metavar="FILE[:STRENGTH]",
                   help="a LoRA for the transformer (.safetensors, PEFT or kohya/ComfyUI keys), strength "
                   "1 unless given; repeat for several")
    g.add_argument("--preset", default=None, metavar="NAME",
                   help="quality, turbo8 or turbo4 (h3cy.presets): steps, sampler and shifts the "
                   "command line does not give")
    g.add_argument("--sampler", default=None, metavar="NAME",
                   help="euler (default; diffusers' bits) or res_multistep (ComfyUI's)")
    g.add_argument("--shift", default=None, metavar="V,A",
                   help="the schedule's video and audio shifts (default 12,3)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    i = sub.add_parser("info", help="layout, components and memory needs of a model folder, or what a single file "
                       "holds, and what weights=auto runs on this CPU (alone: only the latter)")
    i.add_argument("model", nargs="?", default=None)

    c = sub.add_parser("convert", help="build the fp16/int8/int4 weight caches ahead of time")
    c.add_argument("model")
    c.add_argument("--weights", required=True, choices=("fp16", "int8", "int4"))
    c.add_argument("--cache-dir", default=None)
    c.add_argument("--isa", default=None)

    from .demo import vocabulary_text
    d = sub.add_parser("demo", help="run the whole pipeline on the built-in toy model (no download)",
                       description="The whole pipeline on h3cy's toy demo model: MiniMax-H3's architecture "
                       "at toy size, trained on synthetic shapes (when the package carries the trained "
                       "weights; otherwise, or with --random, a tiny model with random weights). "
                       "The trained model's vocabulary -- " + vocabulary_text() + ".")
    d.add_argument("-o", "--output", default="demo.mp4")
    d.add_argument("-p", "--prompt", default=None,
                   help="e.g. 'a blue square moves up, a low tone' (see the vocabulary above)")
    d.add_argument("--seed", type=int, default=42)
    d.add_argument("--random", action="store_true", help="use the tiny random model even when the trained "
                   "one is present")
    d.add_argument("--cache-dir", default=None, help="where the demo model is built (once)")
    d.add_argument("--threads", type=int, default=None)
    d.add_argument("--isa", default=None)
    d.add_argument("-q", "--quiet", action="store_true")

    _add_batch_parser(sub)

    args = p.parse_args(argv)
    cmds = {"selfcheck": selfcheck, "generate": generate, "info": info, "convert": convert, "demo": demo,
            "batch": batch}
    try:
        return cmds[args.cmd](args)
    except KeyboardInterrupt:
        print("\nh3cy: interrupted; nothing was written", file=sys.stderr)
        return 130
    except Cancelled as e:
        print(f"h3cy: cancelled ({e}); nothing was written", file=sys.stderr)
        return 130
    except (H3Error, FileNotFoundError, NotADirectoryError) as e:
        print(f"h3cy: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
