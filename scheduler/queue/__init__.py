"""The shared queue in Redis: keys, records, Lua scripts, a replica's side (docs/architecture.md)."""
