"""ComfyUI nodes for h3cy: MiniMax-H3 text -> video + stereo audio on the CPU.

Registration only (the nodes live in nodes.py and the modules it names).  With ComfyUI's
v3 node API (``comfy_api.latest``) the pack exposes ``comfy_entrypoint`` and does NOT define
``NODE_CLASS_MAPPINGS`` (ComfyUI ignores the entry point of a pack that defines it); on a
ComfyUI without v3 it falls back to classic ``NODE_CLASS_MAPPINGS``.  Without h3cy the pack
still loads: the nodes register and raise the install command when run.
"""
from . import _h3
from .nodes import CATEGORY, NODES
from .nodes_load import register_folder

try:
    from comfy_api.latest import ComfyExtension, io
except ImportError:
    ComfyExtension = io = None

register_folder()
_h3.warn_if_missing()

__all__ = []


# -- v3 -------------------------------------------------------------------------------------
def _v3_type(t):
    builtin = {"INT": io.Int, "FLOAT": io.Float, "STRING": io.String, "COMBO": io.Combo,
               "BOOLEAN": io.Boolean, "LATENT": io.Latent, "IMAGE": io.Image, "AUDIO": io.Audio}
    if t in builtin:
        return builtin[t]
    if t not in _CUSTOM:
        _CUSTOM[t] = io.Custom(t)
    return _CUSTOM[t]


_CUSTOM = {}


def _v3_class(spec):
    def define_schema(cls):
        inputs = [_v3_type(t).Input(name, **opts) for name, t, opts in spec["inputs"]()]
        outputs = [_v3_type(t).Output(display_name=name) for t, name in spec["outputs"]]
        return io.Schema(node_id=spec["node_id"], display_name=spec["display_name"], category=CATEGORY,
                         description=spec["description"], inputs=inputs, outputs=outputs)

    def execute(cls, **kwargs):
        return io.NodeOutput(*spec["fn"](**kwargs))

    return type(spec["node_id"], (io.ComfyNode,), {
        "__module__": __name__, "__doc__": spec["description"],
        "define_schema": classmethod(define_schema), "execute": classmethod(execute)})


# -- classic (ComfyUI without comfy_api.latest) ----------------------------------------------
def _classic_class(spec):
    def INPUT_TYPES(cls):
        req, opt = {}, {}
        for name, t, opts in spec["inputs"]():
            opts = dict(opts)
            where = opt if opts.pop("optional", False) else req
            if t == "COMBO":
                where[name] = (opts.pop("options"), opts)
            else:
                where[name] = (t, opts)
        return {"required": req, "optional": opt} if opt else {"required": req}

    def run(self, **kwargs):
        return spec["fn"](**kwargs)

    return type(spec["node_id"], (), {
        "__module__": __name__, "__doc__": spec["description"], "DESCRIPTION": spec["description"],
        "INPUT_TYPES": classmethod(INPUT_TYPES), "RETURN_TYPES": tuple(t for t, _ in spec["outputs"]),
        "RETURN_NAMES": tuple(n for _, n in spec["outputs"]), "FUNCTION": "run", "CATEGORY": CATEGORY,
        "run": run})


if io is not None:
    NODE_CLASSES = [_v3_class(s) for s in NODES]

    class H3cyExtension(ComfyExtension):
        async def get_node_list(self):
            return list(NODE_CLASSES)

    async def comfy_entrypoint():
        return H3cyExtension()

    __all__ += ["comfy_entrypoint"]
else:
    NODE_CLASSES = [_classic_class(s) for s in NODES]
    NODE_CLASS_MAPPINGS = {c.__name__: c for c in NODE_CLASSES}
    NODE_DISPLAY_NAME_MAPPINGS = {s["node_id"]: s["display_name"] for s in NODES}
    __all__ += ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
