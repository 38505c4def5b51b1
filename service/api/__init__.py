"""HTTP: one FastAPI app, three thin dialect translators (OpenAI, Ollama, Anthropic) over the engine."""
