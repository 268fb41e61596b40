"""The h3cy console script: demo and generate write valid MP4s, Ctrl-C writes nothing,
convert builds caches, errors are one line with exit status 2."""
import os
import signal
import subprocess
import sys
import time

import av
import pytest

from h3cy import demo as demo_mod



def _run(*args, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "h3cy.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


def _probe(path):
    with av.open(os.fspath(path)) as c:
        v, a = c.streams.video[0], c.streams.audio[0]
        n = sum(1 for _ in c.decode(video=0))
        return dict(frames=n, w=v.width, h=v.height, fps=v.average_rate, rate=a.rate, ch=a.channels,
                    dur=float(a.duration * a.time_base))


def test_demo_writes_an_mp4_and_says_the_weights_are_random(tmp_path):
    out = tmp_path / "demo.mp4"
    r = _run("demo", "--random", "-o", str(out), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert r.returncode == 0, r.stderr
    assert "RANDOM weights" in r.stdout and "not MiniMax-H3's quality" in r.stdout
    p = _probe(out)
    assert p == dict(frames=39, w=384, h=256, fps=24, rate=32000, ch=2, dur=p["dur"])
    assert abs(p["dur"] - 39 / 24) <= 1024 / 32000 + 1e-3
    # built once: the second run reuses the cached model
    r2 = _run("demo", "--random", "-o", str(tmp_path / "demo2.mp4"), "--cache-dir", str(tmp_path / "cache"), "-q")
    assert r2.returncode == 0 and _probe(tmp_path / "demo2.mp4")["frames"] == 39


def test_demo_help_lists_the_vocabulary():
    r = _run("demo", "-h")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())                     # argparse wraps lines
    for words in ("red", "green", "blue", "yellow", "circle", "square", "moves to the left", "moves to the right",
                  "moves up", "moves down", "a high tone", "a low tone", "trained on synthetic shapes"):
        assert words in text, words


def test_demo_runs_a_trained_model_when_the_package_has_one(tmp_path, monkeypatch, capsys):
    """`h3cy demo` takes the package's trained model when its folder holds one (none is shipped
    yet: docs/demo.md): it says it is a toy and uses the clip size and sampling the model's
    model_index.json records.  A random-weight model in that layout stands in for it."""
    import json
    from h3cy import cli
    root = demo_mod.build_demo_model(str(tmp_path / "cache"))
    index = os.path.join(root, "FL2VA", "model_index.json")
    with open(index) as f:
        meta = json.load(f)
    meta["_minimax_h3"].update(clip={"width": 64, "height": 64, "frames": 22}, sampling={"steps": 2})
    with open(index, "w") as f:
        json.dump(meta, f)
    monkeypatch.setattr(demo_mod, "TRAINED_FOLDER", root)
    out = tmp_path / "demo.mp4"
    assert cli.main(["demo", "-o", str(out), "-p", "a blue square moves up, a low tone", "-q"]) in (0, None)
    said = capsys.readouterr().out
    assert "toy model trained on synthetic shapes" in said and "RANDOM" not in said
    p = _probe(out)
    assert (p["frames"], p["w"], p["h"], p["ch"]) == (22, 64, 64, 2)     # 64x64, not the default 128x128
    # --random still means the random model, whatever the package holds
    assert cli.main(["demo", "--random", "-o", str(tmp_path / "r.mp4"), "--cache-dir", str(tmp_path / "cache"),
                     "-q"]) in (0, None)
    assert "RANDOM" in capsys.readouterr().out


def test_generate_writes_mp4_frames_and_latents(tiny_pipeline, tmp_path):
    out = tmp_path / "g.mp4"
    r = _run("generate", "-m", tiny_pipeline.diffusers, "-p", "A red fox", "-o", str(out), "--width", "64",
             "--height", "64", "--steps", "2", "--weights", "fp32", "--frames-dir", str(tmp_path / "fr"),
             "--latent-out", str(tmp_path / "lat.npz"), "--cache-dir", str(tmp_path / "c"),
             "--attention", "fp32")
    assert r.returncode == 0, r.stderr
    p = _probe(out)
    assert (p["frames"], p["w"], p["h"], p["fps"], p["ch"]) == (22, 64, 64, 24, 2)
    assert len(os.listdir(tmp_path / "fr")) == 22
    assert (tmp_path / "lat.npz").exists()
    assert "peak memory" in r.stdout
    for phase in ("encode prompt", "denoise", "decode audio", "decode video"):
        assert phase in r.stderr          # one tqdm bar per phase


def test_generate_preview_png_shows_the_last_clean_estimate(tiny_pipeline, tmp_path):
    import numpy as np
    from PIL import Image
    from h3cy.preview import contact_sheet, latent_to_rgb
    for mode in ("sheet", "middle"):
        png, lat = tmp_path / f"{mode}.png", tmp_path / f"{mode}.npz"
        r = _run("generate", "-m", tiny_pipeline.diffusers, "-p", "A red fox", "--width", "64", "--height", "64",
                 "--steps", "2", "--weights", "fp32", "--latent-out", str(lat), "--preview", str(png),
                 "--preview-mode", mode, "--cache-dir", str(tmp_path / "c"), "--attention", "fp32", "-q")
        assert r.returncode == 0, r.stderr
        z = np.load(lat)["video_latent"]            # the last step's clean estimate is the result
        frames = latent_to_rgb(z) if mode == "sheet" else latent_to_rgb(z[:, z.shape[1] // 2:][:, :1])
        with Image.open(png) as im:
            np.testing.assert_array_equal(np.asarray(im.convert("RGB")), contact_sheet(frames, scale=4))


def test_generate_preview_tae_decodes_with_a_taeh3_file(tiny_pipeline, tmp_path):
    import numpy as np
    from PIL import Image
    from safetensors.numpy import save_file
    from h3cy import taeh3
    from h3cy.preview import contact_sheet, tae_frames
    rng = np.random.default_rng(0)
    state = {k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in taeh3.expected_keys().items()}
    save_file(state, str(tmp_path / "taeh3.safetensors"))
    png, lat = tmp_path / "tae.png", tmp_path / "tae.npz"
    r = _run("generate", "-m", tiny_pipeline.diffusers, "-p", "A red fox", "--width", "64", "--height", "64",
             "--steps", "2", "--weights", "fp32", "--latent-out", str(lat), "--preview", str(png),
             "--preview-tae", str(tmp_path / "taeh3.safetensors"), "--cache-dir", str(tmp_path / "c"),
             "--attention", "fp32", "-q")
    assert r.returncode == 0, r.stderr
    z = np.load(lat)["video_latent"]
    tae = taeh3.TAEH3Decoder(state, space_upscale=False, time_upscale=False)
    with Image.open(png) as im:
        got = np.asarray(im.convert("RGB"))
    want = contact_sheet(tae_frames(tae, z, "sheet"), scale=2)       # 7 frames of 8x8 (2x the latent)
    assert got.shape == want.shape == (3 * 16 + 2, 3 * 16 + 2, 3)       # 3x3 tiles of 16 px, 1 px gaps
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1       # threads may round differently


def test_preview_tae_without_preview_or_with_a_bad_file_is_a_clear_error(tmp_path):
    r = _run("generate", "-m", "/nonexistent/model", "-p", "x", "--preview-tae", str(tmp_path / "t.safetensors"))
    assert r.returncode == 2 and "--preview-tae needs --preview" in r.stderr
    r = _run("generate", "-m", "/nonexistent/model", "-p", "x", "--preview", str(tmp_path / "p.png"),
             "--preview-tae", str(tmp_path / "missing.safetensors"))
    assert r.returncode == 2 and "missing.safetensors" in r.stderr and "/nonexistent/model" not in r.stderr


def test_ctrl_c_stops_cleanly_and_writes_nothing(tiny_pipeline, tmp_path):
    out = tmp_path / "never.mp4"
    cmd = [sys.executable, "-m", "h3cy.cli", "generate", "-m", tiny_pipeline.diffusers, "-p", "x",
           "-o", str(out), "--width", "64", "--height", "64", "--steps", "5000", "--weights", "fp32",
           "--cache-dir", str(tmp_path / "c")]
    # a runner that starts us in the background may have SIGINT ignored, and the child would
    # inherit that: give it the default disposition so Python installs its Ctrl-C handler
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"),   # see the bars as drawn
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    seen = ""
    fd = proc.stderr.fileno()
    os.set_blocking(fd, False)
    while time.time() < deadline and "denoise" not in seen and proc.poll() is None:
        try:
            seen += os.read(fd, 65536).decode("utf-8", "replace")
        except BlockingIOError:
            pass
        time.sleep(0.1)
    assert "denoise" in seen, seen
    proc.send_signal(signal.SIGINT)
    t0 = time.time()
    rc = proc.wait(60)
    assert rc == 130
    assert time.time() - t0 < 10, "Ctrl-C took effect only at the end of the run"
    assert not out.exists()
    assert [p for p in os.listdir(tmp_path) if "partial" in p] == []


def test_convert_builds_the_int8_caches(tiny_pipeline, tmp_path):
    cache = tmp_path / "cache"
    r = _run("convert", tiny_pipeline.release, "--weights", "int8", "--cache-dir", str(cache))
    assert r.returncode == 0, r.stderr
    names = os.listdir(cache)
    assert sum(n.startswith("h3cy-int8-") and n.endswith(".h3w") for n in names) == 2, names


@pytest.mark.parametrize("args", [["generate", "-m", "/nonexistent/model", "-p", "x", "-o", "o.mp4"],
                                  ["convert", "/nonexistent/model", "--weights", "int8"]])
def test_errors_are_one_line_exit_2(args):
    r = _run(*args)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("h3cy: error:") and "/nonexistent/model" in lines[0]


def test_illegal_size_is_a_clear_error(tiny_pipeline, tmp_path):
    r = _run("generate", "-m", tiny_pipeline.diffusers, "-p", "x", "-o", str(tmp_path / "o.mp4"),
             "--width", "100", "--weights", "fp32")
    assert r.returncode == 2 and "nearest legal" in r.stderr


# -- few-step options: --lora, --preset, --sampler, --shift ------------------------------------
@pytest.fixture(scope="module")
def cli_lora(tiny_pipeline, tmp_path_factory):
    from test_dit_lora import BLOCK_MODULES, make_peft_lora
    return make_peft_lora(tiny_pipeline.dit.diffusers_fp32, str(tmp_path_factory.mktemp("cli_lora")),
                          BLOCK_MODULES, seed=5)


def test_lora_preset_sampler_shift_equal_the_library(tiny_pipeline, cli_lora, tmp_path):
    import numpy as np

    import h3cy
    lat = tmp_path / "lat.npz"
    r = _run("generate", "-m", tiny_pipeline.diffusers, "-p", "A red fox", "--width", "64", "--height", "64",
             "--weights", "fp32", "--attention", "fp32", "--cache-dir", str(tmp_path / "c"), "-q",
             "--lora", f"{cli_lora}:0.6", "--preset", "turbo4", "--sampler", "res_multistep",
             "--shift", "5,2.5", "--latent-out", str(lat))
    assert r.returncode == 0, r.stderr
    got = np.load(lat)
    pipe = h3cy.load(tiny_pipeline.diffusers, weights="fp32", attention="fp32", cache_dir=str(tmp_path / "c"),
                     loras=[(cli_lora, 0.6)])
    kw = dict(width=64, height=64, seed=42, output="latent")
    want = pipe.generate("A red fox", preset="turbo4", sampler="res_multistep", shift_video=5.0,
                         shift_audio=2.5, **kw)
    assert np.array_equal(got["video_latent"], want.video_latent)
    assert np.array_equal(got["audio_latent"], want.audio_latent)
    # and every option counts: without the LoRA, or with Euler, or the preset's shifts, it differs
    pipe.unload_lora("pytorch_lora_weights")
    with pytest.warns(RuntimeWarning, match="no LoRA"):
        base = pipe.generate("A red fox", preset="turbo4", sampler="res_multistep", shift_video=5.0,
                             shift_audio=2.5, **kw)
    assert not np.array_equal(base.video_latent, want.video_latent)


def test_two_loras_stack_on_the_command_line(tiny_pipeline, cli_lora, tmp_path):
    import shutil

    import numpy as np
    other = tmp_path / "other.safetensors"
    shutil.copy(cli_lora, other)
    common = ["generate", "-m", tiny_pipeline.diffusers, "-p", "x", "--width", "64", "--height", "64",
              "--weights", "fp32", "--attention", "fp32", "--cache-dir", str(tmp_path / "c"), "-q",
              "--steps", "1"]
    # the same LoRA twice at 0.3 each is the LoRA once at 0.6 (up to rounding); default strength 1
    r1 = _run(*common, "--lora", f"{cli_lora}:0.3", "--lora", f"{other}:0.3", "--latent-out",
              str(tmp_path / "a.npz"))
    r2 = _run(*common, "--lora", f"{cli_lora}:0.6", "--latent-out", str(tmp_path / "b.npz"))
    r3 = _run(*common, "--latent-out", str(tmp_path / "c.npz"))
    assert r1.returncode == 0 and r2.returncode == 0 and r3.returncode == 0, r1.stderr + r2.stderr
    a, b, c = (np.load(tmp_path / f"{n}.npz")["video_latent"] for n in "abc")
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()
    assert np.abs(b - c).max() > 1e-3 * np.abs(c).max()


@pytest.mark.parametrize("flag,value,says", [
    ("--lora", "/nonexistent/x.safetensors", "no such file: /nonexistent/x.safetensors"),
    ("--lora", "LORA:strong", "strength after ':' must be a number"),
    ("--lora", "LORA:nan", "must be finite"),
    ("--preset", "turbo3", "preset must be one of"),
    ("--sampler", "dpmpp", "--sampler must be one of euler, res_multistep"),
    ("--shift", "6", "--shift must be V,A"),
    ("--shift", "6,-3", "--shift values must be positive"),
])
def test_bad_few_step_options_are_one_line_exit_2(cli_lora, flag, value, says):
    # checked before the model is opened: the model path does not even exist
    r = _run("generate", "-m", "/nonexistent/model", "-p", "x", flag, value.replace("LORA", cli_lora))
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("h3cy: error:") and says in lines[0], r.stderr
