"""Train h3cy's demo model -- MiniMax-H3's architecture at toy size -- on procedural shapes, and
export it in the release layout (FL2VA/) that ``h3cy.load`` reads.

    python3 training/train_demo.py --stage all --minutes 7.5 --pack $OUT                  # GPU call 1
    python3 training/train_demo.py --stage all --minutes 7.5 --unpack PACK --pack $OUT    # GPU call 2
    python3 training/train_demo.py --stage all --minutes 7.5 --unpack PACK --pack $OUT \
        --export h3cy/data/demo-model --export-tar $OUT                                   # GPU call 3
    python3 training/train_demo.py --device cpu --smoke --minutes 3 --export /tmp/demo   # CPU proof

(docs/demo.md has the whole recipe; ``--resume`` continues from --run on the same machine.)

Stages (checkpoints under --run, default training/runs/demo):

  vae   the video VAE (diffusers AutoencoderKLMiniMaxH3: causal CNN encoder, ViT decoder) and the
        audio VAE (AutoencoderKLMiniMaxH3Audio: DAC encoder, BigVGAN decoder) as autoencoders on
        generated clips, one update of each per step; then per-channel latent statistics
        (latents_mean / latents_std of the release configs).
  dit   the transformer (diffusers MiniMaxH3Transformer3DModel) with rectified flow on the
        normalised latents, conditioned on hidden_states[50] of the text encoder
        (transformers Qwen3VLForConditionalGeneration, kept at its seeded initialisation) for
        the caption tokenised verbatim -- exactly what h3cy's encode_prompt computes.  Each
        sample has its own video and audio timestep (t = 1 - sigma, t = 1 clean; the
        transformer predicts the data-ward velocity x0 - noise, as MiniMax-H3's does).
  all   vae, then dit.

Each stage runs for ``budget_minutes`` of its own (config): the step count is fixed after
the first steps from the measured rate and stored in the checkpoint, so the learning-rate
schedule ends when the budget does.  ``--minutes N`` bounds one invocation (from its
start): it saves a checkpoint and exits before N minutes, and ``--resume`` continues.  A
checkpoint is also written every few minutes.  Needs torch, diffusers, transformers,
safetensors, tokenizers and numpy -- never h3cy's compiled extension (the export is checked
with h3cy separately, see docs/demo.md).
"""
import time

T_START = time.time()            # --minutes counts from here, before torch's import

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import audio_bands  # noqa: E402
import demo_eval  # noqa: E402
import shapes_dataset as ds  # noqa: E402

PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)
SAVE_EVERY_S = 150.0
NOTE = ("toy model trained on synthetic shapes (h3cy training/train_demo.py): a coloured circle, square "
        "or triangle moving on a plain background with a panned high or low tone; it knows nothing else")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def merge(a, b):
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path, smoke):
    with open(path) as f:
        cfg = json.load(f)
    if smoke:
        cfg = merge(cfg, cfg["smoke"])
    return cfg


# ---------------------------------------------------------------------------------------------
# tokenizer and text encoder (built once per run, then fixed)
# ---------------------------------------------------------------------------------------------
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDITIONAL_SPECIAL = ["<|im_start|>", "<|im_end|>", "<d>", "</d>"]
# Qwen2's pre-tokenization split, as h3cy.models.tokenizer (and transformers' Qwen2 converter)
QWEN2_SPLIT_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                       r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def corpus():
    lines = [ds.caption(*c, article=a) for c in ds.ALL_COMBOS for a in (True, False)]
    lines.append("a " + " ".join(ds.BACKGROUNDS) + " background")
    return lines


