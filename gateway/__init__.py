"""The HTTP surface: OpenAI-compatible routes, auth, the request's way (``proxy``), the
SSE relay, the upstream boundary (``upstream``) and telemetry (``telemetry``).
``app.create_app`` is the one place it is all wired."""
