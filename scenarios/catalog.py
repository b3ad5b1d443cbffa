"""Every scenario module, imported so each registers itself; ``ORDER`` is the run order."""

from __future__ import annotations

from scenarios import (  # noqa: F401 - imported for their @scenario registrations
    cancel_vs_finish,
    cross_instance,
    divergent_key,
    double_click,
    fallback_button,
    load_balancer_retry,
    reconciler_unknown,
    reverse_order_finish,
    timeout_unknown,
    uncertified_fallback,
    worker_crash,
)

ORDER = (
    "double-click",
    "divergent-key",
    "timeout-unknown",
    "reverse-order-finish",
    "fallback-button-during-unknown",
    "worker-crash",
    "uncertified-fallback",
    "cross-instance-double-click",
    "cancel-vs-finish",
    "load-balancer-retry",
    "unknown-resolved-by-reconciler",
)
