"""A provider's capacity (issue 43): pacing its calls, its circuit, and what processes share.

``gate.Capacity`` is what one process knows and the question it answers before each call
(``admit``); ``pacing`` and ``breaker`` are its parts; ``sharing.CapacitySync`` is the loop
that tells the other processes and hears from them. The rules that decide what becomes
of an attempt its provider cannot take are plain domain rules (``gateway.domain.capacity``).
"""
