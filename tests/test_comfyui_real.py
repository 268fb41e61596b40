"""The pack inside a real ComfyUI: only when COMFYUI_DIR points to a ComfyUI checkout.

ComfyUI is not on PyPI, so CI cannot run this; run it by hand (comfyui_h3/README.md):

    COMFYUI_DIR=/path/to/ComfyUI COMFYUI_PYTHON=/path/to/comfy-venv/bin/python \\
        python -m pytest -v tests/test_comfyui_real.py

It starts ComfyUI headless on the CPU on 127.0.0.1 with a throw-away ``--base-directory``
(models/h3/h3cy-demo = h3cy's tiny demo model, custom_nodes/comfyui_h3 = this pack), submits
the example workflow through the HTTP API, checks the saved MP4 and FLAC, checks that the same
workflow resubmitted is served from ComfyUI's cache, cancels a longer run through /interrupt
and checks that the next run still works.  ``COMFYUI_H3_LOG=path`` keeps the server's log.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

from _comfy_api import to_api

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
pytestmark = pytest.mark.skipif(not COMFYUI_DIR, reason="COMFYUI_DIR is not set: needs a ComfyUI checkout (an optional tool; ComfyUI is not on PyPI)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACK = os.path.join(ROOT, "comfyui_h3")
WORKFLOW = os.path.join(PACK, "workflows", "h3cy_text_to_video.json")
SMALL = {"width": 64, "height": 64, "frames": 22, "seconds": 0.0, "steps": 2, "seed": 5}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Comfy:
    def __init__(self, url):
        self.url = url

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def post(self, path, body=None):
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def submit(self, prompt):
        return self.post("/prompt", {"prompt": prompt, "client_id": uuid.uuid4().hex})["prompt_id"]

    def wait(self, prompt_id, timeout=300):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            h = self.get(f"/history/{prompt_id}")
            if prompt_id in h and h[prompt_id].get("status", {}).get("completed") is not None \
                    and h[prompt_id]["status"].get("status_str") in ("success", "error"):
                return h[prompt_id]
            time.sleep(0.2)
        raise TimeoutError(f"prompt {prompt_id} did not finish in {timeout} s")

    def running(self, prompt_id):
        return any(item[1] == prompt_id for item in self.get("/queue")["queue_running"])


# where the files loader's four single files go in ComfyUI's own model folders
FILE_FOLDERS = {"dit": "diffusion_models", "text_encoder": "text_encoders", "video_vae": "vae",
                "audio_vae": "vae"}


@pytest.fixture(scope="module")
def comfy(tmp_path_factory, comfy_files):
    import h3cy.demo
    base = tmp_path_factory.mktemp("comfy-base")
    demo = h3cy.demo.build_demo_model(str(tmp_path_factory.mktemp("demo")))
    os.makedirs(base / "models" / "h3")
    os.symlink(demo, base / "models" / "h3" / "h3cy-demo")
    for role, folder in FILE_FOLDERS.items():     # Comfy-Org-style single files, as downloaded
        os.makedirs(base / "models" / folder, exist_ok=True)
        os.symlink(comfy_files[role], base / "models" / folder / os.path.basename(comfy_files[role]))
    blob = open(comfy_files["dit"], "rb").read()  # a truncated download of the transformer
    (base / "models" / "diffusion_models" / "cut_dit.safetensors").write_bytes(blob[:-4096])
    os.makedirs(base / "custom_nodes")
    os.symlink(PACK, base / "custom_nodes" / "comfyui_h3")
    port = _free_port()
    log_path = base / "comfyui.log"
    python = os.environ.get("COMFYUI_PYTHON", sys.executable)
    cmd = [python, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port), "--base-directory", str(base),
           "--disable-auto-launch", "--database-url", "sqlite:///:memory:", "--preview-method", "auto"]
    env = dict(os.environ, H3CY_CACHE_DIR=str(base / "h3cy-cache"), PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=COMFYUI_DIR, stdout=log, stderr=subprocess.STDOUT, env=env)
    c = Comfy(f"http://127.0.0.1:{port}")
    try:
        t0 = time.monotonic()
        while True:
            try:
                c.get("/object_info/H3cyGenerate")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > 180:
                    raise RuntimeError("ComfyUI did not start:\n" + log_path.read_text()[-4000:])
                time.sleep(0.5)
        c.base, c.log_path = base, log_path
        yield c
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if os.environ.get("COMFYUI_H3_LOG"):
            shutil.copy(log_path, os.environ["COMFYUI_H3_LOG"])


def small_prompt(comfy, **sampler):
    with open(WORKFLOW) as f:
        wf = json.load(f)
    oi = comfy.get("/object_info")
    return to_api(wf, oi, {"H3cyModelLoader": {"model": "h3cy-demo", "weights": "fp32", "streaming": "off"},
                           "H3cySampler": dict(SMALL, **sampler)})


def test_nodes_registered(comfy):
    oi = comfy.get("/object_info")
    for n in ("H3cyModelLoader", "H3cyTextEncode", "H3cySampler", "H3cyDecode", "H3cyGenerate"):
        assert oi[n]["category"] == "h3cy" and oi[n]["python_module"].startswith("custom_nodes.")
    assert "h3cy-demo" in oi["H3cyModelLoader"]["input"]["required"]["model"][1]["options"]
    assert oi["H3cySampler"]["input"]["required"]["seed"][1]["control_after_generate"] is True
    assert oi["H3cyDecode"]["output"] == ["IMAGE", "AUDIO"]


def _saved(comfy, outputs, key):
    items = [it for out in outputs.values() for it in out.get(key, [])]
    assert len(items) == 1, outputs
    it = items[0]
    return os.path.join(comfy.base, it.get("type", "output"), it["subfolder"], it["filename"])


def test_example_workflow_saves_video_and_audio(comfy):
    import av
    pid = comfy.submit(small_prompt(comfy))
    h = comfy.wait(pid)
    assert h["status"]["status_str"] == "success", h["status"]
    video = _saved(comfy, h["outputs"], "images")            # SaveVideo reports its file under "images"
    audio = _saved(comfy, h["outputs"], "audio")
    with av.open(video) as c:
        vs = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(vs)]
        assert (vs.codec_context.width, vs.codec_context.height) == (64, 64)
        assert round(float(vs.average_rate)) == 24
        assert len(frames) == 22 and max(f.std() for f in frames) > 0
        assert len(c.streams.audio) == 1 and c.streams.audio[0].channels == 2
    with av.open(audio) as c:
        st = c.streams.audio[0]
        assert st.rate == 32000 and st.channels == 2
        n = sum(fr.samples for fr in c.decode(st))
        assert n == round(22 * 32000 / 24)
    # the identical workflow again: ComfyUI serves every node from its cache
    pid2 = comfy.submit(small_prompt(comfy))
    h2 = comfy.wait(pid2)
    cached = [m[1]["nodes"] for m in h2["status"]["messages"] if m[0] == "execution_cached"]
    assert h2["status"]["status_str"] == "success" and cached and "3" in cached[0]


def test_interrupt_then_next_run_works(comfy):
    # long enough on the tiny model (~4600 video tokens, 200 steps) to be inside the sampler
    pid = comfy.submit(small_prompt(comfy, width=384, height=384, frames=107, steps=200, seed=11))
    t0 = time.monotonic()
    while not comfy.running(pid):
        assert time.monotonic() - t0 < 60
        time.sleep(0.05)
    time.sleep(3.0)                                        # well inside the sampler
    comfy.post("/interrupt")
    t_int = time.monotonic()
    h = comfy.wait(pid, timeout=120)
    stop_s = time.monotonic() - t_int
    kinds = [m[0] for m in h["status"]["messages"]]
    assert h["status"]["status_str"] == "error" and "execution_interrupted" in kinds, kinds
    assert not h["outputs"]
    print(f"interrupt -> stopped in {stop_s:.2f} s")
    assert stop_s < 10
    pid2 = comfy.submit(small_prompt(comfy, seed=12))
    h2 = comfy.wait(pid2)
    assert h2["status"]["status_str"] == "success", h2["status"]
    assert _saved(comfy, h2["outputs"], "images").endswith(".mp4")


FILES_WORKFLOW = os.path.join(PACK, "workflows", "h3cy_files_to_video_api.json")


def files_prompt(comfy_files, **picks):
    """The shipped API-format files workflow on the tiny single files (small geometry)."""
    with open(FILES_WORKFLOW) as f:
        prompt = json.load(f)
    for node in prompt.values():
        if node["class_type"] == "H3cyFilesLoader":
            node["inputs"].update({r: os.path.basename(comfy_files[r]) for r in FILE_FOLDERS},
                                  weights="fp32", streaming="off")
            node["inputs"].update(picks)
        elif node["class_type"] == "H3cySampler":
            node["inputs"].update(SMALL)
    return prompt


def test_files_loader_lists_comfyui_folders_and_generates(comfy, comfy_files):
    """The user's downloads in models/diffusion_models, text_encoders and vae are listed
    and run as they are."""
    import av
    req = comfy.get("/object_info/H3cyFilesLoader")["H3cyFilesLoader"]["input"]["required"]
    for role in FILE_FOLDERS:
        assert os.path.basename(comfy_files[role]) in req[role][1]["options"], (role, req[role])
    h = comfy.wait(comfy.submit(files_prompt(comfy_files)))
    assert h["status"]["status_str"] == "success", h["status"]
    with av.open(_saved(comfy, h["outputs"], "images")) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
        assert len(frames) == 22 and max(f.std() for f in frames) > 0


def test_a_corrupt_file_fails_in_the_files_loader(comfy, comfy_files):
    """A truncated transformer is reported by the loader node, not by Text Encode."""
    h = comfy.wait(comfy.submit(files_prompt(comfy_files, dit="cut_dit.safetensors")))
    errors = [m[1] for m in h["status"]["messages"] if m[0] == "execution_error"]
    assert h["status"]["status_str"] == "error" and errors, h["status"]
    assert errors[0]["node_type"] == "H3cyFilesLoader", errors[0]
    assert "cut_dit.safetensors" in errors[0]["exception_message"], errors[0]


# a websocket client run by the server's own interpreter (aiohttp is one of ComfyUI's
# requirements, not one of h3cy's): submits a prompt under its client id and counts the
# binary preview frames ComfyUI sends that client until the prompt has run
WS_CLIENT = r"""
import asyncio, json, sys, aiohttp
async def main(url, prompt):
    cid = "h3cy-preview-test"
    out = {"previews": 0, "magic": [], "error": None}
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url.replace("http", "ws", 1) + "/ws?clientId=" + cid) as ws:
            async with s.post(url + "/prompt", json={"prompt": json.loads(prompt), "client_id": cid}) as r:
                pid = (await r.json())["prompt_id"]
            while True:
                m = await ws.receive(timeout=300)
                if m.type == aiohttp.WSMsgType.BINARY:
                    event = int.from_bytes(m.data[:4], "big")
                    if event in (1, 4):          # PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA
                        out["previews"] += 1
                        out["magic"].append(m.data[8:11].hex())
                elif m.type == aiohttp.WSMsgType.TEXT:
                    d = json.loads(m.data)
                    if d["type"] == "execution_error":
                        out["error"] = d["data"].get("exception_message")
                        break
                    if d["type"] == "executing" and d["data"].get("node") is None and d["data"].get("prompt_id") == pid:
                        break
                else:
                    break
    print(json.dumps(out))
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_sampler_previews_reach_the_websocket_client(comfy):
    """With --preview-method auto, ComfyUI sends the client one JPEG preview per sampling
    step from H3 Sampler (h3cy's latent->RGB preview through ComfyUI's progress bar)."""
    python = os.environ.get("COMFYUI_PYTHON", sys.executable)
    prompt = small_prompt(comfy, seed=21)
    r = subprocess.run([python, "-c", WS_CLIENT, comfy.url, json.dumps(prompt)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["error"] is None, out
    assert out["previews"] >= SMALL["steps"], out
    assert set(out["magic"]) == {"ffd8ff"}, out            # JPEG images
