"""Stand-in for ComfyUI 0.3.64 comfy_api/latest/_io.py: the v3 schema pieces the pack uses.
Signatures and ``as_dict`` output as in 0.3.64 (see tests/comfy_stubs/README.md)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Any, TypedDict


def prune_dict(d: dict):
    return {k: v for k, v in d.items() if v is not None}


class _StringIOType(str):
    pass


class _ComfyType(ABC):
    Type = Any
    io_type: str = None


def comfytype(io_type: str, **kwargs):
    def decorator(cls):
        if isinstance(cls, _ComfyType) or issubclass(cls, _ComfyType):
            new_cls = cls
            if hasattr(new_cls, "Input"):
                new_cls.Input = type(new_cls.Input.__name__, (new_cls.Input,), {})
            if hasattr(new_cls, "Output"):
                new_cls.Output = type(new_cls.Output.__name__, (new_cls.Output,), {})
        else:
            new_cls = type(cls.__name__, (cls, ComfyTypeIO), {})
        new_cls.io_type = _StringIOType(io_type)
        if getattr(new_cls, "Input", None) is not None:
            new_cls.Input.Parent = new_cls
        if getattr(new_cls, "Output", None) is not None:
            new_cls.Output.Parent = new_cls
        return new_cls
    return decorator


def Custom(io_type: str):
    @comfytype(io_type=io_type)
    class CustomComfyType(ComfyTypeIO):
        ...
    return CustomComfyType


class _IO_V3:
    Parent = None

    def __init__(self):
        pass

    @property
    def io_type(self):
        return self.Parent.io_type


class Input(_IO_V3):
    def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None, extra_dict=None):
        super().__init__()
        self.id = id
        self.display_name = display_name
        self.optional = optional
        self.tooltip = tooltip
        self.lazy = lazy
        self.extra_dict = extra_dict if extra_dict is not None else {}

    def as_dict(self):
        return prune_dict({"display_name": self.display_name, "optional": self.optional,
                           "tooltip": self.tooltip, "lazy": self.lazy}) | prune_dict(self.extra_dict)

    def get_io_type(self):
        return _StringIOType(self.io_type)


class WidgetInput(Input):
    def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                 default: Any=None,
                 socketless: bool=None, widget_type: str=None, force_input: bool=None, extra_dict=None):
        super().__init__(id, display_name, optional, tooltip, lazy, extra_dict)
        self.default = default
        self.socketless = socketless
        self.widget_type = widget_type
        self.force_input = force_input

    def as_dict(self):
        return super().as_dict() | prune_dict({"default": self.default, "socketless": self.socketless,
                                               "widgetType": self.widget_type, "forceInput": self.force_input})

    def get_io_type(self):
        return self.widget_type if self.widget_type is not None else super().get_io_type()


class Output(_IO_V3):
    def __init__(self, id: str=None, display_name: str=None, tooltip: str=None,
                 is_output_list=False):
        self.id = id
        self.display_name = display_name
        self.tooltip = tooltip
        self.is_output_list = is_output_list

    def as_dict(self):
        return prune_dict({"display_name": self.display_name, "tooltip": self.tooltip,
                           "is_output_list": self.is_output_list})

    def get_io_type(self):
        return self.io_type


class ComfyTypeI(_ComfyType):
    class Input(Input):
        ...


class ComfyTypeIO(ComfyTypeI):
    class Output(Output):
        ...


@comfytype(io_type="BOOLEAN")
class Boolean(ComfyTypeIO):
    Type = bool

    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                    default: bool=None, label_on: str=None, label_off: str=None,
                    socketless: bool=None, force_input: bool=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.label_on = label_on
            self.label_off = label_off

        def as_dict(self):
            return super().as_dict() | prune_dict({"label_on": self.label_on, "label_off": self.label_off})


@comfytype(io_type="INT")
class Int(ComfyTypeIO):
    Type = int

    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                    default: int=None, min: int=None, max: int=None, step: int=None, control_after_generate: bool=None,
                    display_mode=None, socketless: bool=None, force_input: bool=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.min = min
            self.max = max
            self.step = step
            self.control_after_generate = control_after_generate
            self.display_mode = display_mode

        def as_dict(self):
            return super().as_dict() | prune_dict({
                "min": self.min, "max": self.max, "step": self.step,
                "control_after_generate": self.control_after_generate,
                "display": self.display_mode.value if self.display_mode else None})


@comfytype(io_type="FLOAT")
class Float(ComfyTypeIO):
    Type = float

    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                    default: float=None, min: float=None, max: float=None, step: float=None, round: float=None,
                    display_mode=None, socketless: bool=None, force_input: bool=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.min = min
            self.max = max
            self.step = step
            self.round = round
            self.display_mode = display_mode

        def as_dict(self):
            return super().as_dict() | prune_dict({"min": self.min, "max": self.max, "step": self.step,
                                                   "round": self.round, "display": self.display_mode})


@comfytype(io_type="STRING")
class String(ComfyTypeIO):
    Type = str

    class Input(WidgetInput):
        def __init__(self, id: str, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                    multiline=False, placeholder: str=None, default: str=None, dynamic_prompts: bool=None,
                    socketless: bool=None, force_input: bool=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless, None, force_input)
            self.multiline = multiline
            self.placeholder = placeholder
            self.dynamic_prompts = dynamic_prompts

        def as_dict(self):
            return super().as_dict() | prune_dict({"multiline": self.multiline, "placeholder": self.placeholder,
                                                   "dynamicPrompts": self.dynamic_prompts})


@comfytype(io_type="COMBO")
class Combo(ComfyTypeIO):
    Type = str

    class Input(WidgetInput):
        Type = str

        def __init__(self, id: str, options: list[str]=None, display_name: str=None, optional=False, tooltip: str=None, lazy: bool=None,
                    default: str=None, control_after_generate: bool=None,
                    upload=None, image_folder=None,
                    remote=None,
                    socketless: bool=None):
            super().__init__(id, display_name, optional, tooltip, lazy, default, socketless)
            self.multiselect = False
            self.options = options
            self.control_after_generate = control_after_generate
            self.upload = upload
            self.image_folder = image_folder
            self.remote = remote

        def as_dict(self):
            return super().as_dict() | prune_dict({
                "multiselect": self.multiselect, "options": self.options,
                "control_after_generate": self.control_after_generate,
                **({self.upload.value: True} if self.upload is not None else {}),
                "image_folder": self.image_folder.value if self.image_folder else None,
                "remote": self.remote.as_dict() if self.remote else None})


@comfytype(io_type="IMAGE")
class Image(ComfyTypeIO):
    Type = Any


@comfytype(io_type="LATENT")
class Latent(ComfyTypeIO):
    class LatentDict(TypedDict):
        samples: Any
    Type = LatentDict


@comfytype(io_type="AUDIO")
class Audio(ComfyTypeIO):
    class AudioDict(TypedDict):
        waveform: Any
        sampler_rate: int
    Type = AudioDict


@dataclass
class Schema:
    node_id: str
    display_name: str = None
    category: str = "sd"
    inputs: list[Input]=None
    outputs: list[Output]=None
    hidden: list=None
    description: str=""
    is_input_list: bool = False
    is_output_node: bool=False
    is_deprecated: bool=False
    is_experimental: bool=False
    is_api_node: bool=False
    not_idempotent: bool=False
    enable_expand: bool=False

    def validate(self):
        input_ids = [i.id for i in self.inputs] if self.inputs is not None else []
        output_ids = [o.id for o in self.outputs] if self.outputs is not None else []
        issues = []
        if len(set(input_ids)) != len(input_ids):
            issues.append(f"Input ids must be unique, but {[i for i, c in Counter(input_ids).items() if c > 1]} are not.")
        if len(set(output_ids)) != len(output_ids):
            issues.append(f"Output ids must be unique, but {[i for i, c in Counter(output_ids).items() if c > 1]} are not.")
        inter = set(input_ids) & set(output_ids)
        if inter:
            issues.append(f"Ids must be unique between inputs and outputs, but {inter} are not.")
        if issues:
            raise ValueError("\n".join(issues))

    def finalize(self):
        if self.outputs is not None:
            for i, output in enumerate(self.outputs):
                if output.id is None:
                    output.id = f"_{i}_{output.io_type}_"


def _first_real_override(cls, name):
    base_func = getattr(ComfyNode, name).__func__
    for c in cls.mro():
        if c is ComfyNode:
            break
        if name in c.__dict__ and getattr(c, name).__func__ is not base_func:
            return getattr(cls, name)
    return None


class ComfyNode:
    SCHEMA = None
    RETURN_TYPES = None
    RETURN_NAMES = None

    @classmethod
    @abstractmethod
    def define_schema(cls) -> Schema:
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def execute(cls, **kwargs) -> NodeOutput:
        raise NotImplementedError

    @classmethod
    def VALIDATE_CLASS(cls):
        if _first_real_override(cls, "define_schema") is None:
            raise Exception(f"No define_schema function was defined for node class {cls.__name__}.")
        if _first_real_override(cls, "execute") is None:
            raise Exception(f"No execute function was defined for node class {cls.__name__}.")

    @classmethod
    def FINALIZE_SCHEMA(cls):
        schema = cls.define_schema()
        schema.finalize()
        return schema

    @classmethod
    def GET_SCHEMA(cls) -> Schema:
        cls.VALIDATE_CLASS()
        schema = cls.FINALIZE_SCHEMA()
        schema.validate()
        outs = schema.outputs or []
        cls.RETURN_TYPES = [o.io_type for o in outs]
        cls.RETURN_NAMES = [o.display_name if o.display_name else o.io_type for o in outs]
        cls.SCHEMA = schema
        return schema

    @classmethod
    def INPUT_TYPES(cls, include_hidden=True, return_schema=False):
        schema = cls.FINALIZE_SCHEMA()
        inp = {"required": {}}
        for i in schema.inputs or []:
            d = i.as_dict()
            d.pop("optional", None)
            inp.setdefault("optional" if i.optional else "required", {})[i.id] = (i.get_io_type(), d)
        return (inp, schema) if return_schema else inp

    @classmethod
    def EXECUTE_NORMALIZED(cls, *args, **kwargs) -> NodeOutput:
        out = cls.execute(*args, **kwargs)
        if out is None:
            out = NodeOutput()
        elif isinstance(out, tuple):
            out = NodeOutput(*out)
        elif not isinstance(out, NodeOutput):
            raise Exception(f"Invalid return type from node: {type(out)}")
        return out


class NodeOutput:
    def __init__(self, *args: Any, ui=None, expand: dict=None, block_execution: str=None):
        self.args = args
        self.ui = ui
        self.expand = expand
        self.block_execution = block_execution

    @property
    def result(self):
        return self.args if len(self.args) > 0 else None

    def __getitem__(self, index) -> Any:
        return self.args[index]


class _IO:
    comfytype = staticmethod(comfytype)
    Custom = staticmethod(Custom)
    Input = Input
    WidgetInput = WidgetInput
    Output = Output
    ComfyTypeI = ComfyTypeI
    ComfyTypeIO = ComfyTypeIO
    Boolean = Boolean
    Int = Int
    Float = Float
    String = String
    Combo = Combo
    Image = Image
    Latent = Latent
    Audio = Audio
    Schema = Schema
    ComfyNode = ComfyNode
    NodeOutput = NodeOutput
