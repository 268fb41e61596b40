"""h3cy.batch on a local Ray cluster (``ray.init(num_cpus=2)``, shared by this module: Ray
takes ~15 s to start) with two one-core actors over the demo model: the clips equal
single-machine ``generate`` with the same seeds; a job whose actor is killed mid-job is
retried on the other and nothing partial is left; SIGINT to the driver cancels the running
jobs; outputs come back to the driver when OUTDIR is not shared.  The actors inherit this
process's environment (PYTHONPATH, H3CY_CACHE_DIR), so they import this tree's h3cy."""
import json
import os
import signal
import threading

import av
import numpy as np
import pytest

import h3cy
from h3cy import batch
from h3cy.demo import resolve_model

import ray  # noqa: E402  (a test extra: a missing ray is a broken install, not a skip)

TINY = dict(width=64, height=64, frames=22, steps=2)


def _jobs(n, **kw):
    return [{"prompt": "A red fox in the snow", "seed": 200 + i, **TINY, **kw} for i in range(n)]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _decode(path):
    """uint8 frames [F, H, W, 3] and float32 audio [2, N] of an MP4."""
    with av.open(os.fspath(path)) as c:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    with av.open(os.fspath(path)) as c:
        audio = np.concatenate([f.to_ndarray() for f in c.decode(audio=0)], axis=1)
    return frames, audio


def test_six_jobs_on_two_actors_equal_single_machine_generate(cluster, tmp_path):
    jobs = _jobs(6)
    jobs[3]["prompt"] = "Waves roll onto a sandy beach"
    nodes_seen = set()
    man = batch.run(jobs, "demo", tmp_path / "out", ray="auto", workers=2, weights="fp32", latents=True,
                    on_event=lambda ev: ev["event"] == "job_start" and nodes_seen.add(ev["actor"]))
    assert [m["status"] for m in man] == ["done"] * 6, man
    assert len(nodes_seen) == 2                     # both actors pulled jobs
    pipe = h3cy.load(resolve_model("demo"), weights="fp32")
    for job, m in zip(jobs, man):
        p = {k: v for k, v in job.items() if k != "prompt"}
        want = pipe.generate(job["prompt"], **p)
        want.save(tmp_path / "want.mp4")
        lat = np.load(tmp_path / "out" / f"{m['id']}.npz")
        np.testing.assert_array_equal(lat["video_latent"], want.video_latent)
        np.testing.assert_array_equal(lat["audio_latent"], want.audio_latent)
        got_f, got_a = _decode(tmp_path / "out" / m["output"])
        want_f, want_a = _decode(tmp_path / "want.mp4")
        assert got_f.shape == (22, 64, 64, 3) and got_a.shape[0] == 2
        assert got_f.std() > 0 and np.abs(got_a).max() > 0
        np.testing.assert_array_equal(got_f, want_f)
        np.testing.assert_array_equal(got_a, want_a)


def test_a_killed_actor_s_job_is_retried_and_nothing_partial_is_left(cluster, tmp_path):
    out = tmp_path / "out"
    jobs = _jobs(4)
    jobs.insert(1, dict(_jobs(1)[0], id="long", width=256, height=256, steps=40))   # ~2 s of denoising
    events = []

    def kill_mid_job(ev):
        events.append({k: v for k, v in ev.items() if k != "actor"})
        if ev["event"] == "progress" and ev["id"] == "long" and ev["phase"] == "denoise" \
                and not any(e["event"] == "retry" or e.get("killed") for e in events):
            # what the dying actor would leave behind had it been writing the MP4
            open(out / f".long.{12345}.partial.mp4", "wb").close()
            events[-1]["killed"] = True
            ray.kill(ev["actor"])
    man = batch.run(jobs, "demo", out, ray="auto", workers=2, weights="fp32", on_event=kill_mid_job)
    assert any(e.get("killed") for e in events), "the long job was never seen denoising"
    retries = [e for e in events if e["event"] == "retry"]
    assert [r["id"] for r in retries] == ["long"] and retries[0]["attempt"] == 2
    assert "died" in retries[0]["reason"] or "Died" in retries[0]["reason"]
    assert [m["status"] for m in man] == ["done"] * 5
    assert {m["id"]: m["attempts"] for m in man}["long"] == 2
    assert sorted(os.listdir(out)) == sorted([f"{m['id']}.mp4" for m in man] + [batch.MANIFEST])


def test_sigint_to_the_driver_cancels_the_running_jobs(cluster, tmp_path):
    out = tmp_path / "out"
    # both long jobs start at once (one per actor); the short one waits in the queue
    jobs = [dict(_jobs(1)[0], id=f"long{i}", width=256, height=256, steps=100) for i in range(2)] + _jobs(1)
    denoising = set()

    def on_event(ev):
        if ev["event"] == "progress" and ev["phase"] == "denoise" and ev["id"].startswith("long"):
            denoising.add(ev["id"])
            if denoising == {"long0", "long1"}:
                # the signal lands on the main thread, as Ctrl-C would
                threading.Timer(0.0, os.kill, (os.getpid(), signal.SIGINT)).start()
                denoising.add("sent")
    with pytest.raises(KeyboardInterrupt):
        batch.run(jobs, "demo", out, ray="auto", workers=2, weights="fp32", on_event=on_event)
    assert "sent" in denoising
    man = {m["id"]: m for m in map(json.loads, open(out / batch.MANIFEST))}
    assert man["3"]["status"] == "cancelled" and man["3"]["attempts"] == 0      # never started
    for jid in ("long0", "long1"):
        # each stopped inside its denoiser, within a block of the cancel, not at its end
        assert man[jid]["status"] == "cancelled" and "denoise cancelled after" in man[jid]["error"], man[jid]
        done, total = (int(v) for v in man[jid]["error"].split("after ")[1].split(" of "))
        assert done < total
    assert os.listdir(out) == [batch.MANIFEST]


def test_outputs_return_to_the_driver_when_outdir_is_not_shared(cluster, tmp_path):
    man = batch.run(_jobs(2), "demo", tmp_path / "out", ray="auto", workers=2, weights="fp32",
                    shared_outdir=False, latents=True)
    assert [m["status"] for m in man] == ["done"] * 2
    assert sorted(os.listdir(tmp_path / "out")) == ["1.mp4", "1.npz", "2.mp4", "2.npz", batch.MANIFEST]
    frames, _ = _decode(tmp_path / "out" / "1.mp4")
    assert frames.shape == (22, 64, 64, 3)
