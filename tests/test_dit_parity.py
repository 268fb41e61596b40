"""h3cy.DiT against diffusers 0.42.1's MiniMaxH3Transformer3DModel on tiny random models
saved in every layout (tests/_tiny_dit.py), for every weights mode."""
import json
import os

import numpy as np
import pytest
import torch

import h3cy
from h3cy.errors import H3Error, H3ValueError
from _compare import assert_close, assert_nontrivial, max_rel, rel_l2
from _tiny_dit import TINY_CONFIGS
from conftest import isa_params

torch.set_num_threads(2)


def packed_inputs(cfg, seed, L=5, Nv=12, Na=6, U=2):
    """A shuffled packed layout with text, video and audio rows and U distinct timesteps."""
    rng = np.random.default_rng(seed)
    S = L + Nv + Na
    perm = rng.permutation(S)
    xi, vi, ai = np.sort(perm[:L]), np.sort(perm[L:L + Nv]), np.sort(perm[L + Nv:])
    tags = np.zeros(S, np.int64)
    tags[xi], tags[ai] = 1, 2
    pv = cfg["in_channels"] * int(np.prod(cfg["patch_size"]))
    return dict(
        hidden_states=rng.standard_normal((1, Nv, pv)).astype(np.float32),
        audio_hidden_states=rng.standard_normal((1, Na, cfg["audio_in_channels"])).astype(np.float32),
        encoder_hidden_states=rng.standard_normal((1, L, cfg["text_dim"])).astype(np.float32),
        timestep=np.array([0.9, 0.35, 0.6][:U], np.float32),
        timestep_indices=rng.integers(0, U, S), token_tags=tags,
        position_ids=rng.integers(0, 7, (S, 3)).astype(np.float32),
        video_indices=rng.permutation(vi), audio_indices=ai, text_indices=rng.permutation(xi))


def reference_forward(folder, dtype, inputs):
    """diffusers forward, no grad; dtype torch.float32 or torch.bfloat16 (as released)."""
    from diffusers import MiniMaxH3Transformer3DModel
    m = MiniMaxH3Transformer3DModel.from_pretrained(folder, torch_dtype=dtype).eval()
    with torch.no_grad():
        v, a = m(**{k: torch.from_numpy(np.asarray(x)) for k, x in inputs.items()}, return_dict=False)
    return v.float().numpy(), a.float().numpy()


CONFIGS = list(TINY_CONFIGS)


@pytest.mark.parametrize("isa", isa_params())
@pytest.mark.parametrize("name", CONFIGS)
def test_fp32_matches_diffusers_fp32(tiny_dit_factory, name, isa):
    t = tiny_dit_factory(name)
    inputs = packed_inputs(t.config, seed=1, U=2 if name != "b" else 3)
    want_v, want_a = reference_forward(t.diffusers_fp32, torch.float32, inputs)
    assert_nontrivial(want_v)
    got_v, got_a = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", threads=2,
                                            isa=isa).forward(**inputs)
    # observed max-rel ~3e-7 (float32 rounding order); a wrong row index or rounding step gives > 1e-2
    assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")


@pytest.mark.parametrize("name", CONFIGS)
def test_bf16_matches_diffusers_as_released(tiny_dit_factory, name):
    t = tiny_dit_factory(name)
    inputs = packed_inputs(t.config, seed=2)
    want_v, want_a = reference_forward(t.diffusers_bf16, torch.bfloat16, inputs)
    f32_v, f32_a = reference_forward(t.diffusers_bf16, torch.float32, inputs)   # same weights, no rounding
    got_v, got_a = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16", threads=2).forward(**inputs)
    # observed rel-L2 ~2e-3 (GEMM accumulation order flips a few bf16 roundings)
    assert_close(got_v, want_v, rel_l2_tol=1e-2, what="video")
    assert_close(got_a, want_a, rel_l2_tol=1e-2, what="audio")
    # and closer to diffusers' bf16 run than its float32 run on the same weights is (as
    # test_video_vae checks): skipping the bf16 activation roundings, which the 1e-2 bound
    # alone cannot see, lands exactly as far as the float32 run (tried: ratio 1.00 on all four
    # configs).  h3cy's bf16 GEMMs sum in torch's AVX-512 order (observed ratio ~0.2 there);
    # against torch's AVX2 build (a Zen 3) or its AMX kernels the ratio is 0.6-1.02, so the
    # check runs only where torch sums in that order.
    if torch.backends.cpu.get_cpu_capability() != "AVX512" or "amx_bf16" in h3cy.ops.cpu_features():
        return
    for got, want, f32, what in ((got_v, want_v, f32_v, "video"), (got_a, want_a, f32_a, "audio")):
        assert rel_l2(got, want) < rel_l2(f32, want), \
            f"{what}: {rel_l2(got, want):.3g} from bf16, fp32 run {rel_l2(f32, want):.3g}"


