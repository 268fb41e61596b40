"""In-training checks of the demo model with the adherence test's own judge (tests/_demo_judge.py),
so a GPU call reports what the export will score before anything is copied back:

- ``vae_roundtrip``: the held-out clips encoded and decoded by the two autoencoders, judged as
  the test judges a generated clip (colour, motion, tone) plus the share of the clips'
  saturated pixels the round trip keeps.  The transformer can do no better than this.
- ``sample_and_judge``: the 24 held-out prompts sampled by the transformer with the Euler
  sampler h3cy runs (diffusers' shifted sigma grid, t = 1 - sigma, x0 = x + sigma * v, the
  Euler blend; h3cy/sampling/schedule.py), decoded by the torch decoders and judged.

torch only (no h3cy, no PyAV): the judge's frame and audio functions take arrays.
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import _demo_judge as judge  # noqa: E402

import shapes_dataset as ds  # noqa: E402


def to_frames(video):
    """(3, F, H, W) float in [0, 1] -> (F, H, W, 3) uint8, as the MP4 writer rounds."""
    return (video.clamp(0, 1).permute(1, 2, 3, 0).float().cpu().numpy() * 255.0).round().astype(np.uint8)


def score_clips(frames, audios, rate, combos):
    """Judge each clip; the fractions right as tests/_demo_judge.score computes them."""
    got = []
    for f, a in zip(frames, audios):
        out = judge.judge_frames(f)
        out.update(judge.judge_audio(np.asarray(a, np.float32), rate))
        got.append(out)
    return judge.score(got, combos), got


def shifted_sigmas(steps, shift):
    """diffusers MiniMaxH3Scheduler's grid for num_inference_steps = steps + 1 (h3cy's
    Schedule.shifted): steps + 1 points from 1 to 0."""
    base = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float32)
    return shift * base / (1.0 + (shift - 1.0) * base)


def unpatchify(rows, C, T, h, w):
    """The inverse of train_demo.patchify: (B, T*(h/2)*(w/2), C*4) -> (B, C, T, h, w)."""
    B = rows.shape[0]
    return rows.reshape(B, T, h // 2, w // 2, C, 2, 2).permute(0, 4, 1, 2, 5, 3, 6).reshape(B, C, T, h, w)


def unpack_audio(rows, C):
    """The inverse of train_demo.pack_audio: (B, 2A, C) -> (B, 2, C, A)."""
    B, n, _ = rows.shape
    return rows.reshape(B, 2, n // 2, C).permute(0, 1, 3, 2)


@torch.no_grad()
def decode(vvae, avae, zv, za, stats, pixel_norm_stats):
    """Normalised latents (B, C, T, h, w) and (B, 2, C, A) -> pixels (B, 3, F, H, W) in [0, 1]
    and waveforms (B, 2, n): what h3cy's decoders compute (z * std + mean first)."""
    vm, vsd, am, asd = (torch.tensor(x, device=zv.device) for x in stats)
    pm, ps = pixel_norm_stats
    zv = zv * vsd.view(1, -1, 1, 1, 1) + vm.view(1, -1, 1, 1, 1)
    video = torch.cat([vvae.decode(zv[i:i + 1]).sample.float() for i in range(zv.shape[0])]) * ps + pm
    B, ch, C, A = za.shape
    za = za.reshape(B * ch, C, A) * asd.view(1, -1, 1) + am.view(1, -1, 1)
    audio = avae.decode(za).sample.float()[:, 0].reshape(B, ch, -1)
    return video.clamp(0, 1), audio


@torch.no_grad()
def vae_roundtrip(vvae, avae, spec, device, pixel_norm, seed=5, combos=ds.HELD_OUT):
    """Encode and decode the held-out clips; (scores, kept): the share of the clips' saturated
    pixels that are still saturated, with the same hue (within 30 degrees), after the round trip."""
    g = torch.Generator(device=device).manual_seed(seed)
    video, audio, _ = ds.make_batch(list(combos), spec, generator=g, device=device)
    frames, waves, kept, total = [], [], 0, 0
    for i in range(len(combos)):
        x, m, s = pixel_norm(video[i:i + 1])
        z = vvae.encode(x).latent_dist.mean
        rec = (vvae.decode(z).sample.float() * s + m).clamp(0, 1)
        f, f0 = to_frames(rec[0]), to_frames(video[i])
        (m1, h1), (m0, h0) = judge.saturated(f), judge.saturated(f0)
        near = np.abs((h1 - h0 + 180.0) % 360.0 - 180.0) < 30.0       # the same hue, within half a step
        kept += int((m1 & m0 & near).sum())
        total += int(m0.sum())
        frames.append(f)
        za = avae.encode(audio[i].reshape(2, 1, -1)).latent_dist.mean
        waves.append(avae.decode(za).sample.float()[:, 0, :audio.shape[-1]].cpu().numpy())
    scores, _ = score_clips(frames, waves, spec.sample_rate, list(combos))
    return scores, kept / max(total, 1)


