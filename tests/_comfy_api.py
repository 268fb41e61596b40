"""ComfyUI's UI-workflow -> API-prompt conversion (what its frontend does before POST /prompt),
for the example workflows' tests."""
WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}

# the core nodes the example workflows use, as ComfyUI's /object_info lists their inputs
CORE_NODES = {
    "CreateVideo": {"required": {"images": ("IMAGE",), "fps": ("FLOAT", {"default": 30.0})},
                    "optional": {"audio": ("AUDIO",)}},
    "SaveVideo": {"required": {"video": ("VIDEO",), "filename_prefix": ("STRING", {}),
                               "format": (["auto", "mp4"], {}), "codec": (["auto", "h264"], {})}},
    "SaveAudio": {"required": {"audio": ("AUDIO",), "filename_prefix": ("STRING", {})}},
}


def object_info(node_classes):
    """``{type: {"input": INPUT_TYPES}}`` for the pack's classes and the core nodes above."""
    out = {t: {"input": spec} for t, spec in CORE_NODES.items()}
    for c in node_classes:
        out[c.GET_SCHEMA().node_id if hasattr(c, "GET_SCHEMA") else c.__name__] = {"input": c.INPUT_TYPES()}
    return out


def to_api(workflow, object_info, overrides=None):
    """Links by (node, slot), widget values in input order, skipping the
    control_after_generate value after a seed."""
    overrides = overrides or {}
    links = {l[0]: l for l in workflow["links"]}
    prompt = {}
    for n in workflow["nodes"]:
        info = object_info[n["type"]]["input"]
        specs = {**info.get("required", {}), **info.get("optional", {})}
        linked = {i["name"]: i["link"] for i in n.get("inputs", []) if i.get("link") is not None}
        inputs, values = {}, list(n.get("widgets_values") or [])
        for name in [*info.get("required", {}), *info.get("optional", {})]:
            typ, opts = specs[name][0], (specs[name][1] if len(specs[name]) > 1 else {})
            if name in linked:
                l = links[linked[name]]
                inputs[name] = [str(l[1]), l[2]]
            elif isinstance(typ, list) or typ in WIDGET_TYPES:
                if not values:
                    continue
                inputs[name] = values.pop(0)
                if opts.get("control_after_generate"):
                    values.pop(0)
        inputs.update(overrides.get(n["type"], {}))
        prompt[str(n["id"])] = {"class_type": n["type"], "inputs": inputs}
    return prompt