def unit_gain_model(cfg, seed, outlier_channels=()):
    """A tiny diffusers model with weights scaled like a trained network's (std
    1/sqrt(fan_in), norm weights 1 + 0.1 N, small biases), saved in the released dtype mix.

    The layout fixtures' weights (std 0.5 everywhere, norm weights around 0) amplify every
    rounding through the stack far more than the real model does: int4 there is 0.08-0.19
    rel-L2 from fp32.  Quantisation error bounds are therefore checked on this model.
    ``outlier_channels``: FFN-down input channels made 50x larger (their value rows x50)
    and the matching down-projection columns /50, so the float function is unchanged and
    the outputs are not dominated by the outlier channels ("massive activations")."""
    from diffusers import MiniMaxH3Transformer3DModel
    torch.manual_seed(seed)
    m = MiniMaxH3Transformer3DModel(**cfg).eval()
    F = cfg["ffn_dim"]
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in n else 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
        for blk in list(m.transformer_blocks) + list(m.token_refiner.refiner_blocks):
            for c in outlier_channels:
                blk.ff.net[0].proj.weight[c] *= 50.0       # value half: rows 0..F-1
                blk.ff.net[2].weight[:, c] /= 50.0
            assert blk.ff.net[0].proj.weight.shape[0] == 2 * F
    for n, p in m.named_parameters():
        if not any(k in n.split(".") for k in ("proj_in", "audio_proj_in", "time_embedder", "proj_out",
                                                 "audio_proj_out")):
            p.data = p.data.to(torch.bfloat16)
    return m


@pytest.fixture(scope="module")
def unit_gain_folders(tmp_path_factory):
    out = {}
    for name in CONFIGS:
        folder = tmp_path_factory.mktemp(f"unit_gain_{name}")
        unit_gain_model(TINY_CONFIGS[name], seed=50 + ord(name)).save_pretrained(folder)
        out[name] = str(folder)
    return out


@pytest.mark.parametrize("mode,tol", [("fp16", 2e-2), ("int8", 3e-2), ("int4", 8e-2)])
@pytest.mark.parametrize("name", CONFIGS)
def test_quantised_modes_close_to_fp32(unit_gain_folders, name, mode, tol):
    folder = unit_gain_folders[name]
    inputs = packed_inputs(TINY_CONFIGS[name], seed=3)
    ref_v, ref_a = h3cy.DiT.from_pretrained(folder, weights="fp32", threads=1).forward(**inputs)
    got_v, got_a = h3cy.DiT.from_pretrained(folder, weights=mode, threads=2).forward(**inputs)
    ev, ea = rel_l2(got_v, ref_v), rel_l2(got_a, ref_a)
    # observed rel-L2: fp16 ~1e-4, int8 ~2e-3..6e-3, int4 ~3e-2..6e-2 (bounds: 2e-2, 3e-2, 8e-2)
    assert ev <= tol and ea <= tol, f"{mode}: rel-L2 video {ev:.3g} audio {ea:.3g} > {tol}"
    if mode != "fp16":  # bf16 weights convert to fp16 exactly unless tiny: fp16 may equal fp32
        assert ev > 1e-7, "quantised result identical to fp32: quantisation did not run"


@pytest.mark.parametrize("mode,act_group", [("int8", 8)])
def test_finer_ffn_activation_scales_tame_outliers(tmp_path, mode, act_group):
    # ffn_dim 96: 12 groups of 8 (int8), 3 groups of 32 (int4).  One block and no refiner,
    # so the FFN-down GEMM is the only quantised GEMM whose input carries the outliers
    # (after it come the final norm and the float32 heads).
    cfg = dict(TINY_CONFIGS["b"], num_layers=1, num_refiner_layers=0)
    folder = str(tmp_path / "outliers")
    unit_gain_model(cfg, seed=77, outlier_channels=(5, 6, 70)).save_pretrained(folder)
    inputs = packed_inputs(cfg, seed=11)
    ref = h3cy.DiT.from_pretrained(folder, weights="fp32").forward(**inputs)
    whole_row = h3cy.DiT.from_pretrained(folder, weights=mode, ffn_act_group=None).forward(**inputs)
    finer = h3cy.DiT.from_pretrained(folder, weights=mode, ffn_act_group=act_group).forward(**inputs)
    for r, w, f in zip(ref, whole_row, finer):
        e_row, e_fine = rel_l2(w, r), rel_l2(f, r)
        assert e_fine * 2 <= e_row, f"{mode}: finer scales {e_fine:.3g} vs one per row {e_row:.3g}"


