"""diffusers' own denoising loop (layout builder, two MiniMaxH3Schedulers,
MiniMaxH3Transformer3DModel), the reference the sampler and pipeline tests compare to."""
import torch


def reference_loop(folder, g, pe, video, audio, steps):
    from diffusers import MiniMaxH3Scheduler, MiniMaxH3Transformer3DModel
    from diffusers.modular_pipelines.minimax_h3.before_denoise import (
        MiniMaxH3PrepareLayoutStep, patchify_video_latents)
    m = MiniMaxH3Transformer3DModel.from_pretrained(folder, torch_dtype=torch.float32).eval()
    L = pe.shape[0]
    pos, tags, vi, ai, ti, _, _ = MiniMaxH3PrepareLayoutStep.build_packed_sequence(
        torch.ones(L, dtype=torch.long), g.T, g.h, g.w, g.A, (1, 2, 2), 2, 2, 0, ())
    vs, as_ = MiniMaxH3Scheduler(shift=12.0), MiniMaxH3Scheduler(shift=3.0)
    vs.set_timesteps(steps + 1)
    as_.set_timesteps(steps + 1)
    vrows = patchify_video_latents(torch.from_numpy(video)[None], (1, 2, 2))
    arows = torch.from_numpy(audio).permute(0, 2, 1).reshape(-1, audio.shape[1])
    S = pos.shape[0]
    with torch.no_grad():
        for i in range(steps):
            tv, ta = vs.timesteps[i], as_.timesteps[i]
            row_t = torch.full((S,), float(tv), dtype=torch.float32)
            row_t[ai] = ta
            timestep, tidx = torch.unique(row_t, sorted=True, return_inverse=True)
            v, a = m(vrows[None], arows[None], torch.from_numpy(pe)[None], timestep, tidx, tags, pos,
                     vi, ai, ti, return_dict=False)
            vrows = vs.step(v[0].float(), tv, vrows, return_dict=False)[0]
            arows = as_.step(a[0].float(), ta, arows, return_dict=False)[0]
    return vrows.numpy(), arows.numpy()
