"""The prompt tokenizer: Qwen2's byte-level BPE, loaded with the ``tokenizers`` library
from the checkpoint's tokenizer folder (``tokenizer.json`` when present, otherwise built
from ``vocab.json`` + ``merges.txt`` + ``tokenizer_config.json`` the way transformers'
Qwen2 converter builds it, including the added special tokens such as ``<d>``)."""
import json
import os

from ..errors import CheckpointError, H3ValueError

# The released tokenizer files, shipped as package data (h3cy/data/tokenizer/SOURCE.md says
# where they come from and under which licence): used when a model file has no tokenizer.
DEFAULT_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tokenizer")

# Qwen2's pre-tokenization split (transformers' Qwen2Converter)
QWEN2_SPLIT_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


class Tokenizer:
    """``encode(prompt) -> list[int]`` and ``decode(ids) -> str`` (the prompt is presented
    verbatim: no chat template, no BOS/EOS)."""

    def __init__(self, tok, folder):
        self._tok = tok
        self.folder = folder

    @classmethod
    def default(cls):
        """The MiniMax-H3 release's tokenizer (Qwen2 BPE + H3's special tokens), shipped
        with h3cy: for model files that bring no tokenizer folder."""
        return cls.from_pretrained(DEFAULT_FOLDER)

    @classmethod
    def from_pretrained(cls, folder):
        try:
            from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
            from tokenizers import Tokenizer as _T
        except ImportError as e:  # pragma: no cover - tokenizers is a dependency
            raise ImportError("h3cy's tokenizer needs the 'tokenizers' package") from e
        folder = os.fspath(folder)
        tj = os.path.join(folder, "tokenizer.json")
        if os.path.exists(tj):
            return cls(_T.from_file(tj), folder)
        paths = {n: os.path.join(folder, n) for n in ("vocab.json", "merges.txt", "tokenizer_config.json")}
        for n, p in paths.items():
            if not os.path.exists(p):
                raise CheckpointError(f"{folder}: no tokenizer.json and no {n}")
        try:
            with open(paths["vocab.json"], encoding="utf-8") as f:
                vocab = json.load(f)
            with open(paths["tokenizer_config.json"], encoding="utf-8") as f:
                cfg = json.load(f)
            merges = []
            with open(paths["merges.txt"], encoding="utf-8") as f:
                for i, line in enumerate(f):
                    line = line.rstrip("\n")
                    if not line or (i == 0 and line.startswith("#version")):
                        continue
                    a, _, b = line.partition(" ")
                    merges.append((a, b))
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{folder}: cannot read the tokenizer files ({e})") from e
        tok = _T(models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False,
                            byte_fallback=False, continuing_subword_prefix="", end_of_word_suffix=""))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        # added tokens in id order (they follow the BPE vocabulary), then the additional
        # special tokens the config names that are not among them (transformers appends those)
        added = sorted(((int(k), v) for k, v in cfg.get("added_tokens_decoder", {}).items()),
                       key=lambda kv: kv[0])
        for tid, v in added:
            at = AddedToken(v["content"], single_word=v.get("single_word", False),
                            lstrip=v.get("lstrip", False), rstrip=v.get("rstrip", False),
                            normalized=v.get("normalized", False), special=v.get("special", False))
            (tok.add_special_tokens if v.get("special") else tok.add_tokens)([at])
            if tok.token_to_id(v["content"]) != tid:
                raise CheckpointError(f"{folder}: added token {v['content']!r} should have id {tid}, "
                                      f"got {tok.token_to_id(v['content'])}")
        for content in cfg.get("additional_special_tokens", []):
            if tok.token_to_id(content) is None:
                tok.add_special_tokens([AddedToken(content, normalized=False, special=True)])
        return cls(tok, folder)

    def encode(self, prompt):
        if not isinstance(prompt, str):
            raise H3ValueError(f"prompt must be a str, got {type(prompt).__name__}")
        if prompt == "":
            raise H3ValueError("the prompt is empty (whitespace is a valid prompt)")
        return self._tok.encode(prompt, add_special_tokens=False).ids

    def decode(self, ids, skip_special_tokens=False):
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self):
        return self._tok.get_vocab_size(with_added_tokens=True)
