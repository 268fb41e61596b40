"""What every component reader shares: checkpoint errors that name the file and the
tensor, JSON files read with a size cap, and a folder's safetensors files mapped as one
name -> tensor table with checked reads."""
import json

from ..errors import CheckpointError
from .safetensors import SafetensorsFile


def checkpoint_error(path, tensor, msg):
    """A CheckpointError "path: tensor 'name': msg" (or "path: msg"), with ``.path`` and
    ``.tensor`` set for callers that report them."""
    where = f"{path}: tensor {tensor!r}: " if tensor is not None else f"{path}: "
    e = CheckpointError(where + msg)
    e.path, e.tensor = path, tensor
    return e


def load_json(path, what):
    """A component's JSON file (config, index), read with a 64 MB cap; CheckpointError
    naming the file and ``what`` it is when it cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 << 20)
    except OSError as e:
        raise checkpoint_error(path, None, f"cannot read {what}: {e.strerror or e}") from e
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise checkpoint_error(path, None, f"{what} is not valid JSON: {str(e)[:200]}") from None


class TensorFiles:
    """The mapped safetensors files of one component: tensor name -> file, and reads that
    check dtype and shape (CheckpointError naming the file and the tensor).  A failed open
    closes what it had opened."""

    def __init__(self, paths):
        self.files, self.where = [], {}
        try:
            for p in paths:
                f = SafetensorsFile(p)
                self.files.append(f)
                for n in f.tensors:
                    self.where[n] = f
        except BaseException:
            self.close()
            raise

    def __contains__(self, name):
        return name in self.where

    def has(self, name):
        return name in self.where

    def path_of(self, name):
        f = self.where.get(name)
        return f.path if f is not None else (self.files[0].path if self.files else "?")

    def info(self, name):
        """The tensor's header entry (dtype, shape); CheckpointError if it is absent."""
        f = self.where.get(name)
        if f is None:
            raise checkpoint_error(self.path_of(name), name, "missing tensor")
        return f.tensors[name]

    def get(self, name, shape=None, dtypes=("F32", "BF16")):
        """The tensor as stored (BF16 as uint16 bits), a read-only view into the mapping,
        after checking its dtype is one of ``dtypes`` and its shape is ``shape`` (if given)."""
        info = self.info(name)
        f = self.where[name]
        if info.dtype not in dtypes:
            raise checkpoint_error(f.path, name, f"dtype {info.dtype}: expected {' or '.join(dtypes)}")
        if shape is not None and tuple(info.shape) != tuple(shape):
            raise checkpoint_error(f.path, name, f"shape {list(info.shape)} but the config implies {list(shape)}")
        return f.get(name)

    def close(self):
        for f in self.files:
            f.close()
