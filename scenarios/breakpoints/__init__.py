"""The break-point scenarios, one module each; each registers itself with ``@scenario``.

A new scenario is one file here: ``scenarios.registry`` finds it.
"""
