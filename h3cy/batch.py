"""Many clips: a JSONL file of ``generate`` jobs, run in this process or on a Ray cluster.

>>> import h3cy.batch
>>> manifest = h3cy.batch.run("jobs.jsonl", "MiniMax-H3", "out/")              # doctest: +SKIP
>>> manifest = h3cy.batch.run(jobs, "demo", "out/", ray="auto")                # doctest: +SKIP

Each job is one JSON object with :meth:`h3cy.Pipeline.generate`'s keywords (``JOB_KEYS``)
and an optional ``id`` (default: its line number).  Outputs are ``OUTDIR/<id>.mp4`` (and
``<id>.npz`` with ``latents=True``), written under a temporary name and renamed when
complete, and ``OUTDIR/manifest.jsonl``: one line per job with ``id``, ``status``
(done / failed / cancelled), ``output``, ``node``, ``seconds``, ``error``, ``attempts``,
``started``, ``finished`` and ``hash`` -- a hash of the job's parameters and of the
settings that change its output, so a rerun skips a finished job whose line is unchanged
and runs an edited one again.

Without ``ray`` the jobs run here one after another through the same :class:`Worker` a Ray
actor wraps.  With ``ray`` (an address ``ray.init`` takes, or ``"local"``) one actor per
node -- or per ``cores_per_actor`` cores, or ``workers`` actors -- loads the pipeline once,
pins its threads to its cores, and pulls jobs from the driver's queue as it finishes them.
A job whose actor dies is retried on another (``retries`` times, then failed with the
reason); Ctrl-C (or ``cancel``) cancels the running jobs through their cancel tokens, keeps
the finished outputs and leaves no partial file.  Ray is imported only on this path.
"""
import collections
import contextlib
import datetime
import fcntl
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time

from .errors import Cancelled, H3Error, H3ValueError
from .sampling.layout import Geometry
from .sampling.sampler import CancelToken

__all__ = ["run", "read_jobs", "parse_jobs", "Job", "Worker", "JOB_KEYS", "MANIFEST"]

MANIFEST = "manifest.jsonl"
# generate()'s keywords a job line may give, with the types each accepts
_INT, _NUM, _STR = (int,), (int, float), (str,)
JOB_KEYS = {"prompt": _STR, "seed": _INT, "width": _INT, "height": _INT, "seconds": _NUM, "frames": _INT,
            "steps": _INT, "preset": _STR, "sampler": _STR, "shift_video": _NUM, "shift_audio": _NUM,
            "reuse": _INT, "layers": _INT}
_SAFE_ID = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
# seconds between the driver's progress polls of the Ray actors
POLL_INTERVAL = 0.25


# ---------------------------------------------------------------------------------------------
# jobs
# ---------------------------------------------------------------------------------------------
class Job:
    """One line of a jobs file: ``id``, ``line`` (1-based), ``params`` (generate's keywords),
    ``hash`` (set by :func:`run`) and ``error`` (why the line cannot run, or None)."""

    __slots__ = ("id", "line", "params", "hash", "error")

    def __init__(self, id, line, params=None, error=None):
        self.id, self.line, self.params, self.error = id, line, params or {}, error
        self.hash = None

    def __repr__(self):
        return f"<h3cy.batch.Job {self.id} line {self.line}{' error' if self.error else ''}>"


def _check_params(obj):
    """generate()'s keywords from one job object; raises H3ValueError naming what is wrong."""
    unknown = sorted(set(obj) - set(JOB_KEYS) - {"id"})
    if unknown:
        raise H3ValueError(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"(a job takes id, {', '.join(JOB_KEYS)})")
    params = {k: v for k, v in obj.items() if k != "id"}
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, JOB_KEYS[k]):
            want = {_INT: "an integer", _NUM: "a number", _STR: "a string"}[JOB_KEYS[k]]
            raise H3ValueError(f"{k} must be {want}, got {json.dumps(v)}")
    if not params.get("prompt"):
        raise H3ValueError("prompt is missing or empty")
    if "seconds" in params and "frames" in params:
        raise H3ValueError("give frames or seconds, not both")
    if params.get("steps", 1) < 1:
        raise H3ValueError(f"steps must be >= 1, got {params['steps']}")
    w, h = params.get("width", 512), params.get("height", 512)
    if "seconds" in params:
        Geometry.from_seconds(params["seconds"], w, h)      # raises naming the nearest legal size
    else:
        Geometry(w, h, params.get("frames", 22))
    if "preset" in params:
        from . import presets
        presets.get(params["preset"])
    return params


