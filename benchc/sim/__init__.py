"""The embedded simulator: an OpenAI/vLLM-compatible server driven by a continuous-batching engine
loop; the ground truth of benchc's timing tests."""
