"""The settings of one job, resolved once from the validated config and typed.

One frozen dataclass per kind of job (an ES run, an RL run, Sudoku episodes, tool
episodes, web episodes). Each is built by `from_config(config, **job keys)` from a config
that esopt.config.load_config validated, so every key is present: the schema
(workflow/schemas/config.schema.yaml) is the only source of defaults, and no spec field
has a default of its own. Commands build their specs once and pass them down instead of
the config dict; the rerun map (esopt.provenance.jobs) and the audit
(esopt.provenance.derived) read the same specs, so one setting is defined in one place.

This package imports neither torch nor any esopt layer above the config: the Snakefile
imports it while it builds the DAG.
"""
