"""Stage 3, run: execute a Plan -- server launch or attach, readiness, smoke checks, load generation
per point (local or Ray), telemetry -- and write the result document."""
