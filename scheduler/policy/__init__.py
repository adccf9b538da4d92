"""Decisions as small pure functions and objects, apart from the mechanism that applies
them: queue order (``order``), class and placement (``classify``), slots kept for short
work (``reservation``), adaptive concurrency (``limits``) and the backend pick
(``routing``, the Python twin of the dispatch script's rule)."""
