"""h3cy.batch and ``h3cy batch`` in this process (no Ray), over the demo model at a tiny
size: bad job lines fail alone with a clear reason, the manifest makes a rerun skip finished
jobs and rerun edited ones, Ctrl-C stops the running job and leaves no partial file,
``-m demo`` works for generate and info, and Ray is never imported by h3cy itself.  The Ray
path is tests/test_batch_ray.py."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import h3cy
from h3cy import batch

# 64x64, 22 frames, 2 steps: about a second a job on 2 cores
TINY = dict(width=64, height=64, frames=22, steps=2)


def _jobs(n, **kw):
    return [{"prompt": "A red fox in the snow", "seed": 100 + i, **TINY, **kw} for i in range(n)]


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "h3cy.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _partials(folder):
    return [p for p in os.listdir(folder) if "partial" in p]


def _manifest(outdir):
    with open(os.path.join(outdir, batch.MANIFEST)) as f:
        return [json.loads(line) for line in f]


def test_parse_jobs_reports_each_bad_line_with_its_reason():
    lines = ['{"prompt": "a", "seed": 1}', '{"prompt": "a", "colour": "red"}', '{"prompt": "a", "width": 100}',
             "not json", "", '["a"]', '{"prompt": "a", "steps": "ten"}', '{"id": "x y", "prompt": "a"}',
             '{"id": 1, "prompt": "a"}', '{"prompt": ""}', '{"prompt": "a", "frames": 22, "seconds": 1}',
             '{"id": "ok", "prompt": "a", "seconds": 1.5, "preset": "turbo8"}', '{"prompt": "a", "preset": "fast"}']
    jobs = {j.line: j for j in batch.parse_jobs(lines)}
    assert 5 not in jobs                                   # blank lines are skipped, numbering kept
    assert jobs[1].error is None and jobs[1].id == "1" and jobs[1].params == {"prompt": "a", "seed": 1}
    assert jobs[12].error is None and jobs[12].id == "ok"
    want = {2: "unknown key 'colour'", 3: "nearest legal: 96", 4: "not JSON", 6: "must be a JSON object",
            7: "steps must be an integer", 8: "id must be", 9: "id '1' is used by an earlier line",
            10: "prompt is missing", 11: "not both", 13: "fast"}
    for line, text in want.items():
        assert jobs[line].error is not None and jobs[line].error.startswith(f"line {line}: "), jobs[line].error
        assert text in jobs[line].error, (line, jobs[line].error)


def test_bad_lines_fail_alone_and_the_others_run(tmp_path):
    path = tmp_path / "jobs.jsonl"
    good = _jobs(2)
    path.write_text("\n".join([json.dumps(good[0]), json.dumps({"prompt": "x", "colour": 1}),
                               json.dumps({**good[1], "width": 100})]) + "\n")
    r = _run("batch", str(path), "-m", "demo", "-o", str(tmp_path / "out"), "--weights", "fp32", "--json")
    assert r.returncode == 1, r.stderr               # some job failed
    events = [json.loads(line) for line in r.stdout.splitlines()]
    ends = {e["id"]: e for e in events if e["event"] == "job_end"}
    assert ends["1"]["status"] == "done" and os.path.exists(tmp_path / "out" / "1.mp4")
    assert ends["2"]["status"] == "failed" and "unknown key 'colour'" in ends["2"]["error"]
    assert ends["3"]["status"] == "failed" and "width must be a multiple of 32" in ends["3"]["error"]
    assert events[0]["event"] == "start" and events[-1] == {"event": "end", "done": 1, "failed": 2, "cancelled": 0}
    assert any(e["event"] == "progress" and e["phase"] == "denoise" for e in events)
    assert {m["id"]: m["status"] for m in _manifest(tmp_path / "out")} == {"1": "done", "2": "failed", "3": "failed"}


def test_resume_skips_finished_jobs_and_reruns_an_edited_one(tmp_path):
    out = tmp_path / "out"
    jobs = _jobs(4)
    stop = h3cy.CancelToken()
    ran = []

    def interrupt_after_two(ev):
        if ev["event"] == "job_end" and ev["status"] == "done":
            ran.append(ev["id"])
            if len(ran) == 2:
                stop.cancel()
    with pytest.raises(h3cy.Cancelled):
        batch.run(jobs, "demo", out, weights="fp32", cancel=stop, on_event=interrupt_after_two)
    assert ran == ["1", "2"] and sorted(os.listdir(out)) == ["1.mp4", "2.mp4", batch.MANIFEST]
    first = {m["id"]: m for m in _manifest(out)}
    assert first["3"]["status"] == "cancelled"

    def started(run_jobs):
        ids = []
        man = batch.run(run_jobs, "demo", out, weights="fp32",
                        on_event=lambda ev: ev["event"] == "job_start" and ids.append(ev["id"]))
        assert [m["status"] for m in man] == ["done"] * 4
        return ids, man
    ids, man = started(jobs)
    assert ids == ["3", "4"]                      # only the rest ran
    assert man[0]["finished"] == first["1"]["finished"] and man[0]["hash"] == first["1"]["hash"]
    assert started(jobs)[0] == []                 # all done: nothing runs
    jobs[1]["seed"] = 7                           # an edited line runs again, alone
    ids, man = started(jobs)
    assert ids == ["2"] and man[1]["hash"] != first["2"]["hash"]
    os.remove(out / "4.mp4")                      # a finished job whose output is gone runs again
    assert started(jobs)[0] == ["4"]
    # the file keeps one line per job
    assert sorted(m["id"] for m in _manifest(out)) == ["1", "2", "3", "4"]
    assert not _partials(out)


def test_ctrl_c_cancels_the_running_job_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "jobs.jsonl"
    # the long job: seconds of denoising (a large step count would spend longer preparing
    # its timesteps before the first block than denoising)
    jobs = _jobs(1) + [dict(_jobs(1)[0], id="long", width=256, height=256, steps=60)] + _jobs(1, seed=9)
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "h3cy.cli", "batch", str(path), "-m", "demo", "-o", str(out),
                             "--weights", "fp32", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stdout:                       # wait until the long job is denoising
        ev = json.loads(line)
        seen.append(ev)
        if ev["event"] == "progress" and ev["id"] == "long" and ev["phase"] == "denoise":
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "finished outputs are kept" in err
    ends = {e["id"]: e for e in map(json.loads, rest.splitlines()) if e["event"] == "job_end"}
    # stopped inside the denoiser (within a block), not at the end of its 5000 steps
    assert ends["long"]["status"] == "cancelled" and "denoise cancelled after" in ends["long"]["error"]
    done, total = (int(v) for v in ends["long"]["error"].split("after ")[1].split(" of "))
    assert done < total
    assert ends["3"]["status"] == "cancelled" and ends["3"]["attempts"] == 0    # never started
    assert sorted(os.listdir(out)) == ["1.mp4", batch.MANIFEST]                 # the finished one kept
    assert {m["id"]: m["status"] for m in _manifest(out)} == {"1": "done", "long": "cancelled", "3": "cancelled"}


def test_demo_is_a_model_name_for_generate_and_info(tmp_path):
    out = tmp_path / "d.mp4"
    r = _run("generate", "-m", "demo", "-p", "A red fox", "-o", str(out), "--width", "64", "--height", "64",
             "--steps", "2", "--weights", "fp32", "-q")
    assert r.returncode == 0, r.stderr
    assert out.exists()
    r = _run("info", "demo")
    assert r.returncode == 0, r.stderr
    assert "layout  : release" in r.stdout and "demo-model" in r.stdout


def test_h3cy_never_imports_ray():
    code = "import sys, h3cy, h3cy.batch, h3cy.cli; print('ray' in sys.modules, 'torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_workers_without_ray_is_an_error(tmp_path):
    with pytest.raises(h3cy.H3Error, match="need ray="):
        batch.run(_jobs(1), "demo", tmp_path, workers=2)
