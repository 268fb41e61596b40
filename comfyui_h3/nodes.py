"""The seven nodes, described once; ``__init__`` turns these descriptions into ComfyUI's v3
schema classes (or, on a ComfyUI without ``comfy_api.latest``, classic node classes).

Input tuple: ``(name, type, options)``; types are ComfyUI's (INT, FLOAT, STRING, COMBO,
LATENT, ...) or the pack's own ``H3_MODEL`` / ``H3_CONDITIONING``.
"""
from . import nodes_decode, nodes_load, nodes_sample

CATEGORY = "h3cy"
SEED_MAX = 0xFFFFFFFFFFFFFFFF

MODEL_IN = ("model", "H3_MODEL", {"tooltip": "From 'H3 Model Loader'."})
SIZE_INPUTS = [
    ("width", "INT", {"default": 512, "min": 64, "max": 1344, "step": 32,
                      "tooltip": "Multiple of 32; width*height at most 768*1344."}),
    ("height", "INT", {"default": 512, "min": 64, "max": 1344, "step": 32, "tooltip": "Multiple of 32."}),
    ("frames", "INT", {"default": 22, "min": 1, "max": 362, "step": 1,
                       "tooltip": "Video length in frames at 24 fps; rounded up to 17n + 5 (22, 39, 56, ...). "
                                  "Ignored when seconds > 0."}),
    ("seconds", "FLOAT", {"default": 0.0, "min": 0.0, "max": 15.08, "step": 0.01,
                          "tooltip": "Video length in seconds; 0 = use frames."}),
    ("steps", "INT", {"default": 20, "min": 1, "max": 200, "tooltip": "Denoiser evaluations."}),
    ("seed", "INT", {"default": 42, "min": 0, "max": SEED_MAX, "control_after_generate": True}),
    ("reuse", "INT", {"default": 1, "min": 1, "max": 32,
                      "tooltip": "Speed-up: evaluate the transformer every N-th step only and extrapolate "
                                 "between (1 = exact)."}),
    ("layers", "INT", {"default": 0, "min": 0, "max": 1000,
                       "tooltip": "Speed-up: run only this many transformer blocks, ranked by their gates "
                                  "(0 = all)."}),
    ("sampler", "COMBO", {"options": list(nodes_sample.SAMPLERS), "default": "euler",
                          "tooltip": "euler: diffusers' sampler (h3cy's default); res_multistep: the "
                                     "second-order sampler ComfyUI's own MiniMax-H3 templates use."}),
    ("preset", "COMBO", {"options": list(nodes_sample.PRESETS), "default": "none",
                         "tooltip": "none: use steps and sampler above. quality: 20 steps, Euler, shifts 12/3; "
                                    "turbo8 / turbo4: 8 / 4 steps, Euler, shifts 6/3, for a turbo LoRA "
                                    "('H3 LoRA'). A preset replaces the steps and sampler widgets."}),
]
PROMPT_IN = ("prompt", "STRING", {"multiline": True, "default": "",
                                  "tooltip": "What to generate: the scene, the camera, and the sound."})
KEYFRAME_INPUTS = [
    ("first_frame", "IMAGE", {"optional": True,
                              "tooltip": "Optional keyframe the video starts from (its first image; fl2va). "
                                         "Stretched onto the canvas."}),
    ("last_frame", "IMAGE", {"optional": True,
                             "tooltip": "Optional keyframe the video ends on (its first image). With a first "
                                        "frame it is cover-cropped onto the same canvas."}),
]


def _loader_inputs():
    return [
        ("model", "COMBO", {"options": nodes_load.model_options(),
                            "tooltip": "A MiniMax-H3 folder from models/h3/ (release or diffusers layout), "
                                       "or split components in diffusion_models/ text_encoders/ vae/."}),
        ("weights", "COMBO", {"options": list(nodes_load.WEIGHT_MODES), "default": "auto",
                              "tooltip": "Transformer and text-encoder weights in memory: auto (default) = quantised "
                                         "files as stored; float files the faster of bf16 and int8 on this CPU "
                                         "(measured by `h3cy selfcheck`; int8 without a measurement) that fits "
                                         "memory, int4 when neither fits. int8 ~1 byte/param, int4 ~half of "
                                         "that, bf16/fp16 2, fp32 4."}),
        ("threads", "INT", {"default": 0, "min": 0, "max": 1024,
                            "tooltip": "CPU threads for h3cy (0 = physical cores available)."}),
        ("streaming", "COMBO", {"options": list(nodes_load.STREAMING), "default": "auto",
                                "tooltip": "Read transformer blocks from disk as needed instead of keeping them "
                                           "in memory; auto = only when the model does not fit."}),
    ]


