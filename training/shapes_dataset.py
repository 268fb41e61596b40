"""Procedural clips for the h3cy demo model: a coloured shape on a neutral background that moves
one way, with a stereo tone whose panning follows it, and a caption generated from the
parameters ("a blue square moves up, a low tone").

Everything is made on the fly in torch on the training device (no files), from a seeded
``torch.Generator``, so the training script never waits for data.

Vocabulary (``VOCABULARY``): 6 colours x 3 shapes x 5 motions x 2 tones = 180 combinations;
``HELD_OUT`` lists 24 of them (every colour with every direction once, each with one shape and
one tone) that training never produces, for the prompt-adherence test
(tests/test_demo_adherence.py).

Clip (``Spec``): ``frames`` RGB frames in [0, 1] at 24 fps (22 = the shortest MiniMax-H3
length), ``width`` x ``height`` pixels; stereo audio at ``sample_rate`` covering the audio
latents of that length (``audio_samples``).  The shape's centre moves in a straight line; the
tone (220 Hz "low", 880 Hz "high") is panned with equal power by the centre's x position.
"""
import math
from dataclasses import dataclass

import torch

COLOURS = {   # name -> RGB in [0, 1]; six hues 60 degrees apart, fully saturated
    "red": (0.92, 0.10, 0.10), "yellow": (0.93, 0.86, 0.08), "green": (0.10, 0.80, 0.16),
    "cyan": (0.08, 0.80, 0.86), "blue": (0.14, 0.24, 0.95), "magenta": (0.86, 0.12, 0.84),
}
HUES = {"red": 0.0, "yellow": 60.0, "green": 120.0, "cyan": 180.0, "blue": 240.0, "magenta": 300.0}
SHAPES = ("circle", "square", "triangle")
MOTIONS = ("moves to the left", "moves to the right", "moves up", "moves down", "stays still")
DIRECTIONS = MOTIONS[:4]
TONES = ("high", "low")
TONE_HZ = {"high": 880.0, "low": 220.0}
BACKGROUNDS = {"grey": 0.5, "black": 0.06, "white": 0.94}
VOCABULARY = {"colours": tuple(COLOURS), "shapes": SHAPES, "motions": MOTIONS,
              "sounds": tuple(f"a {t} tone" for t in TONES), "backgrounds": tuple(BACKGROUNDS)}
FPS = 24


def caption(colour, shape, motion, tone, article=True):
    """ "a blue square moves up, a low tone" (article=False: "..., low tone")."""
    return f"a {colour} {shape} {motion}, {'a ' if article else ''}{tone} tone"


