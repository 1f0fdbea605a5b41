"""Pipeline YAML to typed models, with every problem reported by code, file and field."""
