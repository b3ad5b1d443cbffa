"""Running the dispatcher inside a process: wiring for ``onejob serve`` and ``onejob worker``."""
