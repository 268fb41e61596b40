"""taeh3 (h3cy/taeh3.py) against a small torch reference of the TAEHV decoder written here from
its published architecture (madebyollin/taehv taehv.py at 1f14a568, read as a reference:
class TAEHV with patch_size 2, latent_channels 24, the base decoder, and _decode_h3_video's
time layout), on random weights saved under the published key names."""
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from h3cy import taeh3
from h3cy.errors import CheckpointError, H3ValueError


class Mem(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2 * c, c, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))

    def forward(self, x, past):
        return torch.relu(self.conv(torch.cat([x, past], 1)) + x)


class Grow(nn.Module):
    def __init__(self, c, s):
        super().__init__()
        self.s = s
        self.conv = nn.Conv2d(c, c * s, 1, bias=False)

    def forward(self, x):
        n, c, h, w = x.shape
        return self.conv(x).reshape(n * self.s, c, h, w)      # group j -> frame s*t + j


class Clamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


def reference_decoder(up=2, strides=(1, 2, 2)):
    w = (256, 128, 64, 64)
    seq = [Clamp(), nn.Conv2d(24, w[0], 3, padding=1), nn.ReLU()]
    for i, s in enumerate(strides):
        seq += [Mem(w[i]), Mem(w[i]), Mem(w[i]), nn.Upsample(scale_factor=up), Grow(w[i], s),
                nn.Conv2d(w[i], w[i + 1], 3, padding=1, bias=False)]
    seq += [nn.ReLU(), nn.Conv2d(w[3], 12, 3, padding=1)]
    return nn.Sequential(*seq)


def reference_decode(dec, z):
    """z (24, T, h, w) -> (F, 16h, 16w, 3): every frame at once, MemBlocks read the previous
    frame's input (zeros first); then H3's chunk trim and pixel shuffle."""
    x = torch.from_numpy(z).permute(1, 0, 2, 3).contiguous()          # (T, 24, h, w)
    for b in dec:
        if isinstance(b, Mem):
            past = torch.cat([torch.zeros_like(x[:1]), x[:-1]], 0)
            x = b(x, past)
        else:
            x = b(x)
    n = x.shape[0]
    x = F.pad(x, (0, 0, 0, 0, 0, 0, 0, -n % 20))                        # pad frames to 20k
    x = x.reshape(-1, 20, *x.shape[1:])[:, 3:].flatten(0, 1)[:-12]
    return F.pixel_shuffle(x, 2).clamp(0, 1).permute(0, 2, 3, 1).numpy()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from safetensors.torch import save_file
    torch.manual_seed(0)
    dec = reference_decoder().eval()
    with torch.no_grad():
        for p in dec.parameters():                 # keep activations O(1) through 22 convolutions
            p.mul_(1.5)
        dec[22].weight.mul_(10.0)                 # a picture spread over [0, 1], not clamped flat
        dec[22].bias.add_(0.5)
    sd = {f"decoder.{k}": v.contiguous() for k, v in dec.state_dict().items()}
    # a TGrow trained with more output rows than its stride needs: the last rows are used
    extra = torch.randn(256, 256, 1, 1)
    sd["decoder.7.conv.weight"] = torch.cat([extra, sd["decoder.7.conv.weight"]], 0)
    sd["encoder.0.weight"] = torch.randn(64, 12, 3, 3)       # an encoder in the file is ignored
    path = str(tmp_path_factory.mktemp("taeh3") / "taeh3.safetensors")
    save_file(sd, path)
    return path, dec


def test_published_key_names():
    keys = taeh3.expected_keys()
    dec = reference_decoder()
    assert set(keys) == {f"decoder.{k}" for k in dec.state_dict()}
    for k, v in dec.state_dict().items():
        assert keys[f"decoder.{k}"] == tuple(v.shape)


