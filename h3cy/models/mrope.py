"""h3cy.models.mrope — Qwen3-VL's 3-D positions of a prompt that carries images, and the
interleaved MRoPE tables they give (transformers 5.17 ``Qwen3VLModel.get_rope_index`` and
``Qwen3VLTextRotaryEmbedding``).

Positions (temporal, height, width) per token: a run of text continues one counter on all
three axes; an image's block of ``(h/m) x (w/m)`` vision tokens (m = spatial merge) starts
at the counter ``p``: temporal ``p``, height ``p + row``, width ``p + col``; the counter
then moves on by ``max(h, w) / m``.  Frequency ``i`` of a head takes its angle from the
height axis when ``i % 3 == 1`` and ``i < 3 * section[1]``, from the width axis when
``i % 3 == 2`` and ``i < 3 * section[2]``, else from the temporal axis.  Text-only prompts
get positions ``0 .. L-1`` on every axis, which is plain 1-D RoPE.
"""
import numpy as np

from ..errors import H3ValueError

DEFAULT_SECTION = (24, 20, 20)      # transformers' default when the config names none


def rope_inv_freq(head_dim, theta):
    """``1 / theta ** (arange(0, D, 2) / D)`` in float32, as transformers computes it."""
    ar = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(theta) ** ar)).astype(np.float32)


def rope_tables(positions, inv_freq):
    """cos, sin [L, D/2] float32 of angle ``fl32(p * inv_freq[i])`` (1-D RoPE)."""
    ang = (np.asarray(positions, np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    return np.ascontiguousarray(np.cos(ang), np.float32), np.ascontiguousarray(np.sin(ang), np.float32)


def image_runs(ids, image_token_id):
    """``[(start, end), ...]``: the maximal runs of ``image_token_id`` in ``ids``."""
    ids = np.asarray(ids)
    is_img = np.concatenate([[False], ids == image_token_id, [False]])
    d = np.diff(is_img.astype(np.int8))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def positions_3d(ids, grids, image_token_id, merge):
    """int64 [3, L] positions of ``ids`` whose image-token runs are the images of ``grids``
    [(t, h, w), ...] in order (one run per image of t*h*w/merge^2 tokens)."""
    L = len(ids)
    runs = image_runs(ids, image_token_id)
    if len(runs) != len(grids):
        raise H3ValueError(f"the token ids hold {len(runs)} run(s) of image tokens for {len(grids)} image(s); "
                           "each image needs its own run (separated by text, e.g. <|vision_end|>)")
    pos = np.zeros((3, L), np.int64)
    cur, at = 0, 0
    for (s, e), (t, h, w) in zip(runs, grids):
        if t != 1:
            raise H3ValueError(f"an image has one temporal patch, got grid {(t, h, w)}")
        gh, gw = h // merge, w // merge
        if e - s != gh * gw:
            raise H3ValueError(f"an image of grid {(t, h, w)} needs {gh * gw} image tokens, the ids have {e - s}")
        pos[:, at:s] = np.arange(s - at) + cur
        cur += s - at
        r, c = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        pos[0, s:e] = cur
        pos[1, s:e] = r.reshape(-1) + cur
        pos[2, s:e] = c.reshape(-1) + cur
        cur += max(h, w) // merge
        at = e
    pos[:, at:] = np.arange(L - at) + cur
    return pos


def mrope_tables(pos, inv_freq, section):
    """cos, sin [L, D/2] float32 of the interleaved MRoPE: angle ``fl32(p_axis(i) * inv_freq[i])``."""
    section = tuple(section) if section else DEFAULT_SECTION
    n = inv_freq.shape[0]
    axis = np.zeros(n, np.int64)
    for dim in (1, 2):
        axis[dim:min(n, 3 * section[dim]):3] = dim
    p = np.asarray(pos, np.float32)[axis].T                      # [L, n]: each frequency's axis
    ang = (p * inv_freq[None, :]).astype(np.float32)
    return np.ascontiguousarray(np.cos(ang), np.float32), np.ascontiguousarray(np.sin(ang), np.float32)
