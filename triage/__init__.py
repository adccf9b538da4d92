"""The ``triage`` command, above every subsystem (``triage.cli``)."""
