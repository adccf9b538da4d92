"""Deciding who goes next and where: no HTTP, no knowledge of the gateway.

``types`` is the vocabulary and ``errors`` the one error tree; ``service`` is the
façade the gateway calls. Subsystems: ``queue`` (the shared queue in Redis: keys,
records, Lua, the replica's dispatcher), ``policy`` (pure decisions: queue order,
classes, reservation, adaptive limits, backend pick), ``backends`` (registry, health,
engine metrics) and ``predictor`` (output-length prediction; its research tools in
``predictor.tools``).
"""