@pytest.mark.parametrize("T,h,w", [(7, 2, 3), (2, 2, 2)])
def test_decoder_matches_the_torch_reference(checkpoint, T, h, w):
    path, dec = checkpoint
    z = np.random.default_rng(T).standard_normal((24, T, h, w)).astype(np.float32)
    with torch.no_grad():
        ref = reference_decode(dec, z)
    d = taeh3.TAEH3Decoder.from_file(path, weights="fp32", threads=2)
    got = d.decode(z)
    assert got.shape == ref.shape == (ref.shape[0], 16 * h, 16 * w, 3)
    if T == 7:
        assert got.shape[0] == 22
    assert 0.05 < ref.std()                          # not a saturated, constant picture
    err = np.abs(got - ref).max()
    assert err <= 1e-4, err
    # before the clamp too: the decoder's raw frames against torch's
    raw = d.decode_frames(z)
    with torch.no_grad():
        x = torch.from_numpy(z).permute(1, 0, 2, 3).contiguous()
        for b in dec:
            x = b(x, torch.cat([torch.zeros_like(x[:1]), x[:-1]], 0)) if isinstance(b, Mem) else b(x)
    raw_ref = x.permute(0, 2, 3, 1).numpy()
    assert len(raw) == 4 * T
    scale = np.abs(raw_ref).max()
    assert np.abs(np.stack(raw) - raw_ref).max() <= 1e-4 * max(1.0, scale)


def test_scalar_reference_kernels_agree(checkpoint):
    path, _ = checkpoint
    z = np.random.default_rng(5).standard_normal((24, 2, 2, 2)).astype(np.float32)
    fast = taeh3.TAEH3Decoder.from_file(path, threads=2).decode(z)
    ref = taeh3.TAEH3Decoder.from_file(path, isa="ref", threads=1).decode(z)
    assert np.abs(fast - ref).max() <= 1e-5


def test_bad_files_and_latents(checkpoint, tmp_path):
    from safetensors.torch import save_file
    path, dec = checkpoint
    sd = {f"decoder.{k}": v.contiguous() for k, v in dec.state_dict().items()}
    del sd["decoder.22.bias"]
    bad = str(tmp_path / "taeh3_missing.safetensors")
    save_file(sd, bad)
    with pytest.raises(CheckpointError, match=r"decoder\.22\.bias"):
        taeh3.load_state(bad)
    sd = {f"decoder.{k}": v.contiguous() for k, v in dec.state_dict().items()}
    sd["decoder.1.weight"] = torch.zeros(256, 16, 3, 3)
    save_file(sd, bad)
    with pytest.raises(CheckpointError, match=r"decoder\.1\.weight"):
        taeh3.load_state(bad)
    d = taeh3.TAEH3Decoder.from_file(path)
    with pytest.raises(H3ValueError):
        d.decode(np.zeros((16, 2, 2, 2), np.float32))
    assert taeh3.find_checkpoint([str(tmp_path / "nope"), str(tmp_path)]) == bad


def test_cheap_preview_modes_match_the_reference(checkpoint):
    """TAEHV's decoder_space_upscale / decoder_time_upscale off: Upsample(scale 1), TGrows of
    stride 1 with the last time step's rows; one frame per latent frame."""
    path, dec = checkpoint
    sd = dec.state_dict()
    z = np.random.default_rng(9).standard_normal((24, 3, 3, 2)).astype(np.float32)
    for space, time in ((False, True), (True, False), (False, False)):
        ref_dec = reference_decoder(up=2 if space else 1, strides=(1, 2, 2) if time else (1, 1, 1)).eval()
        own = {k: (v[-ref_dec.state_dict()[k].shape[0]:] if k.endswith("conv.weight") and v.ndim == 4
                   and v.shape[2] == 1 else v) for k, v in sd.items()}
        ref_dec.load_state_dict(own)
        with torch.no_grad():
            x = torch.from_numpy(z).permute(1, 0, 2, 3).contiguous()
            for b in ref_dec:
                x = b(x, torch.cat([torch.zeros_like(x[:1]), x[:-1]], 0)) if isinstance(b, Mem) else b(x)
            if time:
                n = x.shape[0]
                x = F.pad(x, (0, 0, 0, 0, 0, 0, 0, -n % 20))
                x = x.reshape(-1, 20, *x.shape[1:])[:, 3:].flatten(0, 1)[:-12]
            ref = F.pixel_shuffle(x, 2).clamp(0, 1).permute(0, 2, 3, 1).numpy()
        got = taeh3.TAEH3Decoder.from_file(path, threads=2, space_upscale=space, time_upscale=time).decode(z)
        f = 16 if space else 2
        assert got.shape == ref.shape and got.shape[1:3] == (3 * f, 2 * f)
        assert got.shape[0] == (ref.shape[0] if time else 3)
        assert np.abs(got - ref).max() <= 1e-4, (space, time)