@torch.no_grad()
def audio_roundtrip(avae, spec, device, seed=5, combos=ds.HELD_OUT):
    """The audio half of vae_roundtrip (the same clips): (tone score, output RMS)."""
    g = torch.Generator(device=device).manual_seed(seed)
    _, audio, _ = ds.make_batch(list(combos), spec, generator=g, device=device)
    waves = []
    for i in range(len(combos)):
        za = avae.encode(audio[i].reshape(2, 1, -1)).latent_dist.mean
        waves.append(avae.decode(za).sample.float()[:, 0, :audio.shape[-1]].cpu().numpy())
    got = [judge.judge_audio(w, spec.sample_rate) for w in waves]
    right = sum(o.get("tone") == c[3] for o, c in zip(got, combos))
    return right / len(combos), float(np.sqrt(np.mean([np.mean(w ** 2) for w in waves])))


@torch.no_grad()
def euler(model, forward, lay, text, xv, xa, sv, sa):
    """h3cy's Euler sampler on packed rows (batch first): t = 1 - sigma, x0 = x + sigma * v,
    x <- r x + (1 - r) x0 with r = sigma_next / sigma (h3cy.sampling.schedule)."""
    B = xv.shape[0]
    for k in range(len(sv) - 1):
        tv = torch.full((B,), 1.0, device=xv.device) - sv[k]
        ta = torch.full((B,), 1.0, device=xv.device) - sa[k]
        pv, pa = forward(model, xv, xa, text, tv, ta, lay)
        x0v, x0a = xv + sv[k] * pv.float(), xa + sa[k] * pa.float()
        rv, ra = sv[k + 1] / sv[k], sa[k + 1] / sa[k]
        xv, xa = rv * xv + (1 - rv) * x0v, ra * xa + (1 - ra) * x0a
    return xv, xa


@torch.no_grad()
def sample_and_judge(model, forward, layouts, text_states, tokenizer, vvae, avae, stats, spec, sampling,
                     device, pixel_norm_stats, seed=0, combos=ds.HELD_OUT, steps=None):
    """Sample ``combos``' captions with h3cy's Euler sampler, decode and judge them.

    ``forward(model, video_rows, audio_rows, text, t_video, t_audio, layout)`` is
    train_demo.dit_forward; ``layouts`` maps a caption's token count to its Layout;
    ``text_states`` maps a caption to its hidden_states[50].  Returns (scores, judgments)."""
    n = steps or sampling["steps"]
    sv = shifted_sigmas(n, sampling["shift_video"]).to(device)
    sa = shifted_sigmas(n, sampling["shift_audio"]).to(device)
    T = (spec.frames - 5) // 17 * 5 + 2
    h, w = spec.height // 16, spec.width // 16
    Cv = model.config.in_channels
    Ca = model.config.audio_in_channels
    g = torch.Generator(device=device).manual_seed(seed)
    caps = [ds.caption(*c) for c in combos]
    by_len = {}
    for i, c in enumerate(caps):
        by_len.setdefault(len(tokenizer.encode(c, add_special_tokens=False).ids), []).append(i)
    frames, waves = [None] * len(caps), [None] * len(caps)
    for L, idx in sorted(by_len.items()):
        lay = layouts[L]
        B = len(idx)
        text = torch.stack([text_states[caps[i]] for i in idx]).to(device)
        xv = torch.randn((B, len(lay.video_indices), Cv * 4), generator=g, device=device)
        xa = torch.randn((B, len(lay.audio_indices), Ca), generator=g, device=device)
        xv, xa = euler(model, forward, lay, text, xv, xa, sv, sa)
        video, audio = decode(vvae, avae, unpatchify(xv, Cv, T, h, w), unpack_audio(xa, Ca), stats,
                              pixel_norm_stats)
        for j, i in enumerate(idx):
            frames[i] = to_frames(video[j])
            waves[i] = audio[j].cpu().numpy()
    return score_clips(frames, waves, spec.sample_rate, list(combos))


def fmt(scores, kept=None):
    s = " ".join(f"{k} {scores[k]:.2f}" for k in ("colour", "motion", "tone", "all"))
    return s if kept is None else f"{s}, saturated pixels kept {kept:.2f}"
