"""Backend control: the registry of backends with their limits and health (``registry``),
the circuit breaker (``breaker``) and what an engine's ``/metrics`` says (``engine_metrics``)."""
