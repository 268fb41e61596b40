"""Make the video's motion follow a music track: latent frames on the music's beats are
denoised on a differently shifted sigma curve (h3cy.sampling.audio_schedule.beat_schedule).

    python examples/beat_video.py --transformer MiniMax-H3/FL2VA/transformer \\
        --embeds prompt.npy --audio music.wav --out latents.npz [--strength 0.5]

prompt.npy holds the encoded prompt (L, 5120) float32.  The result holds the video and
audio latents; decoding them to an MP4 arrives with the pipeline (h3cy.load).
"""
import argparse

import numpy as np

import h3cy
from h3cy import audio_schedule


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--transformer", required=True)
    p.add_argument("--embeds", required=True)
    p.add_argument("--audio", required=True, help="WAV file")
    p.add_argument("--out", required=True)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--strength", type=float, default=0.5)
    p.add_argument("--weights", default="int8")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args(argv)
    g = h3cy.Geometry(a.width, a.height, audio_schedule.frames_for(a.audio))
    sched = audio_schedule.beat_schedule(a.audio, a.steps, g, strength=a.strength)
    beats = audio_schedule.beat_frames(a.audio, g)
    print(f"{g}; beats on latent frames {beats}")
    dit = h3cy.DiT.from_pretrained(a.transformer, weights=a.weights)
    pe = np.load(a.embeds).astype(np.float32)
    video, audio = h3cy.denoise(dit, pe, g, schedule=sched, seed=a.seed,
                                on_progress=lambda d, t, ph: print(f"\r{ph} {d}/{t}", end=""))
    print()
    np.savez(a.out, video_latent=video, audio_latent=audio, beat_frames=np.asarray(beats))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
