"""Running the pipeline on a cluster: what a run will ask for before it is spent (`plan`),
and whether everything it needs is in place before any GPU job starts (`preflight`).

Both read the jobs as Snakemake plans them, with the resources the profile gives each
(`JobRequest`): from the DAG itself when the Snakefile's onstart hook runs them, or from
`snakemake --dry-run` when `esopt preflight` does.
"""
