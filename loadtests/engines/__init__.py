"""Real inference engines on loopback, for tests and benchmarks: ``vllm`` (a launcher
for vLLM's OpenAI server from its own virtual environment), ``tiny_model`` (a random-weight
Llama it can serve, built from a seed) and ``length_proxy`` (a sidecar that stops each
reply at its true length, behind the gateway)."""
