"""Stage 2, plan: spec -> frozen Plan (defaults, units, matrix x sweep steps, prompts from a seed)."""
