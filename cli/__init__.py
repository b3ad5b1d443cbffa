"""The ``onejob`` command line: one module per command or group, registered in ``cli.main``.

Nothing imports this package: it imports the others (it is where the composition root,
``gateway.bootstrap``, is called from). Each command module is cheap to import; what a
command needs is imported when it runs, so ``onejob --help`` and a simulator start quickly.
"""
