"""Provenance: which code, config, inputs, seeds and machine made each result, and checking it.

record    the provenance.json every command writes beside its results (Provenance)
run_dir   a training run's directory: .resume/ while running, outputs published
          atomically, the record last (RunDir)
imports   the package files a command runs, derived from its imports
jobs      the one map of what each job depends on (config sections, code), imported by
          the Snakemake rules and by `esopt audit`
find      finding records and the paths they name (published trees too)
published `esopt publish`: a config's compact outputs kept in the repository, and which of
          them the pipeline may read instead of running their jobs (fresh for the config)
record_checks, derived, weights, code_state, audit
          `esopt audit`: re-hash, re-check the config, recompute derived values (ES updates
          from raw rewards, summaries from trajectories, metrics from histories, episodes
          through the environment), replay ES histories bit for bit, compare the code tree
"""
