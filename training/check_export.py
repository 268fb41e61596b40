"""Check an export of train_demo.py against the models it was trained as: every component that
h3cy runs from OUT/FL2VA gives what torch gives from the run's checkpoints (the exported bf16
roundings applied on both sides).

    PYTHONPATH=$PWD python3 training/check_export.py --run training/runs/demo --export h3cy/data/demo-model [--judge]

Needs h3cy (its compiled extension) and torch/diffusers/transformers: run it where h3cy is built
(the CPU machine), not on the training machine.  Prints relative L2 errors per component and
exits non-zero if one is above its bound.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shapes_dataset as ds  # noqa: E402
import train_demo as td  # noqa: E402


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def bf16(t):
    return t.to(torch.bfloat16).float()


def judge_export(root, bad):
    """The adherence test's own generate_and_judge on ``root``: the 24 held-out prompts through
    h3cy.load(...).generate at the model's settings, written as MP4 and judged from the files."""
    import pathlib
    import time
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    from test_demo_adherence import generate_and_judge
    from h3cy import demo
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        s, results = generate_and_judge(root, pathlib.Path(tmp), demo.trained_settings(root))
    for c, r in zip(ds.HELD_OUT, results):
        got = (r.get("colour"), r.get("motion"), r.get("tone"))
        if got != (c[0], c[2], c[3]):
            print(f"  {ds.caption(*c)!r}: judged {got}")
    print(f"{'held-out prompts, judged MP4s':34s} colour {s['colour']:.2f} motion {s['motion']:.2f} "
          f"tone {s['tone']:.2f} all {s['all']:.2f}  (bound 0.90)  {'ok' if s['all'] >= 0.9 else 'FAIL'}  "
          f"({time.time() - t0:.0f}s)")
    if not s["all"] >= 0.9:
        bad.append("adherence")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--run", required=True)
    p.add_argument("--export", required=True, help="the folder holding FL2VA/")
    p.add_argument("--config", default=None, help="default: the run's config.json")
    p.add_argument("--judge", action="store_true",
                   help="also generate the 24 held-out prompts through h3cy and judge the MP4s as "
                        "tests/test_demo_adherence.py does (>= 0.90 of the 72 judgments to pass)")
    args = p.parse_args(argv)
    import h3cy
    from h3cy.models.prompt_cache import encode_prompt
    torch.set_num_threads(2)
    fl = os.path.join(args.export, "FL2VA")
    import json
    with open(args.config or os.path.join(args.run, "config.json")) as f:
        cfg = json.load(f)
    bad = []

    def report(name, err, bound):
        print(f"{name:34s} rel-L2 {err:.2e}  (bound {bound:.0e})  {'ok' if err <= bound else 'FAIL'}")
        if not err <= bound:
            bad.append(name)

    # tokenizer and text encoder
    tok = h3cy.Tokenizer.from_pretrained(os.path.join(fl, "tokenizer"))
    ref_tok = td.load_tokenizer(os.path.join(args.run, "tokenizer"))
    caps = [ds.caption(*c) for c in ds.HELD_OUT[:4]] + ["a blue square moves up, low tone", "A red fox."]
    same = all(tok.encode(c) == ref_tok.encode(c, add_special_tokens=False).ids for c in caps)
    print(f"{'tokenizer ids':34s} {'same' if same else 'DIFFER'}")
    if not same:
        bad.append("tokenizer")
    ref_states = td.text_states(os.path.join(args.run, "text_encoder"), ref_tok, caps, torch.device("cpu"))
    te = h3cy.TextEncoder.from_pretrained(os.path.join(fl, "text_encoder"), weights="fp32")
    with tempfile.TemporaryDirectory() as cache:
        err = max(rel(encode_prompt(te, c, tokenizer=tok, cache_dir=cache), ref_states[c].numpy()) for c in caps)
    te.close()
    report("text encoder hidden_states[50]", err, 1e-4)

    # transformer: h3cy on the export vs diffusers with the EMA weights as exported
    dck = torch.load(os.path.join(args.run, "dit.pt"), map_location="cpu", weights_only=False)
    model = td.make_dit(cfg).eval()
    sd = {k: (v.float() if any(m in k.split(".") for m in td.KEEP_FP32) else bf16(v)) for k, v in dck["ema"].items()}
    model.load_state_dict(sd)
    spec = td.spec_of(cfg)
    T = (spec.frames - 5) // 17 * 5 + 2
    g = h3cy.Geometry(spec.width, spec.height, spec.frames)
    L = len(tok.encode(caps[0]))
    lay = h3cy.Layout(g, L)
    rng = np.random.default_rng(0)
    tc = cfg["transformer"]
    vr = rng.standard_normal((1, g.video_rows, tc["in_channels"] * 4), dtype=np.float32)
    ar = rng.standard_normal((1, 2 * g.A, tc["audio_in_channels"]), dtype=np.float32)
    tx = ref_states[caps[0]].numpy()[None]
    ts, ti = lay.step_timesteps(0.4, 0.6)
    packed = dict(hidden_states=vr, audio_hidden_states=ar, encoder_hidden_states=tx, timestep=ts,
                  timestep_indices=ti, token_tags=lay.token_tags, position_ids=lay.position_ids,
                  video_indices=lay.video_indices, audio_indices=lay.audio_indices, text_indices=lay.text_indices)
    dit = h3cy.DiT.from_pretrained(os.path.join(fl, "transformer"), weights="fp32", streaming=False)
    hv, ha = dit.forward(**packed)
    dit.close()
    with torch.no_grad():
        tp = {k: torch.from_numpy(np.asarray(v)) for k, v in packed.items()}
        tp["position_ids"] = tp["position_ids"].float()
        rv, ra = model(**tp, return_dict=False)
        # and the training forward (per-sample timesteps) on the same rows
        tl = td.Layout(T, spec.height // 16, spec.width // 16, spec.audio_latents, L, torch.device("cpu"))
        mv, ma = td.dit_forward(model, tp["hidden_states"], tp["audio_hidden_states"], tp["encoder_hidden_states"],
                                torch.tensor([0.4]), torch.tensor([0.6]), tl)
    assert np.array_equal(tl.position_ids.numpy(), lay.position_ids.astype(np.float32))
    assert np.array_equal(tl.token_tags.numpy(), lay.token_tags)
    report("transformer video velocity", rel(hv, rv.numpy()), 2e-3)
    report("transformer audio velocity", rel(ha, ra.numpy()), 2e-3)
    report("training forward vs diffusers'", max(rel(mv.numpy(), rv.numpy()), rel(ma.numpy(), ra.numpy())), 1e-5)

    # decoders: h3cy on the export vs diffusers with the trained weights (bf16 where exported)
    vck = torch.load(os.path.join(args.run, "vae.pt"), map_location="cpu", weights_only=False)
    vmean, vstd, amean, astd = vck["stats"]
    vvae = td.make_video_vae(cfg).eval()
    vvae.load_state_dict({k: (bf16(v) if k.startswith(("decoder.", "post_quant_conv.")) and v.ndim >= 2 else v)
                          for k, v in vck["video_vae"].items()})
    z = rng.standard_normal((24, T, spec.height // 16, spec.width // 16)).astype(np.float32)
    dec = h3cy.VideoDecoder.from_pretrained(os.path.join(fl, "video_vae"), weights="fp32")
    hf = dec.decode(z)
    dec.close() if hasattr(dec, "close") else None
    with torch.no_grad():
        zt = torch.from_numpy(z)[None] * torch.tensor(vstd).view(1, -1, 1, 1, 1) + torch.tensor(vmean).view(1, -1, 1, 1, 1)
        out = vvae.decode(zt).sample
        pm = torch.tensor(td.PIXEL_MEAN).view(1, -1, 1, 1, 1)
        ps = torch.tensor(td.PIXEL_STD).view(1, -1, 1, 1, 1)
        rf = (out * ps + pm).clamp(0, 1)[0].permute(1, 2, 3, 0).numpy()
    report("video decoder frames", rel(hf, rf), 2e-3)
    avae = td.make_audio_vae(cfg).eval()
    avae.load_state_dict(vck["audio_vae"])
    za = rng.standard_normal((2, tc["audio_in_channels"], g.A)).astype(np.float32)
    adec = h3cy.AudioDecoder.from_pretrained(os.path.join(fl, "audio_vae"), weights="fp32")
    hw = adec.decode(za)
    with torch.no_grad():
        zat = torch.from_numpy(za) * torch.tensor(astd).view(1, -1, 1) + torch.tensor(amean).view(1, -1, 1)
        rw = avae.decode(zat).sample[:, 0].numpy()
    report("audio decoder waveform", rel(hw, rw), 2e-3)
    print("sample rate", adec.sample_rate, "hop", adec.hop)
    if args.judge:
        judge_export(args.export, bad)
    if bad:
        print("FAILED:", ", ".join(bad))
        sys.exit(1)
    print("export ok")


if __name__ == "__main__":
    main()
