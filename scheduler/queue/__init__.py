"""The shared queue in Redis: every key (``keys``), every record format (``records``),
the Lua scripts (``lua/``) and their typed wrappers (``scripts``), the replica's side
(``dispatcher``) and the queue's depth as telemetry reads it (``depth``)."""
