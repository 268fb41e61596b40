"""Stand-in for ComfyUI 0.3.64 folder_paths.py: model folders only (signatures as in
0.3.64; see tests/comfy_stubs/README.md).  ``base_path`` comes from $COMFY_STUB_BASE (the
tests point it at a temporary folder) instead of the checkout's location."""
import os
import tempfile

supported_pt_extensions: set[str] = {'.ckpt', '.pt', '.pt2', '.bin', '.pth', '.safetensors', '.pkl', '.sft'}
folder_names_and_paths: dict[str, tuple[list[str], set[str]]] = {}

base_path = os.environ.get("COMFY_STUB_BASE") or tempfile.mkdtemp(prefix="comfy-stub-")
models_dir = os.path.join(base_path, "models")
folder_names_and_paths["checkpoints"] = ([os.path.join(models_dir, "checkpoints")], supported_pt_extensions)
folder_names_and_paths["vae"] = ([os.path.join(models_dir, "vae")], supported_pt_extensions)
folder_names_and_paths["vae_approx"] = ([os.path.join(models_dir, "vae_approx")], supported_pt_extensions)
folder_names_and_paths["text_encoders"] = ([os.path.join(models_dir, "text_encoders"), os.path.join(models_dir, "clip")], supported_pt_extensions)
folder_names_and_paths["diffusion_models"] = ([os.path.join(models_dir, "unet"), os.path.join(models_dir, "diffusion_models")], supported_pt_extensions)
folder_names_and_paths["loras"] = ([os.path.join(models_dir, "loras")], supported_pt_extensions)
folder_names_and_paths["diffusers"] = ([os.path.join(models_dir, "diffusers")], ["folder"])
output_directory = os.path.join(base_path, "output")
temp_directory = os.path.join(base_path, "temp")

_legacy = {"unet": "diffusion_models", "clip": "text_encoders"}


def map_legacy(folder_name: str) -> str:
    return _legacy.get(folder_name, folder_name)


def get_output_directory() -> str:
    return output_directory


def get_temp_directory() -> str:
    return temp_directory


def add_model_folder_path(folder_name: str, full_folder_path: str, is_default: bool = False) -> None:
    folder_name = map_legacy(folder_name)
    if folder_name in folder_names_and_paths:
        paths, _exts = folder_names_and_paths[folder_name]
        if full_folder_path in paths:
            if is_default and paths[0] != full_folder_path:
                paths.remove(full_folder_path)
                paths.insert(0, full_folder_path)
        elif is_default:
            paths.insert(0, full_folder_path)
        else:
            paths.append(full_folder_path)
    else:
        folder_names_and_paths[folder_name] = ([full_folder_path], set())


def get_folder_paths(folder_name: str) -> list[str]:
    folder_name = map_legacy(folder_name)
    return folder_names_and_paths[folder_name][0][:]


def get_filename_list(folder_name: str) -> list[str]:
    """Files under each of the folder's paths (recursively), relative to that path, with a
    known extension; sorted, first path wins on duplicates (as ComfyUI; no mtime cache)."""
    folder_name = map_legacy(folder_name)
    paths, exts = folder_names_and_paths[folder_name]
    out = set()
    for base in paths:
        if not os.path.isdir(base):
            continue
        for root, dirs, files in os.walk(base, followlinks=True):
            dirs[:] = [d for d in dirs if d != ".git"]
            for f in files:
                if not exts or os.path.splitext(f)[1].lower() in exts:
                    out.add(os.path.relpath(os.path.join(root, f), base))
    return sorted(out)


def get_full_path(folder_name: str, filename: str) -> str | None:
    """The first of the folder's paths holding ``filename``, or None."""
    folder_name = map_legacy(folder_name)
    if folder_name not in folder_names_and_paths:
        return None
    filename = os.path.relpath(os.path.join("/", filename), "/")
    for base in folder_names_and_paths[folder_name][0]:
        full = os.path.join(base, filename)
        if os.path.isfile(full):
            return full
    return None