def build_tokenizer(folder, vocab_size):
    """A byte-level BPE on the demo vocabulary, saved as the release saves Qwen2's (vocab.json,
    merges.txt, tokenizer_config.json) plus tokenizer.json, which h3cy and this script both
    load, so the ids are the same on both sides."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    os.makedirs(folder, exist_ok=True)
    tok.model.save(folder)                              # vocab.json + merges.txt
    n = tok.get_vocab_size()
    added = {str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True} for i, t in enumerate(SPECIAL_TOKENS)}
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
                   "additional_special_tokens": ADDITIONAL_SPECIAL, "bos_token": None,
                   "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
                   "model_max_length": 4096, "pad_token": "<|endoftext|>", "split_special_tokens": False,
                   "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}, f, indent=2)
    # tokenizer.json: the tokenizer exactly as h3cy builds it from the three files above
    with open(os.path.join(folder, "vocab.json")) as f:
        vocab = json.load(f)
    merges = []
    with open(os.path.join(folder, "merges.txt")) as f:
        for i, line in enumerate(f):
            line = line.rstrip("\n")
            if line and not (i == 0 and line.startswith("#version")):
                a, _, b = line.partition(" ")
                merges.append((a, b))
    full = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False,
                                continuing_subword_prefix="", end_of_word_suffix=""))
    full.normalizer = normalizers.NFC()
    full.pre_tokenizer = tok.pre_tokenizer
    full.decoder = decoders.ByteLevel()
    for t in SPECIAL_TOKENS + ["<d>", "</d>"]:
        full.add_special_tokens([AddedToken(t, normalized=False, special=True)])
    full.save(os.path.join(folder, "tokenizer.json"))
    return full.get_vocab_size(with_added_tokens=True)


def load_tokenizer(folder):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))


def te_config(cfg, vocab):
    from transformers import Qwen3VLConfig
    t = cfg["text_encoder"]
    text = dict(vocab_size=vocab, hidden_size=t["hidden_size"], intermediate_size=t["intermediate_size"],
                num_hidden_layers=t["num_hidden_layers"], num_attention_heads=t["num_attention_heads"],
                num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"], hidden_act="silu",
                max_position_embeddings=4096, rms_norm_eps=t["rms_norm_eps"], attention_bias=False,
                rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"],
                                 "mrope_section": t["mrope_section"], "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=t["hidden_size"],
                  patch_size=4, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16,
                  deepstack_visual_indexes=[0])
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=vocab - 1,
                         video_token_id=vocab - 2, vision_start_token_id=vocab - 3, vision_end_token_id=vocab - 4,
                         tie_word_embeddings=False)


def build_text_encoder(cfg, folder, vocab, seed):
    """The seeded Qwen3-VL text stack (token embeddings ~ N(0, embed_std^2), transformers'
    init elsewhere), saved in bf16 as released."""
    from transformers import Qwen3VLForConditionalGeneration
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(te_config(cfg, vocab))
    with torch.no_grad():
        emb = model.model.language_model.embed_tokens.weight
        emb.copy_(torch.randn_like(emb) * cfg["text_encoder"]["embed_std"])
    model.to(torch.bfloat16).save_pretrained(folder)


def text_states(te_folder, tokenizer, captions, device):
    """{caption: hidden_states[50] (L, hidden) float32} -- the text encoder's bf16 weights
    computed in float32, as ``h3cy.load(..., weights="fp32")`` does."""
    from transformers import Qwen3VLForConditionalGeneration
    model = Qwen3VLForConditionalGeneration.from_pretrained(te_folder, dtype=torch.float32).to(device).eval()
    groups = {}
    for c in captions:                  # one forward per token count (no padding, no mask)
        ids = tokenizer.encode(c, add_special_tokens=False).ids
        groups.setdefault(len(ids), []).append((c, ids))
    out = {}
    with torch.no_grad():
        for items in groups.values():
            for i in range(0, len(items), 256):
                chunk = items[i:i + 256]
                ids = torch.tensor([x[1] for x in chunk], device=device)
                hs = model.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False,
                                 output_hidden_states=True).hidden_states[50]
                for (c, _), h in zip(chunk, hs):
                    out[c] = h.float().clone()
    del model
    return out


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------
def make_video_vae(cfg):
    from diffusers import AutoencoderKLMiniMaxH3
    return AutoencoderKLMiniMaxH3(**cfg["video_vae"])


def make_audio_vae(cfg):
    """diffusers' audio VAE; with ``vae_train.audio_encoder: "bands"`` its encode is the fixed
    band-level analysis of training/audio_bands.py (the DAC encoder collapsed; see there)."""
    from diffusers import AutoencoderKLMiniMaxH3Audio
    cls = AutoencoderKLMiniMaxH3Audio
    if cfg["vae_train"].get("audio_encoder", "dac") == "bands":
        cls = audio_bands.band_encoder_vae(cls)
    return cls(**cfg["audio_vae"])


def make_dit(cfg):
    from diffusers import MiniMaxH3Transformer3DModel
    model = MiniMaxH3Transformer3DModel(**cfg["transformer"])
    with torch.no_grad():          # adaLN-zero: every block starts as the identity, outputs at 0
        for name, p in model.named_parameters():
            if ".adaln_proj.linear." in name or name.startswith(("norm_out.linear.", "proj_out.",
                                                                  "audio_proj_out.")):
                p.zero_()
    return model


def spec_of(cfg):
    c = cfg["clip"]
    return ds.Spec(width=c["width"], height=c["height"], frames=c["frames"], sample_rate=c["sample_rate"])


def pixel_norm(video):
    m = torch.tensor(PIXEL_MEAN, device=video.device).view(1, 3, 1, 1, 1)
    s = torch.tensor(PIXEL_STD, device=video.device).view(1, 3, 1, 1, 1)
    return (video - m) / s, m, s


def stft_loss(x, y, log_eps=1e-5):
    """Multi-resolution STFT magnitude loss (spectral convergence + log magnitude; magnitudes
    below ``log_eps`` count as silence in the log term)."""
    loss = 0.0
    for n in (256, 512, 1024):
        w = torch.hann_window(n, device=x.device)
        X = torch.stft(x, n, n // 4, window=w, return_complex=True).abs()
        Y = torch.stft(y, n, n // 4, window=w, return_complex=True).abs()
        loss = loss + torch.linalg.norm(Y - X) / (torch.linalg.norm(Y) + 1e-7)
        loss = loss + (torch.log(X + log_eps) - torch.log(Y + log_eps)).abs().mean()
    return loss / 3


REWARM = 50


def lr_at(step, total, peak, warmup, rewarm_from=None):
    """Linear warm-up, cosine decay to 10% at ``total``; after a resume without optimizer
    moments (from a pack), REWARM steps of linear re-warm-up."""
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    lr = peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
    if rewarm_from is not None and step - rewarm_from < REWARM:
        lr *= (step - rewarm_from + 1) / REWARM
    return lr


class Clock:
    """The invocation's deadline (--minutes) and the stage's step-count calibration."""

    def __init__(self, minutes, t_start):
        self.t_start = t_start
        # room to evaluate, save, pack and export (~10 s on the H200)
        self.deadline = None if minutes is None else t_start + minutes * 60.0 - 40.0

    def out_of_time(self):
        return self.deadline is not None and time.time() >= self.deadline


def calibrate(state, tc, step_times, name):
    """Fix total_steps from the measured rate once enough steps have run (budget_minutes)."""
    if state.get("total_steps") is not None:
        return
    if tc.get("total_steps"):
        state["total_steps"] = int(tc["total_steps"])
        return
    if len(step_times) >= 40:
        per = float(np.median(step_times[10:]))
        state["total_steps"] = max(state["step"] + 1, int(tc["budget_minutes"] * 60.0 / per))
        log(f"{name}: {per * 1000:.1f} ms/step -> total_steps = {state['total_steps']} "
            f"for {tc['budget_minutes']} min")


def next_step_lr(state, tc, step_times, name, clock, optimizers):
    """The learning rate of a stage's next step, set on ``optimizers``; None when the stage's
    schedule is finished (``state["done"]`` set) or this invocation is out of time."""
    calibrate(state, tc, step_times, name)
    if state["total_steps"] is not None and state["step"] >= state["total_steps"]:
        state["done"] = True
        return None
    if clock.out_of_time():
        return None
    lr = lr_at(state["step"], state["total_steps"] or 10 ** 9, tc["lr"], tc["warmup"], state.get("rewarm_from"))
    for o in optimizers:
        for g in o.param_groups:
            g["lr"] = lr
    return lr


def atomic_save(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


# ---------------------------------------------------------------------------------------------
# stage 1: the two autoencoders
# ---------------------------------------------------------------------------------------------
def latent_noise(post, tc):
    """The noise the decoder sees around the encoder's mean during training.

    Sampling the posterior (``latent_noise: null``) collapsed the audio VAE in run 1: its
    posterior std stayed ~0.35 while the means varied by ~0.05 per channel, so the decoder
    learnt to ignore z (the same output, rms 0.0016, for every clip and for random z).  The
    transformer trains on the posterior *means* only, so the autoencoders are trained
    deterministically around the mean, with a small fixed noise (relative to the batch's
    per-channel spread of the means) that keeps the decoder tolerant of the transformer's
    small errors."""
    if tc.get("latent_noise") is None:
        return post.std
    m = post.mean.detach()
    dims = [d for d in range(m.ndim) if d != 1]
    return tc["latent_noise"] * m.std(dim=dims, keepdim=True).clamp_min(1e-3)


def video_vae_loss(vae, video, tc, gen):
    x, m, s = pixel_norm(video)
    post = vae.encode(x).latent_dist
    z = post.mean + latent_noise(post, tc) * torch.randn(post.mean.shape, generator=gen, device=x.device)
    rec = vae.decode(z).sample.float() * s + m
    bg = video[:, :, :1, :1, :1]                                            # the corner is background
    obj = ((video - bg).abs().amax(1, keepdim=True) > 0.05).float()
    w = 1.0 + tc["object_weight"] * obj
    rec_loss = ((rec - video).abs() * w).mean() + ((rec - video) ** 2 * w).mean()
    kl = 0.5 * (post.mean ** 2 + post.var - 1.0 - post.logvar).mean()
    return rec_loss + tc["kl_weight"] * kl, rec_loss.detach(), kl.detach()


def audio_vae_loss(vae, audio, tc, gen):
    """Waveform L1 (``audio_wave_weight``) + multi-resolution STFT + KL.  With the band encoder
    the latents carry no phase, so the L1 (which then rewards silence) is weighted 0 and the
    decoder learns the magnitudes only; ``audio_crop_latents`` decodes a random window of that
    many latents per clip instead of the whole clip (the CPU retraining's speed)."""
    x = audio.reshape(-1, 1, audio.shape[-1])
    post = vae.encode(x).latent_dist
    z = post.mean + latent_noise(post, tc) * torch.randn(post.mean.shape, generator=gen, device=x.device)
    y = x[:, 0]
    crop = tc.get("audio_crop_latents")
    if crop and crop < z.shape[-1]:
        start = int(torch.randint(z.shape[-1] - crop + 1, (1,), generator=gen, device=gen.device))
        z = z[..., start:start + crop]
        y = y[:, start * vae.hop_length:(start + crop) * vae.hop_length]
    rec = vae.decode(z).sample.float()[:, 0, :y.shape[-1]]
    y = F.pad(y, (0, rec.shape[-1] - y.shape[-1]))
    wave = (rec - y).abs().mean()
    spec = stft_loss(rec.float(), y.float(), tc.get("stft_log_eps", 1e-5))
    kl = 0.5 * (post.mean ** 2 + post.std ** 2 - 1.0 - 2 * post.logs).mean()
    loss = tc.get("audio_wave_weight", 1.0) * wave + tc["stft_weight"] * spec + tc["kl_weight"] * kl
    return loss, wave.detach(), spec.detach()


@torch.no_grad()
def latent_stats(vvae, avae, cfg, device, gen, batches, batch):
    spec = spec_of(cfg)
    vs, as_ = [], []
    for _ in range(batches):
        combos = ds.sample_combos(batch, gen_cpu(gen))
        video, audio, _ = ds.make_batch(combos, spec, generator=gen, device=device)
        with autocast(device):
            zv = vvae.encode(pixel_norm(video)[0]).latent_dist.mean.float()
            za = avae.encode(audio.reshape(-1, 1, audio.shape[-1])).latent_dist.mean.float()
        vs.append(zv.transpose(0, 1).reshape(zv.shape[1], -1))
        as_.append(za.transpose(0, 1).reshape(za.shape[1], -1))
    v, a = torch.cat(vs, 1), torch.cat(as_, 1)
    return ([float(x) for x in v.mean(1)], [float(x) for x in v.std(1).clamp_min(1e-3)],
            [float(x) for x in a.mean(1)], [float(x) for x in a.std(1).clamp_min(1e-3)])


_CPU_GENS = {}


def gen_cpu(gen):
    """A CPU generator paired with a device generator (combination draws happen on the CPU)."""
    key = id(gen)
    if key not in _CPU_GENS:
        _CPU_GENS[key] = torch.Generator().manual_seed(int(torch.randint(2 ** 31, (1,), generator=gen,
                                                                          device=gen.device).item()))
    return _CPU_GENS[key]


def run_vae(cfg, args, device, clock):
    tc = cfg["vae_train"]
    path = os.path.join(args.run, "vae.pt")
    torch.manual_seed(cfg["seed"] + 1)
    vvae, avae = make_video_vae(cfg).to(device), make_audio_vae(cfg).to(device)
    fused = dict(fused=True) if device.type == "cuda" else {}
    ov = torch.optim.AdamW(vvae.parameters(), lr=tc["lr"], betas=(0.9, 0.99), weight_decay=0.0, **fused)
    oa = torch.optim.AdamW(avae.parameters(), lr=tc["lr"], betas=(0.8, 0.99), weight_decay=0.0, **fused)
    state = {"step": 0, "total_steps": None, "done": False, "trained_s": 0.0}
    gen = torch.Generator(device=device).manual_seed(cfg["seed"] + 2)
    if os.path.exists(path):
        ck = torch.load(path, map_location=device, weights_only=False)
        vvae.load_state_dict(ck["video_vae"])
        avae.load_state_dict(ck["audio_vae"])
        state = ck["state"]
        if ck.get("opt_v") is not None:
            ov.load_state_dict(ck["opt_v"])
            oa.load_state_dict(ck["opt_a"])
        else:                      # from a pack: fresh optimizer moments, a short re-warm-up
            state["rewarm_from"] = state["step"]
        gen.manual_seed(cfg["seed"] + 2 + 7919 * state["step"])
        log(f"vae: resumed at step {state['step']} / {state['total_steps']}")
        if state["done"]:
            return
    spec = spec_of(cfg)
    vvae.train()
    avae.train()
    step_times, last_save, t_log, acc_t, nacc = [], time.time(), time.time(), None, 0
    while True:
        lr = next_step_lr(state, tc, step_times, "vae", clock, (ov, oa))
        if lr is None:
            break
        t0 = time.time()
        combos = ds.sample_combos(max(tc["video_batch"], tc["audio_batch"] // 2 + 1), gen_cpu(gen))
        video, audio, _ = ds.make_batch(combos, spec, generator=gen, device=device)
        with autocast(device):
            lv, rv, kv = video_vae_loss(vvae, video[:tc["video_batch"]], tc, gen)
        ov.zero_grad(set_to_none=True)
        lv.backward()
        torch.nn.utils.clip_grad_norm_(vvae.parameters(), 1.0)
        ov.step()
        with autocast(device):
            la, wa, sa = audio_vae_loss(avae, audio[:max(1, tc["audio_batch"] // 2)], tc, gen)
        oa.zero_grad(set_to_none=True)
        la.backward()
        torch.nn.utils.clip_grad_norm_(avae.parameters(), 1.0)
        oa.step()
        dt = time.time() - t0
        step_times.append(dt)
        state["trained_s"] += dt
        state["step"] += 1
        acc_t = torch.stack([x.detach().float() for x in (lv, rv, kv, la, wa, sa)]) + (acc_t if nacc else 0)
        nacc += 1
        if time.time() - t_log > (30 if device.type == "cuda" else 10) or state["step"] == 1:
            a = acc_t.cpu().numpy() / nacc
            log(f"vae step {state['step']}/{state['total_steps']} lr {lr:.2e} video loss {a[0]:.4f} "
                f"(rec {a[1]:.4f} kl {a[2]:.3f}) audio loss {a[3]:.4f} (l1 {a[4]:.4f} stft {a[5]:.4f}) "
                f"{dt * 1000:.0f} ms/step")
            state["last_losses"] = {k: float(x) for k, x in zip(
                ("video", "video_rec", "video_kl", "audio", "audio_l1", "audio_stft"), a)}
            nacc, t_log = 0, time.time()
        if tc.get("eval_every") and state["step"] % tc["eval_every"] == 0 and vae_good_enough(
                vvae, avae, cfg, state, tc, device):
            state["done"] = True
            break
        if time.time() - last_save > SAVE_EVERY_S:
            _save_vae(path, vvae, avae, ov, oa, state, None)
            last_save = time.time()
    stats = None
    if state["done"]:
        vvae.eval()
        avae.eval()
        stats = latent_stats(vvae, avae, cfg, device, gen, tc["stats_batches"], tc["stats_batch"])
        if not state.get("evals") or state["evals"][-1]["step"] != state["step"]:
            vae_good_enough(vvae, avae, cfg, state, dict(tc, eval_min_frac=0.0), device)
        vvae.eval()
        avae.eval()
        log(f"vae: done after {state['step']} steps ({state['trained_s'] / 60:.1f} min); latent std video "
            f"{np.mean(stats[1]):.3f} audio {np.mean(stats[3]):.3f}")
    _save_vae(path, vvae, avae, ov, oa, state, stats)


@torch.no_grad()
def audio_latent_stats(avae, cfg, device, gen, batches, batch):
    """The audio half of latent_stats (per-channel mean and std of the encoder's means)."""
    spec = spec_of(cfg)
    zs = []
    for _ in range(batches):
        _, audio, _ = ds.make_batch(ds.sample_combos(batch, gen_cpu(gen)), spec, generator=gen, device=device)
        za = avae.encode(audio.reshape(-1, 1, audio.shape[-1])).latent_dist.mean.float()
        zs.append(za.transpose(0, 1).reshape(za.shape[1], -1))
    a = torch.cat(zs, 1)
    return [float(x) for x in a.mean(1)], [float(x) for x in a.std(1).clamp_min(1e-3)]


def run_audio_vae(cfg, args, device, clock):
    """--stage audio_vae: train a new audio VAE (the config's encoder, the ``audio_only`` block's
    schedule) in a run whose vae stage has finished, keeping its video VAE and video latent
    statistics; then recompute the audio statistics.  For a run whose video VAE passed the
    round-trip judge but whose audio VAE did not (run 2, call 1): the transformer stage that
    follows encodes its audio with the new one.  Stops at ``max_steps`` or once the held-out
    round trip's tone judgment reaches ``eval_pass`` (every ``eval_every`` steps)."""
    tc = merge(cfg["vae_train"], cfg["vae_train"]["audio_only"])
    path = os.path.join(args.run, "vae.pt")
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if not ck["state"].get("done") or "stats" not in ck:
        raise SystemExit(f"{path}: the vae stage has not finished; --stage audio_vae replaces the audio "
                         "VAE of a finished one")
    torch.manual_seed(cfg["seed"] + 11)
    avae = make_audio_vae(cfg).to(device).train()
    params = [p for n, p in avae.named_parameters() if n.startswith(("decoder.", "dec_in_proj."))
              or tc.get("audio_encoder", "dac") != "bands"]
    opt = torch.optim.AdamW(params, lr=tc["lr"], betas=(0.8, 0.99), weight_decay=0.0)
    gen = torch.Generator(device=device).manual_seed(cfg["seed"] + 13)
    spec, t0, t_log, evals, step, tone = spec_of(cfg), time.time(), 0.0, [], 0, 0.0
    combos_eval = ds.HELD_OUT[:tc.get("eval_combos", len(ds.HELD_OUT))]
    while step < tc["max_steps"] and not clock.out_of_time():
        lr = lr_at(step, tc["max_steps"], tc["lr"], tc["warmup"])
        for g in opt.param_groups:
            g["lr"] = lr
        _, audio, _ = ds.make_batch(ds.sample_combos(tc["batch"], gen_cpu(gen)), spec, generator=gen, device=device)
        loss, wave, stft = audio_vae_loss(avae, audio, tc, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if time.time() - t_log > 20 or step == 1:
            log(f"audio vae step {step}/{tc['max_steps']} lr {lr:.2e} loss {float(loss.detach()):.4f} "
                f"(l1 {float(wave):.4f} stft {float(stft):.4f}) {(time.time() - t0) / step:.2f} s/step")
            t_log = time.time()
        if step % tc["eval_every"] == 0 or step == tc["max_steps"]:
            avae.eval()
            tone, rms = demo_eval.audio_roundtrip(avae, spec, device, combos=combos_eval)
            avae.train()
            evals.append({"step": step, "tone": tone, "rms": rms})
            log(f"audio vae eval at step {step}: round trip of the held-out clips tone {tone:.2f}, "
                f"output rms {rms:.3f}")
            if tone >= tc["eval_pass"] and step >= tc.get("min_steps", 0):
                break
    avae.eval()
    am, asd = audio_latent_stats(avae, cfg, device, gen, tc["stats_batches"], tc["stats_batch"])
    ck["audio_vae"] = {k: v.detach().cpu() for k, v in avae.state_dict().items()}
    ck["opt_a"] = None
    vm, vsd = ck["stats"][0], ck["stats"][1]
    ck["stats"] = (vm, vsd, am, asd)
    ck["state"]["audio_retrained"] = {"encoder": tc.get("audio_encoder", "dac"), "steps": step,
                                      "minutes": (time.time() - t0) / 60, "device": device.type,
                                      "loss": float(loss.detach()), "stft": float(stft), "evals": evals}
    atomic_save(ck, path)
    log(f"audio vae: done after {step} steps ({(time.time() - t0) / 60:.1f} min), tone {tone:.2f}; "
        f"audio latent mean {np.mean(am):.3f} std {np.mean(asd):.3f}; saved {path}")


def vae_good_enough(vvae, avae, cfg, state, tc, device):
    """Judge the held-out round trip (demo_eval.vae_roundtrip) and say whether the stage may
    stop: every category at least ``eval_pass`` and at least ``eval_min_kept`` of the
    saturated pixels kept, once ``eval_min_frac`` of the scheduled steps have run."""
    vvae.eval()
    avae.eval()
    t0 = time.time()
    with autocast(device):
        scores, kept = demo_eval.vae_roundtrip(vvae, avae, spec_of(cfg), device, pixel_norm,
                                               combos=ds.HELD_OUT[:tc.get("eval_combos", len(ds.HELD_OUT))])
    vvae.train()
    avae.train()
    state.setdefault("evals", []).append({"step": state["step"], **scores, "kept": kept})
    ok = min(scores["colour"], scores["motion"], scores["tone"]) >= tc["eval_pass"] and kept >= tc["eval_min_kept"]
    late = state["total_steps"] is not None and state["step"] >= tc["eval_min_frac"] * state["total_steps"]
    log(f"vae eval at step {state['step']}: round trip of the held-out clips {demo_eval.fmt(scores, kept)} "
        f"({time.time() - t0:.1f}s){' -> good enough, stopping' if ok and late else ''}")
    return ok and late


def _save_vae(path, vvae, avae, ov, oa, state, stats):
    ck = {"video_vae": vvae.state_dict(), "audio_vae": avae.state_dict(), "opt_v": ov.state_dict(),
          "opt_a": oa.state_dict(), "state": state}
    if stats is not None:
        ck["stats"] = stats
    atomic_save(ck, path)
    log(f"saved {path} (step {state['step']})")


# ---------------------------------------------------------------------------------------------
# stage 2: the transformer
# ---------------------------------------------------------------------------------------------
FRAME_RESCALE, FRAMES_PER_LATENT, SPATIAL_SCALE = 5.0 / 3.0, (1, 4, 4, 4, 4), 32


class Layout:
    """The packed t2va sequence (text, audio L then R, video), as h3cy.sampling.layout.Layout
    builds it (and diffusers' pipeline): position ids, tags and row indices, in torch."""

    def __init__(self, T, h, w, A, L, device):
        ph, pw = h // 2, w // 2
        n_audio, n_video = 2 * A, T * ph * pw
        S = L + n_audio + n_video
        a0, v0 = L, L + n_audio
        pos = np.zeros((S, 3), np.float64)
        pos[:L, 0] = np.arange(L)
        sa = np.sqrt(h * w)

        def grid(n):
            ratio = n / sa
            left = (1.0 - ratio) / 2.0
            return np.linspace(left, left + ratio, n // 2, endpoint=False) * SPATIAL_SCALE
        hg, wg = grid(h), grid(w)
        pos[a0:v0, 0] = np.tile(float(L) + np.arange(A, dtype=np.float64), 2)
        pos[a0:a0 + A, 2] = wg[0]
        pos[a0 + A:v0, 2] = wg[-1]
        spans = np.array([FRAME_RESCALE * FRAMES_PER_LATENT[k % 5] for k in range(T)])
        tau = np.concatenate([np.zeros(1), np.cumsum(spans[:-1])]) if T > 1 else np.zeros(1)
        hh, ww = np.meshgrid(hg, wg, indexing="ij")
        vid = np.empty((T, ph * pw, 3))
        vid[:, :, 0] = (float(L) + tau)[:, None]
        vid[:, :, 1] = hh.reshape(-1)[None]
        vid[:, :, 2] = ww.reshape(-1)[None]
        pos[v0:] = vid.reshape(-1, 3)
        tags = np.empty(S, np.int64)
        tags[:L], tags[a0:v0], tags[v0:] = 1, 2, 0
        self.S, self.L = S, L
        self.position_ids = torch.tensor(pos, dtype=torch.float32, device=device)
        self.token_tags = torch.tensor(tags, device=device)
        self.text_indices = torch.arange(L, device=device)
        self.audio_indices = torch.arange(a0, v0, device=device)
        self.video_indices = torch.arange(v0, S, device=device)


def patchify(z):
    """(B, C, T, h, w) -> (B, T*(h/2)*(w/2), C*4), column c*4 + ph*2 + pw (h3cy's patchify)."""
    B, C, T, h, w = z.shape
    z = z.reshape(B, C, T, h // 2, 2, w // 2, 2).permute(0, 2, 3, 5, 1, 4, 6)
    return z.reshape(B, T * (h // 2) * (w // 2), C * 4)


def pack_audio(z):
    """(B, 2, C, A) -> (B, 2A, C), channel-major rows (h3cy's pack_audio)."""
    B, ch, C, A = z.shape
    return z.permute(0, 1, 3, 2).reshape(B, ch * A, C)


def dit_forward(model, video_rows, audio_rows, text, t_video, t_audio, lay):
    """MiniMaxH3Transformer3DModel.forward with one (video, audio) timestep pair per sample.

    diffusers' forward shares one timestep table across the batch; here the AdaLN rows are
    gathered per sample (text and video rows read the video timestep, audio rows the audio
    one, as h3cy's Layout.step_timesteps).  With equal timesteps it is diffusers' forward
    (checked in --smoke).
    """
    B = video_rows.shape[0]
    rotary = model.rope(lay.position_ids)
    v = model.proj_in(video_rows)
    a = model.audio_proj_in(audio_rows)
    txt = model.token_refiner(model.context_embedder(text))
    H = txt.shape[-1]
    h = txt.new_zeros((B, lay.S, H))
    h = h.index_copy(1, lay.text_indices, txt)
    h = h.index_copy(1, lay.video_indices, v.to(txt.dtype))
    h = h.index_copy(1, lay.audio_indices, a.to(txt.dtype))
    temb = model.time_embedder(model.time_proj(torch.cat([t_video, t_audio])).to(model.time_embedder.linear_1.weight.dtype))
    ar = torch.arange(B, device=h.device)[:, None]
    tidx = torch.where((lay.token_tags == 2)[None], B + ar, ar)                       # (B, S)
    adaln = tidx * 3 + lay.token_tags[None]
    for block in model.transformer_blocks:
        sm, cm, gm, sf, cf, gf = block.adaln_proj(temb)
        x = block.norm1(h) * (1.0 + cm[adaln]) + sm[adaln]
        h = h + gm[adaln] * block.attn(x, rotary, None)
        x = block.norm2(h) * (1.0 + cf[adaln]) + sf[adaln]
        h = h + gf[adaln] * block.ff(x)
    no = model.norm_out
    shift, scale = no.linear(F.silu(temb).to(no.linear.weight.dtype)).chunk(2, dim=-1)
    h = no.norm(h) * (1.0 + scale[tidx]) + shift[tidx]
    return model.proj_out(h)[:, lay.video_indices], model.audio_proj_out(h)[:, lay.audio_indices]


def check_forward(model, cfg, device):
    """dit_forward == diffusers' forward when every sample has the same timesteps."""
    tcfg = cfg["transformer"]
    lay = Layout(3, 4, 4, 5, 6, device)
    g = torch.Generator().manual_seed(0)
    vr = torch.randn(2, 3 * 4, tcfg["in_channels"] * 4, generator=g).to(device)
    ar = torch.randn(2, 10, tcfg["audio_in_channels"], generator=g).to(device)
    tx = torch.randn(2, 6, tcfg["text_dim"], generator=g).to(device)
    m = copy.deepcopy(model).float().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(device) * 0.05)
        tv, ta = torch.tensor([0.3, 0.3], device=device), torch.tensor([0.7, 0.7], device=device)
        mine = dit_forward(m, vr, ar, tx, tv, ta, lay)
        row_t = torch.full((lay.S,), 0.3, device=device)
        row_t[lay.audio_indices] = 0.7
        vals, inv = torch.unique(row_t, return_inverse=True)
        ref = m(hidden_states=vr, audio_hidden_states=ar, encoder_hidden_states=tx, timestep=vals,
                timestep_indices=inv, token_tags=lay.token_tags, position_ids=lay.position_ids,
                video_indices=lay.video_indices, audio_indices=lay.audio_indices, text_indices=lay.text_indices,
                return_dict=False)
    for x, y in zip(mine, ref):
        err = float((x - y).abs().max())
        assert err < 1e-4, f"dit_forward differs from diffusers' forward by {err}"
    log("dit_forward matches diffusers' forward")


def sample_sigma(n, shift, gen, device):
    u = torch.rand(n, generator=gen, device=device)
    s = torch.where(torch.rand(n, generator=gen, device=device) < 0.5, torch.ones_like(u), torch.full_like(u, shift))
    return (s * u / (1 + (s - 1) * u)).clamp(1e-3, 1.0)


class Captions:
    """Every training caption (both article forms) with its drawing weight, token count and
    text states."""

    def __init__(self, tokenizer, states, combos, article_drop):
        self.items = []                       # (combo, caption, weight, token count)
        for c in combos:
            for art, p in ((True, 1 - article_drop), (False, article_drop)):
                cap = ds.caption(*c, article=art)
                self.items.append((c, cap, p, len(tokenizer.encode(cap, add_special_tokens=False).ids)))
        self.p = torch.tensor([x[2] for x in self.items], dtype=torch.float64)
        self.lengths = torch.tensor([x[3] for x in self.items])
        self.states = [states[x[1]] for x in self.items]

    def draw(self, n, gen):
        """n caption indices, drawn by weight."""
        return torch.multinomial(self.p, n, replacement=True, generator=gen)


class LatentBank:
    """A ring of encoded clips (normalised video rows, audio rows, caption index).  Each step
    encodes ``refresh`` new clips into it and trains on ``batch`` drawn from it, all with one
    caption length (one packed layout per batch), so the frozen encoders cost a fraction of a
    step while every clip is still new after size/refresh steps."""

    def __init__(self, size, encode, captions, gen, device):
        self.size, self.encode, self.captions, self.device = size, encode, captions, device
        self.pos, self.full = 0, False
        self.v = self.a = None
        self.cap = torch.zeros(size, dtype=torch.long)
        while not self.full:
            self.add(min(64, size), gen)

    def add(self, n, gen):
        idx = self.captions.draw(n, gen)
        v, a = self.encode([self.captions.items[i][0] for i in idx.tolist()])
        if self.v is None:
            self.v = torch.zeros((self.size,) + v.shape[1:], dtype=torch.bfloat16, device=self.device)
            self.a = torch.zeros((self.size,) + a.shape[1:], dtype=torch.bfloat16, device=self.device)
        slots = (torch.arange(n) + self.pos) % self.size
        self.v[slots.to(self.device)] = v.to(torch.bfloat16)
        self.a[slots.to(self.device)] = a.to(torch.bfloat16)
        self.cap[slots] = idx
        self.full = self.full or self.pos + n >= self.size
        self.pos = int((self.pos + n) % self.size)

    def draw(self, n, gen):
        """(video rows, audio rows, text states, caption length) of n clips with one length."""
        lengths = self.captions.lengths[self.cap]
        pick = int(torch.randint(self.size, (1,), generator=gen))
        same = torch.nonzero(lengths == lengths[pick]).flatten()
        sel = same[torch.randint(len(same), (n,), generator=gen)]
        text = torch.stack([self.captions.states[i] for i in self.cap[sel].tolist()])
        d = sel.to(self.device)
        return self.v[d].float(), self.a[d].float(), text, int(lengths[pick])


def ema_decay(step, tc):
    """0 during the warm-up, then min(ema, (1 + n) / (10 + n)) n steps after it: with a fixed
    0.999 the EMA of run 1 (1740 steps) still held 0.999^1440 = 24% of the step-300 weights."""
    if step < tc["warmup"]:
        return 0.0
    n = step - tc["warmup"]
    return min(tc["ema"], (1.0 + n) / (10.0 + n))


def ema_update(ema, model, decay):
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), [p.detach() for p in model.parameters()], 1.0 - decay)


def load_vaes(args, cfg, device):
    path = os.path.join(args.run, "vae.pt")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: run --stage vae first")
    ck = torch.load(path, map_location=device, weights_only=False)
    if not ck["state"].get("done") or "stats" not in ck:
        raise SystemExit(f"{path}: the vae stage has not finished (step {ck['state']['step']} of "
                         f"{ck['state']['total_steps']}); run --stage vae --resume")
    vvae, avae = make_video_vae(cfg).to(device).eval(), make_audio_vae(cfg).to(device).eval()
    vvae.load_state_dict(ck["video_vae"])
    avae.load_state_dict(ck["audio_vae"])
    for p in list(vvae.parameters()) + list(avae.parameters()):
        p.requires_grad_(False)
    return vvae, avae, ck["stats"], ck["state"]


def dit_budget(cfg, vae_state):
    """The transformer's minutes: its own budget plus what the VAE stage left of its budget
    when its held-out judge stopped it early, so a run's total stays what its calls were
    planned for."""
    tc = cfg["dit_train"]
    spare = 0.0
    if tc.get("take_unused_vae_minutes") and not cfg["vae_train"].get("total_steps"):
        spare = max(0.0, cfg["vae_train"]["budget_minutes"] - vae_state["trained_s"] / 60.0)
    return tc["budget_minutes"] + spare


def run_dit(cfg, args, device, clock):
    tc = cfg["dit_train"]
    path = os.path.join(args.run, "dit.pt")
    vvae, avae, stats, vae_state = load_vaes(args, cfg, device)
    tc = dict(tc, budget_minutes=dit_budget(cfg, vae_state))
    vm, vsd, am, asd = (torch.tensor(x, device=device) for x in stats)
    tok = load_tokenizer(os.path.join(args.run, "tokenizer"))
    caps = [ds.caption(*c, article=a) for c in ds.ALL_COMBOS for a in (True, False)]
    t0 = time.time()
    states = text_states(os.path.join(args.run, "text_encoder"), tok, caps, device)
    log(f"dit: text states of {len(caps)} captions in {time.time() - t0:.1f}s")
    captions = Captions(tok, states, ds.TRAIN_COMBOS, tc["article_drop"])
    torch.manual_seed(cfg["seed"] + 3)
    model = make_dit(cfg).to(device)
    if args.smoke:
        check_forward(model, cfg, device)
    ema = copy.deepcopy(model).eval()
    for p in ema.parameters():
        p.requires_grad_(False)
    fused = dict(fused=True) if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=tc["lr"], betas=(0.9, 0.99), weight_decay=0.01, **fused)
    state = {"step": 0, "total_steps": None, "done": False, "trained_s": 0.0}
    gen = torch.Generator(device=device).manual_seed(cfg["seed"] + 4)
    cgen = torch.Generator().manual_seed(cfg["seed"] + 5)
    if os.path.exists(path):
        ck = torch.load(path, map_location=device, weights_only=False)
        model.load_state_dict(ck["dit"])
        ema.load_state_dict(ck["ema"])
        state = ck["state"]
        if ck.get("opt") is not None:
            opt.load_state_dict(ck["opt"])
        else:                      # from a pack: fresh optimizer moments, a short re-warm-up
            state["rewarm_from"] = state["step"]
        gen.manual_seed(cfg["seed"] + 4 + 7919 * state["step"])
        cgen.manual_seed(cfg["seed"] + 5 + 7919 * state["step"])
        log(f"dit: resumed at step {state['step']} / {state['total_steps']}")
        if state["done"]:
            return
    spec = spec_of(cfg)
    T = (spec.frames - 5) // 17 * 5 + 2
    h, w, A = spec.height // 16, spec.width // 16, spec.audio_latents
    lengths = {len(tok.encode(c, add_special_tokens=False).ids) for c in caps}
    layouts = {int(L): Layout(T, h, w, A, int(L), device) for L in lengths}
    vaes = (vvae, avae, stats)

    def evaluate():
        """The EMA weights on the held-out prompts, as the adherence test samples them."""
        t0 = time.time()
        combos = ds.HELD_OUT[:tc.get("eval_combos", len(ds.HELD_OUT))]
        _, m, s = pixel_norm(torch.zeros(1, 3, 1, 1, 1, device=device))
        scores, _ = demo_eval.sample_and_judge(ema, dit_forward, layouts, states, tok, *vaes, spec, cfg["sampling"],
                                               device, (m, s), combos=combos, steps=tc.get("eval_steps"))
        state.setdefault("evals", []).append({"step": state["step"], **scores})
        log(f"dit eval at step {state['step']} (EMA, {len(combos)} held-out prompts, h3cy's sampler): "
            f"{demo_eval.fmt(scores)} ({time.time() - t0:.1f}s)")
    t_eval = time.time()

    def encode(combos):
        video, audio, _ = ds.make_batch(combos, spec, generator=gen, device=device)
        with torch.no_grad(), autocast(device):
            zv = vvae.encode(pixel_norm(video)[0]).latent_dist.mean.float()
            za = avae.encode(audio.reshape(-1, 1, audio.shape[-1])).latent_dist.mean.float()
        zv = (zv - vm.view(1, -1, 1, 1, 1)) / vsd.view(1, -1, 1, 1, 1)
        za = ((za - am.view(1, -1, 1)) / asd.view(1, -1, 1)).reshape(len(combos), 2, za.shape[1], za.shape[2])
        return patchify(zv), pack_audio(za)
    t0 = time.time()
    bank = LatentBank(tc["bank"], encode, captions, cgen, device)
    log(f"dit: latent bank of {tc['bank']} clips in {time.time() - t0:.1f}s")
    model.train()
    step_times, last_save, t_log, acc_t, nacc = [], time.time(), time.time(), None, 0
    B = tc["batch"]
    while True:
        lr = next_step_lr(state, tc, step_times, "dit", clock, (opt,))
        if lr is None:
            break
        t0 = time.time()
        bank.add(tc["refresh"], cgen)
        xv, xa, text, L = bank.draw(B, cgen)
        text = text.to(device)
        sv = sample_sigma(B, tc["shift"], gen, device)
        sa = torch.where(torch.rand(B, generator=gen, device=device) < tc["same_t"], sv,
                         sample_sigma(B, tc["shift"], gen, device))
        nv = torch.randn(xv.shape, generator=gen, device=device)
        na = torch.randn(xa.shape, generator=gen, device=device)
        inv = (1 - sv)[:, None, None] * xv + sv[:, None, None] * nv
        ina = (1 - sa)[:, None, None] * xa + sa[:, None, None] * na
        with autocast(device):
            pv, pa = dit_forward(model, inv, ina, text, 1 - sv, 1 - sa, layouts[L])
        lv = F.mse_loss(pv.float(), xv - nv)
        la = F.mse_loss(pa.float(), xa - na)
        loss = lv + tc["audio_weight"] * la
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema_update(ema, model, ema_decay(state["step"], tc))
        dt = time.time() - t0       # no per-step sync: the launch queue keeps the GPU busy
        step_times.append(dt)
        state["trained_s"] += dt
        state["step"] += 1
        acc_t = torch.stack([loss, lv, la]).detach() + (acc_t if nacc else 0)
        nacc += 1
        if time.time() - t_log > (30 if device.type == "cuda" else 10) or state["step"] == 1:
            a = acc_t.float().cpu().numpy() / nacc
            log(f"dit step {state['step']}/{state['total_steps']} lr {lr:.2e} loss {a[0]:.4f} "
                f"(video {a[1]:.4f} audio {a[2]:.4f}) {dt * 1000:.0f} ms/step")
            state["last_losses"] = {"loss": float(a[0]), "video": float(a[1]), "audio": float(a[2])}
            nacc, t_log = 0, time.time()
        if time.time() - last_save > SAVE_EVERY_S:
            _save_dit(path, model, ema, opt, state)
            last_save = time.time()
        if tc.get("eval_minutes") and time.time() - t_eval > 60.0 * tc["eval_minutes"]:
            evaluate()
            t_eval = time.time()
    if state["done"]:
        log(f"dit: done after {state['step']} steps ({state['trained_s'] / 60:.1f} min)")
    if not state.get("evals") or state["evals"][-1]["step"] != state["step"]:
        evaluate()
    _save_dit(path, model, ema, opt, state)


def _save_dit(path, model, ema, opt, state):
    atomic_save({"dit": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(), "state": state}, path)
    log(f"saved {path} (step {state['step']})")


# ---------------------------------------------------------------------------------------------
# export: the release layout (FL2VA/) h3cy.load reads
# ---------------------------------------------------------------------------------------------
KEEP_FP32 = ("proj_in", "audio_proj_in", "time_embedder", "proj_out", "audio_proj_out", "rope")
_TOP_LEVEL = [("video_patch_proj.", "proj_in."), ("audio_patch_proj.", "audio_proj_in."),
              ("condition_proj.", "context_embedder."), ("time_embedder.proj_in.", "time_embedder.linear_1."),
              ("time_embedder.proj_out.", "time_embedder.linear_2."), ("final_layer.norm.", "norm_out.norm."),
              ("final_layer.adaln_proj.linear.", "norm_out.linear."), ("final_layer.video_out.", "proj_out."),
              ("final_layer.audio_out.", "audio_proj_out.")]
_IN_BLOCK = [(".attn.q_norm.", ".attn.norm_q."), (".attn.k_norm.", ".attn.norm_k."),
             (".attn.out_proj.", ".attn.to_out.0."), (".mlp.fc1.", ".ff.net.0.proj."), (".mlp.fc2.", ".ff.net.2.")]


def _dit_original_name(d):
    for o, dd in _TOP_LEVEL:
        if d.startswith(dd):
            return o + d[len(dd):]
    if d.startswith("transformer_blocks."):
        name = "blocks." + d[len("transformer_blocks."):]
    elif d.startswith("token_refiner.refiner_blocks."):
        name = "token_refiner.blocks." + d[len("token_refiner.refiner_blocks."):]
    else:
        return d
    for o, dd in _IN_BLOCK:
        name = name.replace(dd, o)
    for p in "qkv":
        name = name.replace(f".attn.to_{p}.weight", ".attn.qkv_proj.weight")
    return name


def dit_release_state(sd, c):
    """diffusers state dict -> the release's (fused per-head interleaved qkv_proj, fc1 = [gate; value],
    original names, rope.inv_freq), in the released dtype mix (float32 for KEEP_FP32, else bf16);
    the inverse of diffusers' convert_minimax_h3_transformer_checkpoint_to_diffusers."""
    heads, hd, Fd = c["num_attention_heads"], c["attention_head_dim"], c["ffn_dim"]
    out = {}
    for k, v in sd.items():
        v = v.detach().float().cpu()
        if ".attn.to_k." in k or ".attn.to_v." in k:
            continue
        ok = _dit_original_name(k)
        if ".attn.to_q." in k:
            q, kk, vv = (sd[k.replace(".to_q.", f".to_{p}.")].detach().float().cpu() for p in "qkv")
            v = torch.stack([x.reshape(heads, hd, -1) for x in (q, kk, vv)], dim=1).reshape(3 * heads * hd, -1)
        elif ".ff.net.0.proj." in k:
            v = torch.cat([v[Fd:], v[:Fd]], dim=0)           # [value; gate] -> [gate; value]
        keep = any(m in k.split(".") for m in KEEP_FP32)
        out[ok] = v.contiguous() if keep else v.to(torch.bfloat16).contiguous()
    rfd = c["rope_freq_dim"]
    out["rope.inv_freq"] = 1.0 / (c.get("rope_theta", 10000.0) ** (
        torch.arange(0, 2 * rfd, 2, dtype=torch.float32) / (2 * rfd)))
    return out


def dit_release_config(c):
    return {"_class_name": "MiniMaxH3DiTModel", "hidden_size": c["hidden_size"], "num_layers": c["num_layers"],
            "token_refiner_num_layers": c["num_refiner_layers"], "num_attention_heads": c["num_attention_heads"],
            "attention_head_dim": c["attention_head_dim"], "ffn_hidden_size": c["ffn_dim"],
            "latents_dim": c["in_channels"], "audio_latents_dim": c["audio_in_channels"],
            "patch_size": list(c["patch_size"]), "text_dim": c["text_dim"], "timestep_input_dim": c["freq_dim"],
            "time_embed_hidden_size": c["time_embed_hidden_dim"], "time_embed_dim": c["time_embed_dim"],
            "adaln_out_features": 18 * c["hidden_size"], "final_adaln_out_features": 2 * c["hidden_size"],
            "rope_inv_freq_len": c["rope_freq_dim"], "norm_eps": 1e-5, "qk_norm_eps": 1e-5, "final_norm_eps": 1e-5}


def save_sharded(folder, state, shards=2):
    """Release-style shards + index (h3cy reads an index + shards as the interleaved-QKV layout)."""
    from safetensors.torch import save_file
    names = list(state)
    per = -(-len(names) // shards)
    wm, total = {}, 0
    for i in range(shards):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[i * per:(i + 1) * per]}
        save_file(part, os.path.join(folder, fname), metadata={"format": "pt"})
        for n, t in part.items():
            wm[n] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, f, indent=1)


def video_vae_release(sd, c):
    """Decoder-only release state dict (decoder.x_embedder, fused per-head interleaved to_qkv,
    ff.w1 = [gate; up], decoder.mask_token), matrices in bf16; the encoder is left out (h3cy
    never reads it; the checkpoint in --run keeps it)."""
    heads, D = c["decoder_num_attention_heads"], c["decoder_attention_head_dim"]
    out = {}
    for k, v in sd.items():
        v = v.detach().float().cpu()
        if not (k.startswith("decoder.") or k.startswith("post_quant_conv.")):
            continue
        if ".attn.to_k." in k or ".attn.to_v." in k:
            continue
        name = k.replace("decoder.proj_in.", "decoder.x_embedder.").replace(".attn.to_out.0.", ".attn.to_out.")
        name = name.replace(".ff.net.0.proj.", ".ff.w1.").replace(".ff.net.2.", ".ff.w2.")
        for p in "qkv":
            name = name.replace(f".attn.to_{p}.", ".attn.to_qkv.")
        if ".attn.to_q." in k:
            q, kk, vv = (sd[k.replace(".to_q.", f".to_{p}.")].detach().float().cpu() for p in "qkv")
            tail = q.shape[1:]
            v = torch.stack([x.reshape(heads, D, *tail) for x in (q, kk, vv)], dim=1).reshape(3 * heads * D, *tail)
        elif ".ff.net.0.proj." in k:
            up, gate = v.chunk(2, dim=0)
            v = torch.cat([gate, up], dim=0)
        # bf16 storage (h3cy widens it to float32 at load); the few vectors stay float32
        out[name] = (v.to(torch.bfloat16) if v.ndim >= 2 else v).contiguous()
    out["decoder.mask_token"] = torch.zeros(1, 1, sd["decoder.proj_in.weight"].shape[0])
    return out


def export(cfg, args, out_root):
    from safetensors.torch import save_file
    vck = torch.load(os.path.join(args.run, "vae.pt"), map_location="cpu", weights_only=False)
    dck = torch.load(os.path.join(args.run, "dit.pt"), map_location="cpu", weights_only=False)
    if "stats" not in vck:
        raise SystemExit("export: the vae stage has not finished")
    vmean, vstd, amean, astd = vck["stats"]
    fl = os.path.join(out_root, "FL2VA")
    tmp = fl + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.copytree(os.path.join(args.run, "tokenizer"), os.path.join(tmp, "tokenizer"))
    shutil.copytree(os.path.join(args.run, "text_encoder"), os.path.join(tmp, "text_encoder"))
    tr = os.path.join(tmp, "transformer")
    os.makedirs(tr)
    save_sharded(tr, dit_release_state(dck["ema"], cfg["transformer"]))
    with open(os.path.join(tr, "config.json"), "w") as f:
        json.dump(dit_release_config(cfg["transformer"]), f, indent=2)
    vc = cfg["video_vae"]
    vd = os.path.join(tmp, "video_vae")
    os.makedirs(os.path.join(vd, "source"))
    save_file(video_vae_release(vck["video_vae"], vc), os.path.join(vd, "source", "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(vd, "config.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3VideoVAE", "source_path": "source",
                   "source_safetensors_path": "model.safetensors", "vae_clip_length": 17, "vae_token_drop": 3,
                   "vae_tile_size": 256, "vae_tile_overlap_min": 64, "latent_channels": 24,
                   "latents_mean": vmean, "latents_std": vstd}, f, indent=2)
    with open(os.path.join(vd, "source", "config.json"), "w") as f:
        json.dump({"z_channels": 24, "out_ch": 3, "space_down": vc["spatial_downsample_factors"],
                   "time_down": vc["temporal_downsample_factors"],
                   "vit_decoder_kwargs": {"num_layers": vc["decoder_num_layers"],
                                          "heads": vc["decoder_num_attention_heads"],
                                          "dim_head": vc["decoder_attention_head_dim"], "rope_theta": 100.0,
                                          "rope_dim_ratio": 0.75, "norm_type": "rms_norm",
                                          "qk_norm_type": "rms_norm", "qk_norm_affine": False,
                                          "ffn_activation_fn": "silu", "ffn_use_gated": True}}, f, indent=2)
    ac = cfg["audio_vae"]
    ad = os.path.join(tmp, "audio_vae")
    os.makedirs(ad)
    asd = {k: v.detach().float().cpu().contiguous() for k, v in vck["audio_vae"].items()
           if k.startswith("decoder.") or k.startswith("dec_in_proj.")}
    save_file(asd, os.path.join(ad, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(ad, "config.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3AudioVAE", "output_channel": 2, "sample_rate": ac["sampling_rate"],
                   "source_safetensors_path": "model.safetensors", "latent_channels": ac["latent_channels"],
                   "latents_mean": amean, "latents_std": astd}, f, indent=2)
    vs, ds_ = vck["state"], dck["state"]
    with open(os.path.join(tmp, "model_index.json"), "w") as f:
        json.dump({"_class_name": "MiniMaxH3Pipeline",
                   "text_encoder": ["transformers", "MiniMaxH3Qwen3VLHFEncoder"],
                   "tokenizer": ["transformers", "Qwen2TokenizerFast"], "video_vae": ["diffusers", "MiniMaxH3VideoVAE"],
                   "audio_vae": ["diffusers", "MiniMaxH3AudioVAE"], "transformer": ["diffusers", "MiniMaxH3DiTModel"],
                   "_minimax_h3": {"h3cy_demo": True, "trained": True, "note": NOTE,
                                   "vocabulary": {k: list(v) for k, v in ds.VOCABULARY.items()},
                                   "held_out": [ds.caption(*c) for c in ds.HELD_OUT],
                                   "clip": cfg["clip"], "sampling": cfg["sampling"],
                                   "vae_steps": vs["step"], "vae_minutes": round(vs["trained_s"] / 60, 2),
                                   "dit_steps": ds_["step"], "dit_minutes": round(ds_["trained_s"] / 60, 2),
                                   "dit_finished": bool(ds_["done"]),
                                   "final_losses": {"vae": vs.get("last_losses"), "dit": ds_.get("last_losses")},
                                   "held_out_judged": {"vae_round_trip": (vs.get("evals") or [None])[-1],
                                                       "dit_samples": (ds_.get("evals") or [None])[-1]}}},
                  f, indent=2, default=float)
    with open(os.path.join(tmp, "README.txt"), "w") as f:
        f.write("h3cy demo model: MiniMax-H3's architecture at toy size, a " + NOTE + ".\n"
                "Made by training/train_demo.py in the h3cy repository; docs/demo.md describes it.\n")
    shutil.rmtree(fl, ignore_errors=True)
    os.replace(tmp, fl)
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(fl) for n in ns)
    log(f"exported {fl} ({total / 1e6:.1f} MB)")


# ---------------------------------------------------------------------------------------------
# packs: the run as a few files of <= 15 MiB (weights in bf16, no optimizer moments), for moving
# it between machines that keep nothing (a GPU lease returns at most 8 files of 16 MiB)
# ---------------------------------------------------------------------------------------------
PART_BYTES = 15 * 2 ** 20


def _bf16_flat(prefix, sd):
    """bf16 copies of the large float tensors (float32 kept below 64k elements: norms, biases,
    the small input/output projections, which the export keeps in float32)."""
    return {prefix + k: v.detach().to("cpu", torch.bfloat16 if v.is_floating_point() and v.numel() >= 65536
                                      else v.dtype).contiguous() for k, v in sd.items()}


def write_tar_parts(src_dir, out_dir, stem):
    """Tar src_dir's contents and split the tar into out_dir/stem.tar.NN parts of PART_BYTES."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(src_dir)):
            tar.add(os.path.join(src_dir, name), arcname=name)
    data = buf.getvalue()
    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        if old.startswith(stem + ".tar."):
            os.remove(os.path.join(out_dir, old))
    n = 0
    for i in range(0, len(data), PART_BYTES):
        with open(os.path.join(out_dir, f"{stem}.tar.{n:02d}"), "wb") as f:
            f.write(data[i:i + PART_BYTES])
        n += 1
    log(f"wrote {n} part(s) {out_dir}/{stem}.tar.* ({len(data) / 2 ** 20:.1f} MiB)")


def read_tar_parts(in_dir, stem, dest):
    import io
    import tarfile
    parts = sorted(n for n in os.listdir(in_dir) if n.startswith(stem + ".tar."))
    if not parts:
        return False
    data = b"".join(open(os.path.join(in_dir, n), "rb").read() for n in parts)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="data")
    return True


def pack(args, out_dir):
    """out_dir/run.tar.NN: tokenizer, text encoder, config, the stages' weights (bf16) and state."""
    from safetensors.torch import save_file
    tmp = os.path.join(args.run, "pack.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ("tokenizer", "text_encoder"):
        shutil.copytree(os.path.join(args.run, name), os.path.join(tmp, name))
    shutil.copy(os.path.join(args.run, "config.json"), tmp)
    meta = {}
    vp, dp = os.path.join(args.run, "vae.pt"), os.path.join(args.run, "dit.pt")
    if os.path.exists(vp):
        ck = torch.load(vp, map_location="cpu", weights_only=False)
        save_file({**_bf16_flat("video_vae.", ck["video_vae"]), **_bf16_flat("audio_vae.", ck["audio_vae"])},
                  os.path.join(tmp, "vae.safetensors"))
        meta["vae"] = {"state": ck["state"], "stats": ck.get("stats")}
    if os.path.exists(dp):
        ck = torch.load(dp, map_location="cpu", weights_only=False)
        save_file({**_bf16_flat("dit.", ck["dit"]), **_bf16_flat("ema.", ck["ema"])},
                  os.path.join(tmp, "dit.safetensors"))
        meta["dit"] = {"state": ck["state"]}
    with open(os.path.join(tmp, "pack.json"), "w") as f:
        json.dump(meta, f, indent=2, default=float)
    write_tar_parts(tmp, out_dir, "run")
    shutil.rmtree(tmp)


def unpack(args, in_dir):
    """Restore --run from in_dir/run.tar.NN (a pack), unless --run already holds checkpoints."""
    from safetensors.torch import load_file
    if any(os.path.exists(os.path.join(args.run, n)) for n in ("vae.pt", "dit.pt")):
        log(f"unpack: {args.run} already holds checkpoints; {in_dir} not used")
        return
    tmp = args.run + ".unpack"
    shutil.rmtree(tmp, ignore_errors=True)
    if not read_tar_parts(in_dir, "run", tmp):
        raise SystemExit(f"unpack: no run.tar.* in {in_dir}")
    os.makedirs(args.run, exist_ok=True)
    for name in ("tokenizer", "text_encoder"):
        shutil.rmtree(os.path.join(args.run, name), ignore_errors=True)
        shutil.move(os.path.join(tmp, name), os.path.join(args.run, name))
    with open(os.path.join(tmp, "pack.json")) as f:
        meta = json.load(f)

    def split(flat, *prefixes):
        return [{k[len(p):]: v.float() if v.is_floating_point() else v for k, v in flat.items() if k.startswith(p)}
                for p in prefixes]
    if "vae" in meta:
        v, a = split(load_file(os.path.join(tmp, "vae.safetensors")), "video_vae.", "audio_vae.")
        ck = {"video_vae": v, "audio_vae": a, "opt_v": None, "opt_a": None, "state": meta["vae"]["state"]}
        if meta["vae"].get("stats") is not None:
            ck["stats"] = meta["vae"]["stats"]
        atomic_save(ck, os.path.join(args.run, "vae.pt"))
    if "dit" in meta:
        d, e = split(load_file(os.path.join(tmp, "dit.safetensors")), "dit.", "ema.")
        atomic_save({"dit": d, "ema": e, "opt": None, "state": meta["dit"]["state"]}, os.path.join(args.run, "dit.pt"))
    shutil.rmtree(tmp)
    log(f"unpacked {in_dir}/run.tar.* into {args.run}: {sorted(meta)}")


# ---------------------------------------------------------------------------------------------
def prepare_run(cfg, args):
    """The run folder: config copy, tokenizer and text encoder (made once; reused on resume)."""
    os.makedirs(args.run, exist_ok=True)
    tokdir, tedir = os.path.join(args.run, "tokenizer"), os.path.join(args.run, "text_encoder")
    if not os.path.exists(os.path.join(tokdir, "tokenizer.json")):
        vocab = build_tokenizer(tokdir, cfg["tokenizer"]["vocab_size"])
        log(f"tokenizer: {vocab} tokens")
    if not os.path.exists(os.path.join(tedir, "config.json")):
        vocab = load_tokenizer(tokdir).get_vocab_size(with_added_tokens=True)
        build_text_encoder(cfg, tedir, vocab, cfg["seed"])
        log("text encoder built")
    with open(os.path.join(args.run, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stage", choices=("vae", "audio_vae", "dit", "all", "none"), default="all",
                   help="audio_vae: retrain only the audio VAE of a finished vae stage (see run_audio_vae)")
    p.add_argument("--minutes", type=float, default=None, help="wall-clock bound of this invocation")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --run")
    p.add_argument("--run", default=os.path.join(HERE, "runs", "demo"), help="checkpoint folder")
    p.add_argument("--config", default=os.path.join(HERE, "config.json"))
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--smoke", action="store_true", help="tiny batches/steps at 64x64 (the config's smoke block)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--export", default=None, metavar="OUT", help="write OUT/FL2VA (release layout) at the end")
    p.add_argument("--export-tar", default=None, metavar="DIR",
                   help="also write the export as DIR/demo-model.tar.NN (<= 15 MiB parts; untar in h3cy/data/)")
    p.add_argument("--pack", default=None, metavar="DIR",
                   help="at the end, write the run as DIR/run.tar.NN (<= 15 MiB parts, bf16, no optimizer state)")
    p.add_argument("--unpack", default=None, metavar="DIR",
                   help="start from DIR/run.tar.NN when --run holds no checkpoint (implies --resume)")
    args = p.parse_args(argv)
    if args.export_tar and not args.export:
        p.error("--export-tar needs --export")
    t_start = T_START
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    cfg = load_config(args.config, args.smoke)
    if args.unpack:
        unpack(args, args.unpack)
        args.resume = True
    have = [n for n in ("vae.pt", "dit.pt") if os.path.exists(os.path.join(args.run, n))]
    if have and not args.resume and args.stage != "none":
        raise SystemExit(f"{args.run} already holds {have}: pass --resume to continue, or another --run")
    prepare_run(cfg, args)
    clock = Clock(args.minutes, t_start)
    log(f"device {device}, stage {args.stage}, run {args.run}" + (" (smoke)" if args.smoke else ""))
    if args.stage in ("vae", "all"):
        run_vae(cfg, args, device, clock)
    if args.stage == "audio_vae":
        run_audio_vae(cfg, args, device, clock)
    if args.stage in ("dit", "all") and not clock.out_of_time():
        ck = os.path.join(args.run, "vae.pt")
        if torch.load(ck, map_location="cpu", weights_only=False)["state"]["done"]:
            run_dit(cfg, args, device, clock)
        else:
            log("dit: waiting for the vae stage to finish (run again with --resume)")
    if args.pack:
        pack(args, args.pack)
    if args.export:
        export(cfg, args, args.export)
        if args.export_tar:
            tmp = os.path.join(args.run, "export.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(os.path.join(tmp, "demo-model"))
            shutil.copytree(os.path.join(args.export, "FL2VA"), os.path.join(tmp, "demo-model", "FL2VA"))
            write_tar_parts(tmp, args.export_tar, "demo-model")
            shutil.rmtree(tmp)
    log(f"finished in {(time.time() - t_start) / 60:.2f} min")


if __name__ == "__main__":
    main()