def parse_jobs(items):
    """[Job] from an iterable of JSON texts or dicts (one per line; blank lines and lines
    starting with ``#`` are skipped but keep the numbering).  A bad line becomes a Job with
    ``error`` set, never an exception: the other jobs still run."""
    jobs, seen = [], set()
    for n, item in enumerate(items, start=1):
        if isinstance(item, str):
            if not item.strip() or item.lstrip().startswith("#"):
                continue
            try:
                obj = json.loads(item)
            except ValueError as e:
                jobs.append(Job(str(n), n, error=f"line {n}: not JSON ({e})"))
                continue
        else:
            obj = item
        if not isinstance(obj, dict):
            jobs.append(Job(str(n), n, error=f"line {n}: a job must be a JSON object, got {type(obj).__name__}"))
            continue
        jid = obj.get("id", n)
        if isinstance(jid, bool) or not isinstance(jid, (int, str)) or not str(jid) \
                or not set(str(jid)) <= _SAFE_ID or str(jid).startswith("."):
            jobs.append(Job(str(n), n, error=f"line {n}: id must be a number or a name of letters, digits, "
                                             f"'.', '_' and '-' (not starting with '.'), got {json.dumps(jid)}"))
            continue
        jid = str(jid)
        if jid in seen:
            jobs.append(Job(f"{jid}@line{n}", n, error=f"line {n}: id {jid!r} is used by an earlier line"))
            continue
        seen.add(jid)
        try:
            jobs.append(Job(jid, n, _check_params(obj)))
        except H3Error as e:
            jobs.append(Job(jid, n, error=f"line {n}: {e}"))
    return jobs


def read_jobs(path):
    """Parse a JSONL jobs file (see :func:`parse_jobs`)."""
    with open(path, encoding="utf-8") as f:
        return parse_jobs(f.read().splitlines())


