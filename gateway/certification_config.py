"""``[certification]``: the re-certification pass of ``onejob worker``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CertificationConfig(BaseModel):
    """The re-certification pass of ``onejob worker`` (``onejob certify --due`` for cron)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recertify: bool = True  #: ``onejob worker`` re-certifies certificates about to expire
    within_days: float = Field(default=7.0, ge=0)  # days before expiry a certificate is due
    interval: float = Field(default=3600.0, gt=0)  # seconds between passes
    validity_days: float = Field(default=30.0, gt=0)  # days a new certificate stays valid
    repeats: int = Field(default=3, ge=1, le=20)  # k of pass^k
    report_dir: str = "reports/out"  #: where a pass writes its reports
    #: Production inputs each fallback the pass certifies is judged on (``certify
    #: --production N``, issue 48); 0 turns it off: each is a paid call on a customer's input.
    production: int = Field(default=0, ge=0, le=10_000)
    #: The contracts that opt in: their customers' inputs may go to a fallback that is not
    #: yet certified for them (``--production`` draws nothing for any other contract).
    production_contracts: tuple[str, ...] = ()
