"""Token counting for the render check, offline only.

Real tokenizers when the user has the files: tiktoken with an ``Encoding`` built from a
local ``.tiktoken`` BPE file (or one already in ``TIKTOKEN_CACHE_DIR``), and Hugging Face
``tokenizers`` from a local ``tokenizer.json``. Without either, ``EstimateTokenizer`` gives a
deliberately high estimate and says so (``exact = False``). Nothing here downloads.

Special-token strings in user input (``<|endoftext|>``) are always counted as plain text:
a user must not be able to smuggle control tokens into a prompt.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import tiktoken
import tiktoken.load
import tokenizers

from providers.config import ProviderConfig

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
        return frozenset(self.encoding._special_tokens.values())

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


def tokenizer_for(config: ProviderConfig) -> Tokenizer:
    """Return the best offline tokenizer for ``config``: a file, the tiktoken cache, an estimate."""
    if config.tokenizer_path:
        path = Path(config.tokenizer_path).expanduser()
        if path.suffix == ".json":
            return HFTokenizer.from_file(path)
        return TiktokenTokenizer.from_bpe_file(path)
    if config.protocol == "openai":
        cached = _cached_public_encoding(config.model)
        if cached is not None:
            return cached
    return EstimateTokenizer()
