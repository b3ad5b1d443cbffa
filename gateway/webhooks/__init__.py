"""Webhooks per Standard Webhooks (issue 45): the settings, where a destination may be,
and the delivery service. The rules are the domain's (``gateway.domain.webhooks``), the
rows the store's (``gateway.store.webhooks``), the use cases the service's."""
