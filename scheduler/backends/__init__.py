"""Backend control: the registry of backends with their limits and health (``registry``),
the circuit breaker (``breaker``), what an engine's ``/metrics`` says (``engine_metrics``),
each engine's names and habits (``engines``), and which served model a name means (``names``)."""
