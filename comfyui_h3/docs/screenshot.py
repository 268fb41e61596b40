"""Render a workflow in a running ComfyUI with headless Chromium and save a PNG.

    python comfyui_h3/docs/screenshot.py http://127.0.0.1:8188 comfyui_h3/workflows/h3cy_text_to_video.json out.png

Drives Chromium through its DevTools protocol (aiohttp, which ComfyUI already needs): open
the page, ``app.loadGraphData(workflow)``, fit the view, capture.
"""
import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request


async def _cdp(ws_url, url, workflow, out, width, height):
    import aiohttp
    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, max_msg_size=0) as ws:
        n = 0

        async def call(method, **params):
            nonlocal n
            n += 1
            await ws.send_json({"id": n, "method": method, "params": params})
            while True:
                msg = await ws.receive_json()
                if msg.get("id") == n:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return msg.get("result", {})

        async def js(expr):
            r = await call("Runtime.evaluate", expression=expr, awaitPromise=True, returnByValue=True)
            return r.get("result", {}).get("value")

        # no "get started" template dialog, no minimap over the nodes
        for key, value in (("Comfy.TutorialCompleted", b"true"), ("Comfy.Minimap.Visible", b"false")):
            req = urllib.request.Request(f"{url}/settings/{key}", data=value, method="POST")
            urllib.request.urlopen(req, timeout=10).close()
        await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        await call("Page.enable")
        await call("Page.navigate", url=url)
        for _ in range(240):                       # the frontend boots in a few seconds
            if await js("!!(window.app && window.app.graph && window.app.canvas)"):
                break
            await asyncio.sleep(0.5)
        else:
            raise RuntimeError("ComfyUI's frontend did not start")
        await asyncio.sleep(2)
        await js("(() => { document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, "
                 ".p-toast-close-button').forEach(b => b.click()); return 1; })()")
        await js(f"app.loadGraphData({json.dumps(workflow)}).then(() => 1)")
        await asyncio.sleep(2)
        await js("(() => { try { const c = app.canvas; c.ds.scale = 0.85; c.ds.offset = [10, 20]; "
                 "c.setDirty(true, true); } catch (e) {} return 1; })()")
        await js("(() => { document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, "
                 ".p-toast-close-button').forEach(b => b.click()); return 1; })()")
        await asyncio.sleep(1.5)
        shot = await call("Page.captureScreenshot", format="png")
        with open(out, "wb") as f:
            f.write(base64.b64decode(shot["data"]))


def main(url, workflow_path, out, width=1900, height=560):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        raise SystemExit("no chromium on PATH (apt install chromium)")
    with open(workflow_path) as f:
        workflow = json.load(f)
    profile = tempfile.mkdtemp(prefix="h3cy-shot-")
    port = 9333
    proc = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--use-gl=swiftshader",
                             f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                             f"--window-size={width},{height}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    pages = [p for p in json.loads(r.read()) if p.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        asyncio.run(_cdp(pages[0]["webSocketDebuggerUrl"], url, workflow, out, width, height))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    print(os.path.abspath(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
