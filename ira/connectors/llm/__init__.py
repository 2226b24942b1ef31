"""LLM providers behind the ``LlmClient`` port: OpenAI-compatible chat completions, Anthropic messages."""