def _job_hash(params, settings):
    text = json.dumps({"job": params, "settings": settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# the manifest
# ---------------------------------------------------------------------------------------------
def _now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Manifest:
    """``OUTDIR/manifest.jsonl``.  Records are appended as jobs end (a crash loses nothing)
    and :meth:`compact` rewrites the file with one line per job at the end of a run; the
    last line of an id wins when reading."""

    def __init__(self, outdir):
        self.outdir = outdir
        self.path = os.path.join(outdir, MANIFEST)
        self.records = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue        # a line cut by a crash: that job simply runs again
                    if isinstance(rec, dict) and "id" in rec:
                        self.records[str(rec["id"])] = rec

    def finished(self, job):
        """The record of ``job`` when it is done with the same parameters and its output
        is still there, else None."""
        rec = self.records.get(job.id)
        if rec is None or rec.get("status") != "done" or rec.get("hash") != job.hash:
            return None
        if not rec.get("output") or not os.path.exists(os.path.join(self.outdir, rec["output"])):
            return None
        return rec

    def add(self, rec):
        self.records[rec["id"]] = rec
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()

    def compact(self):
        tmp = self.path + f".{os.getpid()}.partial"
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in self.records.values():
                f.write(json.dumps(rec) + "\n")
        os.replace(tmp, self.path)


def _remove_partials(outdir, job_id):
    """The temporary files of ``job_id`` a dead worker may have left in ``outdir``."""
    for p in glob.glob(os.path.join(glob.escape(outdir), f".{glob.escape(job_id)}.*partial*")):
        with contextlib.suppress(OSError):
            os.remove(p)


# ---------------------------------------------------------------------------------------------
# the worker: one loaded pipeline, one job at a time (in this process or inside a Ray actor)
# ---------------------------------------------------------------------------------------------
def _claim_cores(n):
    """Pin this process to ``n`` of its cores, disjoint from other h3cy batch workers on
    this machine: slot k of the affinity set's ``n``-core slices is claimed through a lock
    file, which the OS releases when the process dies.  Returns (lock file, cores) or None
    when ``n`` covers every core."""
    cpus = sorted(os.sched_getaffinity(0))
    if n is None or n >= len(cpus):
        return None
    d = os.path.join(tempfile.gettempdir(), "h3cy-batch-cores")
    os.makedirs(d, exist_ok=True)
    key = hashlib.sha256(repr(cpus).encode()).hexdigest()[:8]
    for k in range(len(cpus) // n):
        f = open(os.path.join(d, f"{key}-{n}-{k}.lock"), "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return f, cpus[k * n:(k + 1) * n]
    return None       # more workers than slices: share the cores rather than fail


def _pin_all_threads(cores):
    """Every thread of this process (a thread-pool thread that runs jobs included), and so
    every thread they start, onto ``cores``."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cores)


class Worker:
    """A pipeline loaded once, running one job at a time; :meth:`cancel` and
    :meth:`progress` may be called from another thread.

    Parameters
    ----------
    model : a model folder, or "demo" (built here on first use; see :func:`h3cy.demo.resolve_model`)
    load_kw : dict — :func:`h3cy.load` keywords (weights, vae_weights, streaming, cache_dir, ...)
    cores : int, optional — pin to this many of the machine's cores (disjoint from the
        other workers here) and run that many threads
    """

    def __init__(self, model, load_kw=None, cores=None):
        from . import pipeline
        from .demo import resolve_model
        load_kw = dict(load_kw or {})
        self.cores = None
        claim = _claim_cores(cores) if cores else None
        if claim is not None:
            self._core_lock, self.cores = claim
            _pin_all_threads(self.cores)
        if cores and load_kw.get("threads") is None:
            load_kw["threads"] = len(self.cores) if self.cores else int(cores)
        self.node = socket.gethostname()
        self.pipe = pipeline.load(resolve_model(model, load_kw.get("cache_dir")), **load_kw)
        self._lock = threading.Lock()
        self._token = None
        self._progress = None

    def info(self):
        return {"node": self.node, "pid": os.getpid(), "cores": self.cores}

    def cancel(self):
        with self._lock:
            if self._token is not None:
                self._token.cancel()

    def progress(self):
        """(job id, phase, done, total) of the running job, or None."""
        return self._progress

    def run(self, job_id, params, outdir=None, latents=False, cancel=None, on_progress=None):
        """Run one job.  With ``outdir`` the outputs are written there (temporary name, then
        rename); without it they come back as bytes (``data``, ``latents_data``).  Returns a
        dict: ``status`` done/failed/cancelled, ``node``, ``seconds``, ``started``,
        ``finished``, ``error``; failures and cancellation are results, not exceptions
        (except KeyboardInterrupt, which propagates after the partial files are gone)."""
        from . import media
        if self.cores:
            _pin_all_threads(self.cores)      # a new pool thread of a Ray actor
        token = cancel if cancel is not None else CancelToken()
        with self._lock:
            self._token = token
        t0, started = time.perf_counter(), _now()
        here = outdir if outdir is not None else tempfile.mkdtemp(prefix="h3cy-batch-")
        mp4 = os.path.join(here, f"{job_id}.mp4")
        npz = os.path.join(here, f"{job_id}.npz")
        npz_tmp = os.path.join(here, f".{job_id}.{os.getpid()}.partial.npz")
        out = {"id": job_id, "node": self.node, "started": started, "error": None}
        sink = {}

        def progress(done, total, phase):
            self._progress = (job_id, phase, done, total)
            if on_progress is not None:
                on_progress(job_id, phase, done, total)

        def on_audio(audio, sample_rate):
            sink["w"] = media.Mp4Writer(mp4, g.width, g.height, fps=g.fps, sample_rate=sample_rate,
                                        audio=media.fit_audio(audio, g.frames, g.fps, sample_rate))

        def on_frames(frames, first):
            sink["w"].add_frames(frames)
        try:
            p = dict(params)
            g = (Geometry.from_seconds(p.pop("seconds"), p.get("width", 512), p.get("height", 512))
                 if "seconds" in p else Geometry(p.get("width", 512), p.get("height", 512), p.get("frames", 22)))
            p.update(width=g.width, height=g.height, frames=g.frames)
            res = self.pipe.generate(p.pop("prompt"), **p, on_progress=progress, cancel=token,
                                     on_frames=on_frames, on_audio=on_audio)
            if latents:
                import numpy as np
                np.savez(npz_tmp, video_latent=res.video_latent, audio_latent=res.audio_latent)
            sink.pop("w").close()
            if latents:
                os.replace(npz_tmp, npz)
            out.update(status="done")
            if outdir is None:
                with open(mp4, "rb") as f:
                    out["data"] = f.read()
                if latents:
                    with open(npz, "rb") as f:
                        out["latents_data"] = f.read()
        except Cancelled as e:
            out.update(status="cancelled", error=str(e))
        except (H3Error, ValueError, OSError, MemoryError) as e:
            out.update(status="failed", error=f"{type(e).__name__}: {e}")
        except Exception as e:      # noqa: BLE001  (a bug must fail the job, not the batch)
            out.update(status="failed", error=f"{type(e).__name__}: {e}")
        finally:
            if "w" in sink:
                sink.pop("w").abort()
            with contextlib.suppress(FileNotFoundError):
                os.remove(npz_tmp)
            if outdir is None:
                shutil.rmtree(here, ignore_errors=True)
            with self._lock:
                self._token = None
            self._progress = None
        out.update(seconds=round(time.perf_counter() - t0, 3), finished=_now())
        return out

    def close(self):
        self.pipe.release()


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------
class _Stop:
    """The batch's stop request: a CancelToken set by the caller, by Ctrl-C (the first
    SIGINT cancels the running jobs, a second raises KeyboardInterrupt at once), or by the
    driver itself."""

    def __init__(self, token):
        self.token = token if token is not None else CancelToken()
        self.interrupted = False
        self.on_stop = []

    @property
    def stopping(self):
        return self.token.cancelled

    def trigger(self):
        self.token.cancel()
        for fn in self.on_stop:
            fn()

    @contextlib.contextmanager
    def sigint(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            self.trigger()
        old = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, old)


def run(jobs, model, outdir, *, ray=None, workers=None, cores_per_actor=None, shared_outdir=True,
        retries=2, latents=False, cancel=None, on_event=None, ray_init=None, **load_kw):
    """Run a batch of generations; returns the manifest of these jobs (a list of dicts in
    job order, as written to ``OUTDIR/manifest.jsonl``).

    Parameters
    ----------
    jobs : a JSONL file, or an iterable of dicts / JSON texts (see :func:`parse_jobs`)
    model : a model folder, or "demo" (the built-in demo model)
    outdir : where ``<id>.mp4`` and ``manifest.jsonl`` go (created when missing)
    ray : None (run here), ``"local"`` (start a local Ray instance), or an address
        ``ray.init`` takes (``"auto"``, ``"ray://host:10001"``); when Ray is already
        initialised in this process it is used as it is
    workers : Ray actors to start (default: one per node; with ``ray="local"``, 1)
    cores_per_actor : one actor per this many cores of each node instead
    shared_outdir : False when OUTDIR is not on storage every node sees: the actors send
        the files back to the driver, which writes them
    retries : times a job whose actor died is run again (on another actor) before it is
        recorded as failed
    latents : also write ``<id>.npz`` with both latents
    cancel : h3cy.CancelToken — stop: running jobs are cancelled, nothing new starts
    on_event : callable(dict) — ``{"event": "start"|"job_start"|"progress"|"retry"|"job_end"|"end",
        ...}``; Ray events also carry ``actor`` (the actor's handle)
    ray_init : dict — extra ``ray.init`` keywords
    **load_kw : :func:`h3cy.load` keywords (weights, vae_weights, streaming, threads,
        cache_dir, keep_loaded, isa, attention)

    Raises Cancelled when stopped through ``cancel``, KeyboardInterrupt on Ctrl-C -- after
    the running jobs stopped, the partial files were removed and the manifest was written.
    """
    if ray is None and (workers is not None or cores_per_actor is not None):
        raise H3ValueError("workers and cores_per_actor need ray= (an address, 'auto' or 'local')")
    if retries < 0:
        raise H3ValueError(f"retries must be >= 0, got {retries}")
    job_list = read_jobs(jobs) if isinstance(jobs, (str, bytes, os.PathLike)) else parse_jobs(jobs)
    outdir = os.path.abspath(os.fspath(outdir))
    os.makedirs(outdir, exist_ok=True)
    model_key = model if model == "demo" and not os.path.exists(model) else os.path.abspath(os.fspath(model))
    settings = {"model": model_key, "latents": bool(latents),
                **{k: load_kw.get(k) for k in ("weights", "vae_weights", "attention")}}
    manifest = Manifest(outdir)
    emit = on_event or (lambda ev: None)
    todo, results, invalid = [], {}, []
    for job in job_list:
        if job.error is None:
            job.hash = _job_hash(job.params, settings)
            rec = manifest.finished(job)
            if rec is not None:
                results[job.id] = rec
                continue
            todo.append(job)
        else:
            rec = {"id": job.id, "status": "failed", "output": None, "node": None, "seconds": 0.0,
                   "error": job.error, "attempts": 0, "line": job.line, "hash": None,
                   "started": None, "finished": _now()}
            manifest.add(rec)
            results[job.id] = rec
            invalid.append(rec)
    emit({"event": "start", "jobs": len(job_list), "to_run": len(todo),
          "skipped": sum(r["status"] == "done" for r in results.values()), "invalid": len(invalid)})
    for rec in invalid:
        emit({"event": "job_end", **rec})
    for job in todo:            # a previous run's leftovers (a killed process cannot clean up)
        _remove_partials(outdir, job.id)
    stop = _Stop(cancel)

    def finish(job, out, attempts):
        rec = {"id": job.id, "status": out["status"], "output": None, "node": out.get("node"),
               "seconds": out.get("seconds", 0.0), "error": out.get("error"), "attempts": attempts,
               "line": job.line, "hash": job.hash, "started": out.get("started"),
               "finished": out.get("finished") or _now()}
        if out["status"] == "done":
            rec["output"] = f"{job.id}.mp4"
            if "data" in out:                # not shared storage: the driver writes the files
                _write_atomic(os.path.join(outdir, rec["output"]), out["data"])
                if "latents_data" in out:
                    _write_atomic(os.path.join(outdir, f"{job.id}.npz"), out["latents_data"])
        else:
            _remove_partials(outdir, job.id)
        manifest.add(rec)
        results[job.id] = rec
        emit({"event": "job_end", **rec})

    try:
        with stop.sigint():
            if ray is None:
                _run_local(todo, model, outdir, load_kw, latents, stop, emit, finish)
            else:
                _run_ray(todo, model, outdir, load_kw, latents, stop, emit, finish, ray=ray, workers=workers,
                         cores_per_actor=cores_per_actor, shared_outdir=shared_outdir, retries=retries,
                         ray_init=ray_init or {})
    finally:
        for job in todo:
            _remove_partials(outdir, job.id)
        manifest.compact()
    counts = collections.Counter(results[j.id]["status"] for j in job_list if j.id in results)
    emit({"event": "end", "done": counts["done"], "failed": counts["failed"],
          "cancelled": counts["cancelled"] + sum(j.id not in results for j in job_list)})
    if stop.stopping:
        if stop.interrupted:
            raise KeyboardInterrupt
        raise Cancelled(f"batch cancelled: {counts['done']} of {len(job_list)} jobs done")
    return [results[j.id] for j in job_list]


def _write_atomic(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path).replace(".", f".{os.getpid()}.partial.", 1))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _run_local(todo, model, outdir, load_kw, latents, stop, emit, finish):
    """The jobs one after another in this process: the path a Ray actor runs, minus Ray."""
    if not todo:
        return
    worker = Worker(model, load_kw)
    stop.on_stop.append(worker.cancel)
    try:
        for job in todo:
            if stop.stopping:
                finish(job, {"status": "cancelled", "error": "cancelled before it started"}, 0)
                continue
            emit({"event": "job_start", "id": job.id, "node": worker.node, "attempt": 1})
            out = worker.run(job.id, job.params, outdir, latents=latents, cancel=stop.token,
                             on_progress=lambda i, ph, d, t: emit({"event": "progress", "id": i, "phase": ph,
                                                                   "done": d, "total": t}))
            finish(job, out, 1)
    finally:
        worker.close()


# ---- Ray --------------------------------------------------------------------------------------
def _actor_class(ray):
    class BatchActor:
        """A Worker inside a Ray actor; threaded (max_concurrency) so that cancel and
        progress run while a job does."""

        def __init__(self, model, load_kw, cores):
            self.w = Worker(model, load_kw, cores=cores)

        def info(self):
            return self.w.info()

        def run(self, job_id, params, outdir, latents):
            return self.w.run(job_id, params, outdir, latents=latents)

        def cancel(self):
            self.w.cancel()

        def progress(self):
            return self.w.progress()
    return ray.remote(max_concurrency=4, max_restarts=0, max_task_retries=0)(BatchActor)


def _actor_plan(ray, workers, cores_per_actor):
    """[(num_cpus, node id or None)] per actor: one per node using all its CPUs (default),
    one per ``cores_per_actor`` CPUs of each node, or ``workers`` spread over the cluster."""
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    if not nodes:
        raise H3Error("the Ray cluster has no live node with a CPU")
    if cores_per_actor is not None:
        if cores_per_actor < 1:
            raise H3ValueError(f"cores_per_actor must be >= 1, got {cores_per_actor}")
        plan = [(cores_per_actor, n["NodeID"]) for n in nodes
                for _ in range(int(n["Resources"]["CPU"] // cores_per_actor))]
        if not plan:
            raise H3ValueError(f"no node has {cores_per_actor} CPUs")
        return plan[:workers] if workers else plan
    if workers is not None:
        if workers < 1:
            raise H3ValueError(f"workers must be >= 1, got {workers}")
        total = sum(int(n["Resources"]["CPU"]) for n in nodes)
        return [(max(1, total // workers), None)] * workers
    return [(int(n["Resources"]["CPU"]), n["NodeID"]) for n in nodes]


def _run_ray(todo, model, outdir, load_kw, latents, stop, emit, finish, *, ray, workers, cores_per_actor,
             shared_outdir, retries, ray_init):
    try:
        import ray as ray_mod
    except ImportError:
        raise H3Error("the Ray path needs Ray: pip install 'h3cy[ray]'") from None
    from ray.exceptions import RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    if not todo:
        return
    started_here = False
    if not ray_mod.is_initialized():
        kw = dict(include_dashboard=False, log_to_driver=False, **ray_init)
        if ray == "local":
            kw.setdefault("num_cpus", len(os.sched_getaffinity(0)))
            ray_mod.init(address="local", **kw)       # a new instance, never a running cluster
            workers = 1 if workers is None and cores_per_actor is None else workers
        else:
            ray_mod.init(address=ray, **kw)
        started_here = True
    actors = []
    try:
        cls = _actor_class(ray_mod)
        for cpus, node in _actor_plan(ray_mod, workers, cores_per_actor):
            opts = dict(num_cpus=cpus)
            if node is not None:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            actors.append(cls.options(**opts).remote(model, load_kw, cpus))
        _drive(ray_mod, RayActorError, actors, todo, outdir if shared_outdir else None, latents, stop, emit,
               finish, retries)
    finally:
        for a in actors:
            with contextlib.suppress(Exception):
                ray_mod.kill(a)
        if started_here:
            ray_mod.shutdown()


def _drive(ray, RayActorError, actors, todo, outdir, latents, stop, emit, finish, retries):
    """Hand queued jobs to idle actors; collect results; retry jobs whose actor died; poll
    and forward progress; on stop, cancel the running jobs and wait for them."""
    # an actor that cannot start (a model path missing on its node) fails here, by name
    infos = {}
    pending = {a.info.remote(): i for i, a in enumerate(actors)}
    first_error = None
    while pending and not stop.stopping:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_INTERVAL)
        for ref in ready:
            i = pending.pop(ref)
            try:
                infos[i] = ray.get(ref)
            except Exception as e:     # noqa: BLE001
                first_error = first_error or e
    if not infos:
        if stop.stopping:
            for job in todo:
                finish(job, {"status": "cancelled", "error": "cancelled before it started"}, 0)
            return
        raise H3Error(f"no Ray actor could load the model: {_cause(first_error)}")
    idle = collections.deque(sorted(infos))
    alive = set(infos)
    queue = collections.deque((job, 1) for job in todo)
    running = {}                # ref -> (actor index, job, attempt)
    cancel_sent = False
    last_poll = 0.0
    while queue or running:
        if stop.stopping:
            if not cancel_sent:
                for i, _, _ in running.values():
                    with contextlib.suppress(Exception):
                        actors[i].cancel.remote()
                cancel_sent = True
            while queue:
                job, attempt = queue.popleft()
                finish(job, {"status": "cancelled", "error": "cancelled before it started"}, attempt - 1)
        while idle and queue and not stop.stopping:
            i = idle.popleft()
            job, attempt = queue.popleft()
            ref = actors[i].run.remote(job.id, job.params, outdir, latents)
            running[ref] = (i, job, attempt)
            emit({"event": "job_start", "id": job.id, "node": infos[i]["node"], "attempt": attempt,
                  "actor": actors[i]})
        if not running:
            if queue and not alive:
                while queue:
                    job, attempt = queue.popleft()
                    finish(job, {"status": "failed", "error": "every Ray actor died"}, attempt - 1)
            continue
        ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_INTERVAL)
        for ref in ready:
            i, job, attempt = running.pop(ref)
            try:
                out = ray.get(ref)
            except RayActorError as e:
                alive.discard(i)
                if outdir is not None:
                    _remove_partials(outdir, job.id)
                if stop.stopping:
                    finish(job, {"status": "cancelled", "error": f"its actor stopped: {_cause(e)}"}, attempt)
                elif attempt <= retries and alive:
                    emit({"event": "retry", "id": job.id, "attempt": attempt + 1, "reason": _cause(e)})
                    queue.appendleft((job, attempt + 1))
                else:
                    why = "no actor left" if not alive else f"{attempt} attempts"
                    finish(job, {"status": "failed", "error": f"its actor died ({why}): {_cause(e)}"}, attempt)
                continue
            except Exception as e:     # noqa: BLE001  (Worker.run returns failures; this is Ray's own)
                out = {"status": "failed", "error": _cause(e)}
            idle.append(i)
            finish(job, out, attempt)
        now = time.monotonic()
        if running and now - last_poll >= POLL_INTERVAL:
            last_poll = now
            _poll_progress(ray, actors, running, emit)


def _poll_progress(ray, actors, running, emit):
    busy = {i for i, _, _ in running.values()}
    refs = {actors[i].progress.remote(): i for i in busy}
    try:
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=2 * POLL_INTERVAL)
    except Exception:      # noqa: BLE001
        return
    for ref in ready:
        try:
            p = ray.get(ref)
        except Exception:  # noqa: BLE001  (a dead actor: its job's own ref reports it)
            continue
        if p is not None:
            jid, phase, done, total = p
            emit({"event": "progress", "id": jid, "phase": phase, "done": done, "total": total,
                  "actor": actors[refs[ref]]})


def _cause(e):
    """A one-line reason from a Ray exception (its own text is many lines)."""
    if e is None:
        return "unknown"
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:500]