@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_layouts_give_identical_outputs(tiny_dit_factory, weights):
    t = tiny_dit_factory("b")
    inputs = packed_inputs(t.config, seed=4)
    outs = {}
    for folder in ("diffusers_bf16", "original", "original_single"):
        outs[folder] = h3cy.DiT.from_pretrained(getattr(t, folder), weights=weights, threads=2).forward(**inputs)
    for folder in ("original", "original_single"):
        for g, w in zip(outs[folder], outs["diffusers_bf16"]):
            assert np.array_equal(g, w), f"{folder} differs from the diffusers layout"


def test_sharded_and_single_file_identical(tiny_dit_factory):
    t = tiny_dit_factory("a")
    inputs = packed_inputs(t.config, seed=5)
    a = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32").forward(**inputs)
    b = h3cy.DiT.from_pretrained(t.diffusers_fp32_sharded, weights="fp32").forward(**inputs)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_c_block_driver_equals_python_reference_path(tiny_dit_factory, monkeypatch):
    """The C block driver against the op-by-op Python path (H3CY_DIT_PYTHON A/B switch)."""
    t = tiny_dit_factory("c")
    inputs = packed_inputs(t.config, seed=6)
    for weights, tol in (("fp32", 1e-6), ("bf16", 1e-2)):
        d = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights=weights)
        got = d.forward(**inputs)
        d._python_blocks = True
        want = d.forward(**inputs)
        for g, w in zip(got, want):
            # fp32: only the fused epilogue vs separate ops differ (~1e-7); bf16: a few
            # roundings flip (~1e-3); a wrong op order in the C driver gives > 1e-1
            assert_close(g, w, rel_l2_tol=tol, what=weights)


def test_prepared_and_on_the_fly_adaln_identical(tiny_dit_factory):
    t = tiny_dit_factory("b")
    inputs = packed_inputs(t.config, seed=7)
    d1 = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16")
    on_the_fly = d1.forward(**inputs)
    d2 = h3cy.DiT.from_pretrained(t.diffusers_bf16, weights="bf16")
    d2.prepare_timesteps(inputs["timestep"])
    d2.release_adaln()
    prepared = d2.forward(**inputs)
    for x, y in zip(on_the_fly, prepared):
        assert np.array_equal(x, y)
    other = dict(inputs, timestep=np.array([0.123, 0.35], np.float32))
    with pytest.raises(H3Error, match="0.123"):
        d2.forward(**other)


def test_forward_rejects_bad_inputs(tiny_dit_factory):
    t = tiny_dit_factory("a")
    d = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    good = packed_inputs(t.config, seed=8)
    S = good["position_ids"].shape[0]
    bad_cases = [
        dict(position_ids=np.zeros((S, 2), np.float32)),
        dict(timestep_indices=np.full(S, 5)),
        dict(token_tags=np.full(S, 3)),
        dict(video_indices=good["video_indices"][:-1]),
        dict(text_indices=good["video_indices"][:good["text_indices"].shape[0]]),
        dict(hidden_states=np.zeros((1, good["hidden_states"].shape[1], 7), np.float32)),
        dict(hidden_states=np.zeros((2,) + good["hidden_states"].shape[1:], np.float32)),
        dict(audio_indices=np.full(good["audio_indices"].shape, S + 3)),
    ]
    for case in bad_cases:
        with pytest.raises(H3ValueError):
            d.forward(**dict(good, **case))


def test_unbatched_inputs_give_unbatched_outputs(tiny_dit_factory):
    t = tiny_dit_factory("a")
    d = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32")
    inputs = packed_inputs(t.config, seed=9)
    v, a = d.forward(**inputs)
    flat = dict(inputs, hidden_states=inputs["hidden_states"][0],
                audio_hidden_states=inputs["audio_hidden_states"][0],
                encoder_hidden_states=inputs["encoder_hidden_states"][0])
    v2, a2 = d.forward(**flat)
    assert v.shape[0] == 1 and v2.shape == v.shape[1:]
    assert np.array_equal(v[0], v2) and np.array_equal(a[0], a2)


# ---------------------------------------------------------------------------------------------
# the release layout's stored RoPE frequencies (rope.inv_freq)
# ---------------------------------------------------------------------------------------------
ROPE_THETA = 500.0   # not diffusers' 10000 default, so a theta=10000 computation is visibly wrong


