"""A full 33B-shaped MiniMax-H3 forward (50 blocks, random weights made in memory), for
peak memory and time on a big machine:

    python bench/full_forward.py --weights int8 --threads 16 --S 1872

Builds the model (weights converted in memory; tensors of one shape share one random
draw so generation does not dominate), prepares the AdaLN tables for one timestep,
releases the AdaLN weights, runs one forward, and prints load time, forward time, the
extrapolation to 20 steps and the peak RSS at each stage.
"""
import argparse
import resource
import time

import numpy as np

from h3cy.models.dit import DiT
from synthetic import SyntheticSource


def peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def rss_gb():
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith("VmRSS")][0] / 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--weights", default="int8")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--S", type=int, default=1872)
    p.add_argument("--layers", type=int, default=50)
    a = p.parse_args()
    t0 = time.perf_counter()
    src = SyntheticSource(shared=True, num_layers=a.layers)
    blk = "transformer_blocks.0."   # draw the shared tensors once before the parallel build
    for n in ("attn.to_out.0.weight", "ff.net.2.weight", "adaln_proj.linear.weight", "norm1.weight",
              "attn.norm_q.weight"):
        src.get(blk + n)
    src.qkv(blk + "attn.")
    src.ffn_up(blk + "ff.")
    d = DiT(src, weights=a.weights, threads=a.threads)
    t_load = time.perf_counter() - t0
    print(f"load {t_load:.1f} s  rss {rss_gb():.1f} GB  peak {peak_gb():.1f} GB  isa {d.isa} threads {d.threads}", flush=True)
    t0 = time.perf_counter()
    d.prepare_timesteps([0.5])
    d.release_adaln()
    import gc
    gc.collect()
    print(f"adaln tables {time.perf_counter() - t0:.1f} s  rss after release {rss_gb():.1f} GB", flush=True)
    S, L, Na = a.S, 6, 40
    Nv = S - L - Na
    rng = np.random.default_rng(0)
    tags = np.zeros(S, np.int64)
    tags[:L], tags[L:L + Na] = 1, 2
    idx = np.arange(S)
    args = dict(hidden_states=rng.standard_normal((1, Nv, 96), dtype=np.float32),
                audio_hidden_states=rng.standard_normal((1, Na, 32), dtype=np.float32),
                encoder_hidden_states=rng.standard_normal((1, L, 5120), dtype=np.float32),
                timestep=np.array([0.5], np.float32), timestep_indices=np.zeros(S, np.int64),
                token_tags=tags, position_ids=rng.integers(0, 40, (S, 3)).astype(np.float32),
                video_indices=idx[L + Na:], audio_indices=idx[L:L + Na], text_indices=idx[:L])
    t0 = time.perf_counter()
    v, au = d.forward(**args)
    t_fwd = time.perf_counter() - t0
    assert np.all(np.isfinite(v)) and np.all(np.isfinite(au))
    print(f"forward S={S}: {t_fwd:.1f} s  (x20 steps: {20 * t_fwd / 60:.1f} min)  rss {rss_gb():.1f} GB  "
          f"peak {peak_gb():.1f} GB", flush=True)


if __name__ == "__main__":
    main()
