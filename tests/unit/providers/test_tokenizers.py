from __future__ import annotations

import base64
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest
import tiktoken.load
import tokenizers
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from providers import tokenizers as tokenizers_module
from providers.config import ProviderConfig
from providers.tokenizers import (
    EstimateTokenizer,
    HFTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    encodes_special_tokens_as_text,
    tokenizer_for,
)


def write_bpe(path: Path) -> Path:
    """Write a tiny BPE file: every byte, then the merges 'he' (256) and 'the' (257)."""
    ranks = [bytes([b]) for b in range(256)] + [b"he", b"the"]
    path.write_text(
        "".join(f"{base64.b64encode(tok).decode()} {rank}\n" for rank, tok in enumerate(ranks))
    )
    return path


def write_hf(path: Path) -> Path:
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "<|endoftext|>": 3}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(path))
    return path


def test_tiktoken_from_a_local_bpe_file_counts_merges(tmp_path: Path) -> None:
    tok = TiktokenTokenizer.from_bpe_file(write_bpe(tmp_path / "tiny.tiktoken"))
    assert isinstance(tok, Tokenizer)
    assert tok.exact is True
    assert tok.name == "tiktoken:tiny"
    assert tok.encode("the") == [257]
    assert tok.count("the") == 1
    assert tok.count("hello") == 4  # he, l, l, o
    assert tok.count("") == 0


def test_tiktoken_counts_special_token_strings_as_plain_text(tmp_path: Path) -> None:
    tok = TiktokenTokenizer.from_bpe_file(write_bpe(tmp_path / "tiny.tiktoken"))
    text = "ignore that <|endoftext|> and go on"
    assert tok.encoding.encode("<|endoftext|>", allowed_special="all") == [258]
    assert tok.count("<|endoftext|>") == len(b"<|endoftext|>")
    assert encodes_special_tokens_as_text(tok, text) is True


def test_hf_tokenizer_from_a_local_tokenizer_json(tmp_path: Path) -> None:
    tok = HFTokenizer.from_file(write_hf(tmp_path / "tokenizer.json"))
    assert tok.exact is True
    assert tok.name == "hf:tokenizer.json"
    assert tok.count("hello world hello") == 3
    assert encodes_special_tokens_as_text(tok, "hello <|endoftext|>") is True
    assert 3 not in tok.encode("hello <|endoftext|>")


def test_hf_tokenizer_that_honours_special_tokens_fails_the_check(tmp_path: Path) -> None:
    raw = tokenizers.Tokenizer.from_file(str(write_hf(tmp_path / "tokenizer.json")))
    tok = HFTokenizer(raw, special_as_text=False)
    assert tok.encode("hello <|endoftext|>") == [1, 3]
    assert encodes_special_tokens_as_text(tok, "hello <|endoftext|>") is False


def test_estimate_is_named_as_one_and_over_counts_english() -> None:
    tok = EstimateTokenizer()
    assert tok.exact is False
    assert tok.name.startswith("estimate:")
    text = "The quick brown fox jumps over the lazy dog. " * 10
    assert tok.count(text) >= len(text) / 4  # typical BPE: ~4 chars per token
    assert tok.count("") == 0
    assert tok.count("日本語") == 3  # 9 UTF-8 bytes
    assert encodes_special_tokens_as_text(tok, "<|endoftext|>") is True


@pytest.fixture
def config() -> Callable[..., ProviderConfig]:
    def make(**fields: object) -> ProviderConfig:
        base: dict[str, object] = {
            "name": "p",
            "protocol": "openai",
            "base_url": "http://x/v1",
            "model": "gpt-4o",
        }
        return ProviderConfig.model_validate({**base, **fields})

    return make


def test_tokenizer_for_uses_the_configured_file(
    tmp_path: Path, config: Callable[..., ProviderConfig]
) -> None:
    bpe = write_bpe(tmp_path / "tiny.tiktoken")
    hf = write_hf(tmp_path / "tokenizer.json")
    assert isinstance(tokenizer_for(config(tokenizer_path=str(bpe))), TiktokenTokenizer)
    assert isinstance(
        tokenizer_for(config(protocol="anthropic", tokenizer_path=str(hf))), HFTokenizer
    )


def test_openai_models_count_with_the_bundled_public_encoding_offline(
    config: Callable[..., ProviderConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tiktoken tried to download an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    tok = tokenizer_for(config(model="gpt-4o"))
    assert (tok.name, tok.exact) == ("tiktoken:o200k_base", True)
    assert tok.count("hello world") == 2
    assert tok.count("<|endoftext|>") > 1  # special-token text stays text
    assert tokenizer_for(config(model="gpt-4")).name == "tiktoken:cl100k_base"


def test_a_bundled_bpe_file_that_is_not_the_pinned_one_is_not_used(
    tmp_path: Path, config: Callable[..., ProviderConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGk= 0\n"))  # "hi", rank 0
    monkeypatch.setattr(tokenizers_module, "_bundled_data_dir", lambda: data)
    monkeypatch.setattr(tokenizers_module, "_bundled", {})
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: nothing cached
    assert isinstance(tokenizer_for(config(model="gpt-4o")), EstimateTokenizer)


def test_tokenizer_for_falls_back_to_the_estimate_without_local_files(
    tmp_path: Path, config: Callable[..., ProviderConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokenizers_module, "_bundled_data_dir", lambda: None)
    monkeypatch.setattr(tokenizers_module, "_bundled", {})
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: nothing cached
    assert isinstance(tokenizer_for(config()), EstimateTokenizer)
    assert isinstance(tokenizer_for(config(protocol="gemini")), EstimateTokenizer)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert isinstance(tokenizer_for(config(model="sim-gpt")), EstimateTokenizer)


def test_tokenizer_for_a_missing_configured_file_fails_loudly(
    tmp_path: Path, config: Callable[..., ProviderConfig]
) -> None:
    with pytest.raises(OSError):
        tokenizer_for(config(tokenizer_path=str(tmp_path / "nope.tiktoken")))
    with pytest.raises(Exception, match=r"No such file|os error"):
        tokenizer_for(config(tokenizer_path=str(tmp_path / "nope.json")))
