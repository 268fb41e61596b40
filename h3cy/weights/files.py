"""Small file helpers every reader shares."""
import json

from ..errors import CheckpointError


def load_json(path, what):
    """A component's JSON file (config, index), read with a 64 MB cap; CheckpointError
    naming the file and ``what`` it is when it cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            raw = f.read(64 << 20)
    except OSError as e:
        err = CheckpointError(f"{path}: cannot read {what}: {e.strerror or e}")
        err.path, err.tensor = path, None
        raise err from e
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        err = CheckpointError(f"{path}: {what} is not valid JSON: {str(e)[:200]}")
        err.path, err.tensor = path, None
        raise err from None
