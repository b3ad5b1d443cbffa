"""onejob's benchmarks: not shipped (not in the wheel), run from the repository root.

One script per benchmark (``python -m bench.compare``, ``bench.duel``, ``bench.bare_path``,
``bench.workers``, ``bench.servers``, ``bench.client``, ``bench.dispatch``,
``bench.end_to_end``) on a small shared library (``bench.lib``); the programs they start
as processes of their own are in ``bench.processes``. docs/benchmarks.md has the current
figures and the command behind each.
"""