@pytest.fixture(scope="module")
def theta_folders(tmp_path_factory):
    """``get(name) -> dict`` of folders of TINY_CONFIGS[name] built with rope_theta=500: diffusers'
    own (its config says rope_theta: 500) in float32 and in the released dtype mix, and the release
    layout of each, whose rope.inv_freq holds diffusers' theta=500 frequencies while its config (the
    original spelling) has no rope_theta, as the release's has none.  Only the stored tensor can
    tell h3cy the frequencies there."""
    from _tiny_dit import original_state_dict, random_model, write_original
    cache = {}

    def get(name):
        if name in cache:
            return cache[name]
        cfg = dict(TINY_CONFIGS[name], rope_theta=ROPE_THETA)
        root = tmp_path_factory.mktemp(f"theta_{name}")
        m = random_model(cfg, 2000 + ord(name))
        out = {"config": cfg, "inv_freq": m.rope.inv_freq.numpy().copy()}
        out["diffusers_fp32"] = str(root / "diffusers_fp32")
        m.save_pretrained(out["diffusers_fp32"])
        sd = m.state_dict()
        for layout, shards, key in (("interleaved", 3, "original_fp32"), ("stacked", 1, "original_single_fp32")):
            out[key] = str(root / key)
            write_original(out[key], original_state_dict(sd, cfg, layout), cfg, shards)
        for pname, p in m.named_parameters():        # the released dtype mix
            if not any(k in pname.split(".") for k in ("proj_in", "audio_proj_in", "time_embedder",
                                                         "proj_out", "audio_proj_out")):
                p.data = p.data.to(torch.bfloat16)
        out["diffusers_bf16"] = str(root / "diffusers_bf16")
        m.save_pretrained(out["diffusers_bf16"])
        out["original_bf16"] = str(root / "original_bf16")
        write_original(out["original_bf16"], original_state_dict(m.state_dict(), cfg, "interleaved"), cfg, 2)
        with open(os.path.join(out["original_bf16"], "config.json")) as f:
            assert "rope_theta" not in json.load(f)
        cache[name] = out
        return out
    return get


@pytest.mark.parametrize("folder", ["original_fp32", "original_single_fp32"])
@pytest.mark.parametrize("name", ["a", "c"])
def test_release_layout_stored_rope_frequencies_match_diffusers(theta_folders, name, folder):
    """A release-layout transformer whose stored rope.inv_freq are not the theta=10000 ones
    (theta=500, no rope_theta in its config) computes what diffusers computes with those
    frequencies, in fp32."""
    from h3cy.models.dit import rope_inv_freq
    f = theta_folders(name)
    F = f["config"]["rope_freq_dim"]
    default = rope_inv_freq(F, 10000.0)
    assert not np.allclose(f["inv_freq"], default, rtol=1e-2)
    inputs = packed_inputs(f["config"], seed=12)
    want_v, want_a = reference_forward(f["diffusers_fp32"], torch.float32, inputs)
    assert_nontrivial(want_v)
    d = h3cy.DiT.from_pretrained(f[folder], weights="fp32", threads=2)
    got_v, got_a = d.forward(**inputs)
    # observed max-rel ~3.5e-7 as for the other fp32 parity tests
    assert_close(got_v, want_v, max_rel_tol=1e-4, what="video")
    assert_close(got_a, want_a, max_rel_tol=1e-4, what="audio")
    assert np.array_equal(d.inv_freq, f["inv_freq"])
    # the test discriminates: theta=10000 frequencies on the same weights (what h3cy computed before
    # it read the stored tensor) are far off: observed max-rel 3e-3 .. 6e-3
    d.inv_freq = default
    wrong_v, wrong_a = d.forward(**inputs)
    assert max(max_rel(wrong_v, want_v), max_rel(wrong_a, want_a)) > 1e-3


