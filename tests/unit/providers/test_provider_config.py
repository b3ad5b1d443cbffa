from __future__ import annotations

import pydantic
import pytest

from gateway.settings import Settings
from providers.config import ProviderConfig

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
