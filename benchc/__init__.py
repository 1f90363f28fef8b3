"""benchc: declarative benchmarks for OpenAI-compatible LLM servers."""

__version__ = "0.2.0"