def test_stored_rope_frequencies_in_every_path(theta_folders, monkeypatch):
    """The stored frequencies reach every RoPE table: resident and streaming DiTs, the op-by-op
    Python blocks, with_weights siblings, and h3cy.denoise's Cython and Python loops all give the
    same bits on the release layout (stored theta=500 frequencies) as its resident DiT, which is
    as close to diffusers as the other bf16 layouts; the diffusers layout computes the same
    frequencies from its config's rope_theta=500 (within an ulp: numpy's float32 pow and
    torch's differ in the last bit for some exponents, seen with an AVX-512 numpy)."""
    from h3cy import _config
    f = theta_folders("c")
    cfg = f["config"]
    inputs = packed_inputs(cfg, seed=13)
    ref = h3cy.DiT.from_pretrained(f["original_bf16"], weights="bf16", threads=2)
    assert np.array_equal(ref.inv_freq, f["inv_freq"])          # the stored tensor, bit for bit
    want = ref.forward(**inputs)
    computed = h3cy.DiT.from_pretrained(f["diffusers_bf16"], weights="bf16", threads=2)
    np.testing.assert_allclose(computed.inv_freq, f["inv_freq"], rtol=2.5e-7, atol=0)
    assert_close(computed.forward(**inputs)[0], want[0], rel_l2_tol=1e-5, what="diffusers layout")
    # the released dtype mix against diffusers as released (same bound as the layout tests)
    dv, da = reference_forward(f["diffusers_bf16"], torch.bfloat16, inputs)
    assert_close(want[0], dv, rel_l2_tol=1e-2, what="video")
    assert_close(want[1], da, rel_l2_tol=1e-2, what="audio")

    def same(a, b, what):
        for x, y in zip(a, b):
            assert np.array_equal(x, y), f"{what}: max |diff| {np.max(np.abs(x - y))}"

    for streaming in (False, True):
        d = h3cy.DiT.from_pretrained(f["original_bf16"], weights="bf16", threads=2, streaming=streaming)
        same(d.forward(**inputs), want, f"streaming={streaming}")
        assert np.array_equal(d.inv_freq, f["inv_freq"])
        d._python_blocks = True
        same(d.forward(**inputs), ref_python(ref, inputs), f"python blocks, streaming={streaming}")
        d._python_blocks = False
        sib = d.with_weights("fp32")
        assert np.array_equal(sib.inv_freq, f["inv_freq"])
        same(sib.forward(**inputs), ref.with_weights("fp32").forward(**inputs), f"with_weights, {streaming}")
        d.close()

    # the sampler's loops (the Cython loop builds its tables from the model once per run)
    g = h3cy.Geometry(width=64, height=64, frames=22)
    rng = np.random.default_rng(14)
    pe = rng.standard_normal((5, cfg["text_dim"])).astype(np.float32)
    runs = {}
    for python_loop in (False, True):
        monkeypatch.setattr(_config, "_ENV_LOOP_PYTHON", python_loop)
        for folder, streaming in (("diffusers_bf16", False), ("original_bf16", False), ("original_bf16", True)):
            d = h3cy.DiT.from_pretrained(f[folder], weights="bf16", threads=2, streaming=streaming)
            runs[python_loop, folder, streaming] = h3cy.denoise(d, pe, g, steps=3, seed=1)
            assert d.loop_stats["loop"] == ("python" if python_loop else "cython")
            d.close()
    base = runs[False, "diffusers_bf16", False]
    for key, out in runs.items():
        same(out, base, f"denoise {key}")


def ref_python(ref, inputs):
    """``ref``'s forward through the op-by-op Python blocks."""
    ref._python_blocks = True
    try:
        return ref.forward(**inputs)
    finally:
        ref._python_blocks = False


def test_prepare_timesteps_reads_each_block_once_per_pass(tiny_dit_factory, monkeypatch):
    """Many timesteps' AdaLN tables come from one pass over the blocks (ADALN_PASS at a
    time): a streaming DiT maps each block's AdaLN weights once per pass, not once per
    timestep (1000 steps took 42 s before the first block on the demo model, now 2.4 s).
    On the ref path (its GEMM rows do not depend on M) the tables equal one-at-a-time ones
    bit for bit."""
    from h3cy.models import dit as dit_mod
    t = tiny_dit_factory("a")
    builds = []
    real = dit_mod._Block

    class Counting(real):
        def __init__(self, *a, **k):
            if k.get("adaln") and k.get("main") is False:
                builds.append(a[2])
            super().__init__(*a, **k)

    monkeypatch.setattr(dit_mod, "_Block", Counting)
    ts = np.linspace(0.003, 0.997, 100).astype(np.float32)
    streamed = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", isa="ref", threads=1, streaming=True)
    streamed.prepare_timesteps(ts)
    nb = t.config["num_layers"]
    assert len(builds) == nb * 2, builds                       # ceil(100 / 64) = 2 passes
    one = h3cy.DiT.from_pretrained(t.diffusers_fp32, weights="fp32", isa="ref", threads=1)
    for v in ts[::7]:
        a, b = streamed.adaln_tables(v), one.adaln_tables(v)   # one computed alone
        assert all(np.array_equal(x, y) for bx, by in zip(a[0], b[0]) for x, y in zip(bx, by))
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])
