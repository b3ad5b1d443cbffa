"""The certification tool: run the contract suite against providers and write certificates.

``onejob certify`` and ``onejob can-i-failover`` (``cli.certify``) drive the ``Runner``
(``certify.runner``), which checks every case layer by layer (``certify.checks``), live or
through scrubbed cassettes (``certify.cassettes``, recorded ones in ``certify/recorded/``).
The gateway never imports this package: at run time it needs only ``contracts``.
"""
