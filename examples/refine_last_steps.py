"""Render in int8, then re-render the last steps in bf16 when int8 may have smeared the
detail, and keep the better result.

The int8 run's clean estimate is compared with a bf16 re-render of its last ``--refine``
steps (started from the int8 latents at that point).  Where the two differ by more than
``--threshold`` (mean absolute difference of the final latents per latent frame, relative
to the latent's scale), int8's late errors are visible, and the bf16 result is kept.

    python examples/refine_last_steps.py --transformer MiniMax-H3/FL2VA/transformer \\
        --embeds prompt.npy --out latents.npz [--steps 20 --refine 6 --threshold 0.02]
"""
import argparse

import numpy as np

import h3cy


def frame_difference(a, b):
    """Per latent frame: mean |a - b| / mean |b| (video latents (C, T, h, w))."""
    num = np.abs(a - b).mean(axis=(0, 2, 3))
    den = np.abs(b).mean(axis=(0, 2, 3)) + 1e-12
    return num / den


def render(dit, pe, g, steps, refine, threshold, seed):
    """(video, audio, report): int8 everywhere, or bf16 for the last ``refine`` steps."""
    handoff = {}

    def keep(st):
        if st.step == steps - refine - 1:
            handoff["v"], handoff["a"] = st.video_latent.copy(), st.audio_latent.copy()
    int8_v, int8_a = h3cy.denoise(dit, pe, g, steps=steps, seed=seed, on_step=keep)
    sch = h3cy.Schedule.shifted(steps)
    tail = h3cy.Schedule(sch.video_sigmas[steps - refine:], sch.audio_sigmas[steps - refine:])
    bf_v, bf_a = h3cy.denoise(dit.with_weights("bf16"), pe, g, schedule=tail,
                              noise=(handoff["v"], handoff["a"]))
    diff = frame_difference(int8_v, bf_v)
    use_bf16 = bool(diff.max() > threshold)
    report = dict(max_frame_difference=float(diff.max()), kept="bf16" if use_bf16 else "int8")
    return (bf_v, bf_a, report) if use_bf16 else (int8_v, int8_a, report)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--transformer", required=True)
    p.add_argument("--embeds", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--frames", type=int, default=22)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--refine", type=int, default=6)
    p.add_argument("--threshold", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args(argv)
    if not 1 <= a.refine < a.steps:
        p.error("--refine must be in [1, steps)")
    g = h3cy.Geometry(a.width, a.height, a.frames)
    dit = h3cy.DiT.from_pretrained(a.transformer, weights="int8")
    pe = np.load(a.embeds).astype(np.float32)
    v, au, report = render(dit, pe, g, a.steps, a.refine, a.threshold, a.seed)
    print(report)
    np.savez(a.out, video_latent=v, audio_latent=au)


if __name__ == "__main__":
    main()
