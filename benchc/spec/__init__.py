"""Stage 1, spec: YAML with source positions, ${env:} interpolation, --set overrides, JSON Schema
validation with file:line:col errors; the threshold grammar and matrix expansion it checks."""
