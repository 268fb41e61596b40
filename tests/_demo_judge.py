"""Judge a demo clip from its MP4 alone: the colour of the saturated pixels, the direction their
centroid moves, and whether the dominant audio frequency is high or low.

``judge(path) -> {"colour", "motion", "tone", ...}`` reads the file with PyAV (what h3cy
writes: H.264 + AAC).  The vocabulary is the demo model's (training/shapes_dataset.py):
six hues 60 degrees apart, motions "moves to the left/right/up/down" or "stays still", tones
"high" (880 Hz) or "low" (220 Hz), split at 440 Hz.
"""
import numpy as np

HUES = {"red": 0.0, "yellow": 60.0, "green": 120.0, "cyan": 180.0, "blue": 240.0, "magenta": 300.0}
TONE_SPLIT_HZ = 440.0
STILL = 0.08            # centroid travel (fraction of the frame) below which a clip "stays still"


def read_mp4(path):
    """(frames (F, H, W, 3) uint8, audio (channels, n) float32, sample_rate)."""
    import av
    frames, chunks, rate = [], [], None
    with av.open(str(path)) as box:
        for fr in box.decode(video=0):
            frames.append(fr.to_ndarray(format="rgb24"))
    with av.open(str(path)) as box:
        if box.streams.audio:
            for fr in box.decode(audio=0):
                a = fr.to_ndarray()
                rate = fr.sample_rate
                if a.ndim == 1 or a.shape[0] == 1 and len(fr.layout.channels) > 1:   # packed
                    a = a.reshape(-1, len(fr.layout.channels)).T
                chunks.append(a.astype(np.float32))
    audio = np.concatenate(chunks, axis=1) if chunks else np.zeros((2, 0), np.float32)
    return np.stack(frames), audio, rate


def saturated(frames, min_sat=0.45, min_val=0.25):
    """Mask (F, H, W) of saturated, not-dark pixels and their hue in degrees."""
    x = frames.astype(np.float32) / 255.0
    mx, mn = x.max(-1), x.min(-1)
    sat = (mx - mn) / np.maximum(mx, 1e-6)
    mask = (sat > min_sat) & (mx > min_val)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    d = np.maximum(mx - mn, 1e-6)
    hue = np.where(mx == r, ((g - b) / d) % 6, np.where(mx == g, (b - r) / d + 2, (r - g) / d + 4)) * 60.0
    return mask, hue


def judge_frames(frames):
    mask, hue = saturated(frames)
    F, H, W = mask.shape
    out = {"colour": None, "motion": None, "saturated_fraction": float(mask.mean())}
    if mask.sum() < 10:
        return out
    h = hue[mask]
    names = list(HUES)
    centres = np.array([HUES[n] for n in names])
    dist = np.abs((h[:, None] - centres[None] + 180.0) % 360.0 - 180.0)
    votes = np.bincount(dist.argmin(1), minlength=len(names))
    out["colour"] = names[int(votes.argmax())]
    out["colour_share"] = float(votes.max() / votes.sum())
    ys, xs = np.mgrid[0:H, 0:W]
    cx, cy, ok = [], [], []
    for f in range(F):
        m = mask[f]
        n = m.sum()
        ok.append(n >= 5)
        cx.append((xs[m].mean() / W) if n else np.nan)
        cy.append((ys[m].mean() / H) if n else np.nan)
    cx, cy, ok = np.array(cx), np.array(cy), np.array(ok)
    idx = np.flatnonzero(ok)
    if len(idx) < 4:
        return out
    k = max(1, len(idx) // 3)
    first, last = idx[:k], idx[-k:]
    dx = float(np.mean(cx[last]) - np.mean(cx[first]))
    dy = float(np.mean(cy[last]) - np.mean(cy[first]))
    out["dx"], out["dy"] = dx, dy
    if max(abs(dx), abs(dy)) < STILL:
        out["motion"] = "stays still"
    elif abs(dx) >= abs(dy):
        out["motion"] = "moves to the left" if dx < 0 else "moves to the right"
    else:
        out["motion"] = "moves up" if dy < 0 else "moves down"
    return out


def judge_audio(audio, rate):
    out = {"tone": None}
    mono = np.asarray(audio, np.float64).mean(0)
    if rate is None or mono.size < 256 or not np.any(mono):
        return out
    spec = np.abs(np.fft.rfft(mono * np.hanning(mono.size)))
    freqs = np.fft.rfftfreq(mono.size, 1.0 / rate)
    band = (freqs >= 60.0) & (freqs <= min(4000.0, rate / 2))
    peak = float(freqs[band][spec[band].argmax()])
    out["peak_hz"] = peak
    out["tone"] = "high" if peak > TONE_SPLIT_HZ else "low"
    if audio.shape[0] == 2:
        e = (np.asarray(audio, np.float64) ** 2).sum(1)
        out["balance"] = float((e[1] - e[0]) / max(e.sum(), 1e-12))    # > 0: louder on the right
    return out


def judge(path):
    frames, audio, rate = read_mp4(path)
    out = judge_frames(frames)
    out.update(judge_audio(audio, rate))
    return out


def score(results, expected):
    """Fractions right: {"colour", "motion", "tone", "all"} over pairs of (judgment, (colour,
    shape, motion, tone))."""
    right = {"colour": 0, "motion": 0, "tone": 0}
    for got, (colour, _shape, motion, tone) in zip(results, expected):
        right["colour"] += got.get("colour") == colour
        right["motion"] += got.get("motion") == motion
        right["tone"] += got.get("tone") == tone
    n = max(len(expected), 1)
    out = {k: v / n for k, v in right.items()}
    out["all"] = sum(right.values()) / (3 * n)
    return out
