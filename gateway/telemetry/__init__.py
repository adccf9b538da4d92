"""Traces and metrics: the hub built per gateway (``hub``), one request's trace
(``tracing``), every instrument (``metrics``, ``instruments``), their exposition
(``prometheus``, ``otlp``), the dashboard's window (``stats``) and the predictor's rank
accuracy (``accuracy``). Names follow the GenAI semantic conventions (``semconv``)."""
