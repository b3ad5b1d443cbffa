from __future__ import annotations

import pydantic
import pytest

from gateway.settings import Settings
from providers.config import ProviderConfig, ProviderLimits

PASTED = "sk-proj-PASTEDsecret0123456789"


def test_api_key_is_read_from_the_named_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = ProviderConfig(
        name="p", protocol="openai", base_url="http://x/v1", model="m", api_key_env="MY_KEY"
    )
    monkeypatch.delenv("MY_KEY", raising=False)
    assert config.api_key() is None
    monkeypatch.setenv("MY_KEY", "sk-live")
    assert config.api_key() == "sk-live"
    assert "sk-live" not in repr(config)


def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        Settings.model_validate(
            {
                "providers": {
                    "p": {
                        "protocol": "openai",
                        "base_url": "http://x/v1",
                        "model": "m",
                        "api_key_env": PASTED,
                    }
                }
            }
        )
    assert "api_key_env must name an environment variable" in str(caught.value)
    assert PASTED not in str(caught.value)
    assert "PASTED" not in repr(caught.value.errors())


@pytest.mark.parametrize("field", ["api_key", "secret", "auth_token"])
def test_a_secret_field_in_the_file_is_refused_without_echoing_it(field: str) -> None:
    data = {"name": "p", "protocol": "openai", "base_url": "u", "model": "m", field: PASTED}
    with pytest.raises(pydantic.ValidationError) as caught:
        ProviderConfig.model_validate(data)
    assert field in str(caught.value)
    assert "Extra inputs are not permitted" in str(caught.value)
    assert PASTED not in str(caught.value)


def test_limits_default_to_unknown_and_take_only_positive_numbers() -> None:
    base = {"name": "p", "protocol": "openai", "base_url": "http://x/v1", "model": "m"}
    config = ProviderConfig.model_validate(base)
    assert config.limits == ProviderLimits()
    assert (config.limits.requests_per_minute, config.limits.max_concurrency) == (None, None)
    limited = ProviderConfig.model_validate(
        {**base, "limits": {"requests_per_minute": 500, "tokens_per_minute": 200_000}}
    )
    assert limited.limits.requests_per_minute == 500
    assert limited.limits.tokens_per_minute == 200_000
    for wrong in ({"requests_per_minute": 0}, {"max_concurrency": -1}, {"rpm": 5}):
        with pytest.raises(pydantic.ValidationError):
            ProviderConfig.model_validate({**base, "limits": wrong})
    with pytest.raises(pydantic.ValidationError):  # frozen, like the rest of the config
        limited.limits.requests_per_minute = 1  # type: ignore[misc]