def _files_loader_inputs():
    tips = {"dit": "The MiniMax-H3 diffusion model file (Comfy-Org's minimax_h3_*_bf16.safetensors, or a "
                   "GGUF such as minimax_h3_fl2va-Q4_K_M.gguf), from models/diffusion_models/ or models/unet/.",
            "text_encoder": "The Qwen3-VL text encoder file (qwen3vl_32b_minimax_h3_bf16.safetensors, or a GGUF), "
                            "from models/text_encoders/ or models/clip/.",
            "video_vae": "The video VAE file (minimax_h3_video_vae_fp16.safetensors), from models/vae/.",
            "audio_vae": "The audio VAE file (minimax_h3_audio_vae_fp32.safetensors), from models/vae/."}
    return [(role, "COMBO", {"options": nodes_load.file_options(folder, gguf=role in nodes_load.GGUF_ROLES),
                             "tooltip": tips[role]})
            for role, (folder, _, _) in nodes_load.FILE_INPUTS.items()] + _loader_inputs()[1:]


NODES = [
    {"node_id": "H3cyModelLoader", "display_name": "H3 Model Loader (h3cy, CPU)",
     "description": "Opens a MiniMax-H3 model for h3cy, the CPU engine. Loaded once and reused across runs "
                    "while the model and mode stay the same.",
     "inputs": _loader_inputs, "outputs": [("H3_MODEL", "model")], "fn": nodes_load.load_model},
    {"node_id": "H3cyFilesLoader", "display_name": "H3 Model Loader from files (h3cy, CPU)",
     "description": "Opens MiniMax-H3 from the single files ComfyUI's templates download (diffusion model, "
                    "text encoder, video VAE, audio VAE), as they are: no conversion, memory-mapped.",
     "inputs": _files_loader_inputs, "outputs": [("H3_MODEL", "model")], "fn": nodes_load.load_files},
    {"node_id": "H3cyLoRA", "display_name": "H3 LoRA (h3cy)",
     "description": "Adds a LoRA from models/loras to an H3_MODEL (PEFT or kohya/ComfyUI keys, e.g. the turbo "
                    "LoRAs). The base weights are shared, not copied; chain several nodes to stack LoRAs.",
     "inputs": lambda: [MODEL_IN,
                        ("lora", "COMBO", {"options": nodes_load.lora_options(),
                                           "tooltip": "A LoRA .safetensors from ComfyUI's models/loras/."}),
                        ("strength", "FLOAT", {"default": 1.0, "min": -10.0, "max": 10.0, "step": 0.01,
                                               "tooltip": "Multiplies the LoRA's update (0 = off)."})],
     "outputs": [("H3_MODEL", "model")], "fn": nodes_load.apply_lora},
    {"node_id": "H3cyTextEncode", "display_name": "H3 Text Encode (h3cy)",
     "description": "Encodes a prompt with MiniMax-H3's text encoder (cached on disk per prompt). With "
                    "keyframes (first_frame / last_frame) the encoder sees them in the prompt, the canvas "
                    "comes from the first one's aspect ratio, and the sampler holds them in the video.",
     "inputs": lambda: [MODEL_IN, PROMPT_IN] + KEYFRAME_INPUTS, "outputs": [("H3_CONDITIONING", "conditioning")],
     "fn": nodes_sample.encode},
    {"node_id": "H3cySampler", "display_name": "H3 Sampler (h3cy)",
     "description": "Denoises video and audio latents with h3cy. LATENT = {samples [1,24,T,h,w], "
                    "audio_samples [1,2,32,A], h3_geometry}; decode it with 'H3 Decode'.",
     "inputs": lambda: [MODEL_IN, ("conditioning", "H3_CONDITIONING", {})] + SIZE_INPUTS,
     "outputs": [("LATENT", "latent")], "fn": nodes_sample.sample},
    {"node_id": "H3cyDecode", "display_name": "H3 Decode (h3cy)",
     "description": "Decodes h3cy latents to frames (IMAGE, 24 fps) and stereo audio (AUDIO, 32 kHz) for "
                    "Create Video / Save Video / Save Audio.",
     "inputs": lambda: [MODEL_IN, ("latent", "LATENT", {})],
     "outputs": [("IMAGE", "images"), ("AUDIO", "audio")], "fn": nodes_decode.decode},
    {"node_id": "H3cyGenerate", "display_name": "H3 Generate (h3cy, one node)",
     "description": "Prompt to frames (IMAGE, 24 fps) and stereo audio (AUDIO, 32 kHz) in one node: "
                    "text encode, sample and decode.",
     "inputs": lambda: [MODEL_IN, PROMPT_IN] + SIZE_INPUTS + KEYFRAME_INPUTS,
     "outputs": [("IMAGE", "images"), ("AUDIO", "audio")], "fn": nodes_sample.generate},
]
