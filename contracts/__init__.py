"""The contract model the gateway runs on: contracts, their catalog and the certificates.

``contracts.loader`` loads ``contracts/catalog/<name>/`` into ``contracts.model.Contract``
(assertions, schema validation, languages); ``contracts.registry`` answers ``can_failover``
from the certificates, comparing their evidence (``contracts.evidence``). The tool that
issues certificates is the ``certify`` package; this one never imports it.
"""