def _held_out():
    out = []
    for c, colour in enumerate(COLOURS):
        for d, motion in enumerate(DIRECTIONS):
            out.append((colour, SHAPES[(c + d) % 3], motion, TONES[(c + d // 2) % 2]))
    return tuple(out)


HELD_OUT = _held_out()          # 24 (colour, shape, motion, tone), never generated in training
ALL_COMBOS = tuple((c, s, m, t) for c in COLOURS for s in SHAPES for m in MOTIONS for t in TONES)
TRAIN_COMBOS = tuple(x for x in ALL_COMBOS if x not in set(HELD_OUT))
assert len(HELD_OUT) == 24 and len(set(HELD_OUT)) == 24 and len(TRAIN_COMBOS) == 156


@dataclass(frozen=True)
class Spec:
    width: int = 128
    height: int = 128
    frames: int = 22
    sample_rate: int = 16000

    @property
    def audio_latents(self):
        """Audio latents per channel of this length (40 a second, as h3cy.Geometry.A)."""
        return int(round(self.frames / FPS * 40))

    @property
    def audio_samples(self):
        return self.audio_latents * self.sample_rate // 40


def _uniform(g, n, lo, hi, device):
    return lo + (hi - lo) * torch.rand(n, generator=g, device=device)


def make_batch(combos, spec=Spec(), generator=None, device="cpu"):
    """Render ``combos`` (a list of (colour, shape, motion, tone)).

    Returns ``(video, audio, params)``: video (B, 3, F, H, W) float32 in [0, 1], audio
    (B, 2, spec.audio_samples) float32 (left, right), and params, a dict of per-clip tensors
    (``x0, y0, x1, y1`` centre start/end as fractions of the width/height, ``radius``,
    ``background``) for checks.  ``generator`` is a torch.Generator on ``device``.
    """
    g = generator
    B, F, H, W = len(combos), spec.frames, spec.height, spec.width
    dev = torch.device(device)
    colour = torch.tensor([COLOURS[c[0]] for c in combos], device=dev)                  # (B, 3)
    shape_id = torch.tensor([SHAPES.index(c[1]) for c in combos], device=dev)
    motion_id = torch.tensor([MOTIONS.index(c[2]) for c in combos], device=dev)
    hz = torch.tensor([TONE_HZ[c[3]] for c in combos], device=dev)
    bg_levels = torch.tensor(list(BACKGROUNDS.values()), device=dev)
    background = bg_levels[torch.randint(len(BACKGROUNDS), (B,), generator=g, device=dev)]
    # brightness/colour jitter so the decoder sees more than six exact colours
    colour = (colour * _uniform(g, B, 0.85, 1.05, dev)[:, None]).clamp(0, 1)

    radius = _uniform(g, B, 0.12, 0.17, dev)                 # fraction of min(W, H)
    travel = _uniform(g, B, 0.42, 0.55, dev)
    a = _uniform(g, B, 0.26, 0.74, dev)                      # across-motion coordinate
    s = _uniform(g, B, 0.70, 0.78, dev)                      # along-motion start
    x0, y0, x1, y1 = a.clone(), a.clone(), a.clone(), a.clone()
    still = _uniform(g, B, 0.3, 0.7, dev)
    for mid, (xa, ya, xb, yb) in enumerate((
            (s, a, s - travel, a), (1 - s, a, 1 - s + travel, a),        # left, right
            (a, s, a, s - travel), (a, 1 - s, a, 1 - s + travel),        # up (y grows downwards), down
            (still, a, still, a))):                                      # stays still
        m = motion_id == mid
        x0, y0 = torch.where(m, xa, x0), torch.where(m, ya, y0)
        x1, y1 = torch.where(m, xb, x1), torch.where(m, yb, y1)

    # video: the centre at frame f is start + (end - start) * f / (F - 1)
    f = torch.arange(F, device=dev, dtype=torch.float32) / max(F - 1, 1)               # (F,)
    cx = (x0[:, None] + (x1 - x0)[:, None] * f[None]) * W                               # (B, F) px
    cy = (y0[:, None] + (y1 - y0)[:, None] * f[None]) * H
    r = radius * min(W, H)                                                               # (B,) px
    yy = torch.arange(H, device=dev, dtype=torch.float32) + 0.5
    xx = torch.arange(W, device=dev, dtype=torch.float32) + 0.5
    dx = xx[None, None, None, :] - cx[:, :, None, None]                                 # (B, F, 1, W)
    dy = yy[None, None, :, None] - cy[:, :, None, None]                                 # (B, F, H, 1)
    rr = r[:, None, None, None]
    circle = rr - torch.sqrt(dx * dx + dy * dy)
    square = 0.85 * rr - torch.maximum(dx.abs(), dy.abs())
    # upward triangle: apex at -r, base at +0.75 r, half-width 0.95 r at the base
    t = (dy + rr) / (1.75 * rr)
    tri = torch.minimum(torch.minimum(0.75 * rr - dy, dy + rr), (0.95 * rr * t - dx.abs()) * 0.9)
    sd = torch.where(shape_id[:, None, None, None] == 0, circle,
                     torch.where(shape_id[:, None, None, None] == 1, square, tri))       # signed distance (px)
    mask = torch.sigmoid(sd / 0.6)                                                       # (B, F, H, W)
    bgc = background[:, None, None, None, None]
    video = bgc * (1 - mask[:, None]) + colour[:, :, None, None, None] * mask[:, None]  # (B, 3, F, H, W)

    # audio: equal-power pan by the centre's x, interpolated at each sample's time
    n = spec.audio_samples
    ts = torch.arange(n, device=dev, dtype=torch.float32) / spec.sample_rate             # seconds
    frac = (ts * FPS / max(F - 1, 1)).clamp(0, 1)
    xs = x0[:, None] + (x1 - x0)[:, None] * frac[None]                                  # (B, n)
    pan = (xs.clamp(0, 1) * 2 - 1) * 0.9
    ang = (pan + 1) * (math.pi / 4)
    detune = _uniform(g, B, 0.97, 1.03, dev)
    phase = _uniform(g, B, 0.0, 2 * math.pi, dev)
    amp = _uniform(g, B, 0.30, 0.42, dev)
    fade = (ts / 0.01).clamp(max=1) * ((ts[-1] - ts) / 0.01).clamp(max=1)
    tone = amp[:, None] * fade[None] * torch.sin(2 * math.pi * (hz * detune)[:, None] * ts[None] + phase[:, None])
    audio = torch.stack([tone * torch.cos(ang), tone * torch.sin(ang)], dim=1) * math.sqrt(2)
    params = dict(x0=x0, y0=y0, x1=x1, y1=y1, radius=radius, background=background)
    return video.contiguous(), audio.clamp(-1, 1).contiguous(), params


def sample_combos(n, generator, combos=TRAIN_COMBOS):
    """n combinations drawn uniformly (with replacement) from ``combos``."""
    idx = torch.randint(len(combos), (n,), generator=generator).tolist()
    return [combos[i] for i in idx]


if __name__ == "__main__":     # a quick look: python3 training/shapes_dataset.py
    g = torch.Generator().manual_seed(0)
    v, a, p = make_batch(list(HELD_OUT[:4]), generator=g)
    print("video", tuple(v.shape), float(v.min()), float(v.max()), "audio", tuple(a.shape))
    for c in HELD_OUT[:4]:
        print(caption(*c))
