# Stage 4: tables and figures. Each figure is drawn by a papermill-executed notebook in
# notebooks/ (parameters in its `parameters` cell); the executed notebook is kept as the
# rule's log, so a reader can open it, see every intermediate table, and rerun it.


PAPERMILL = "papermill {input.notebook} {log.notebook} -k python3 --cwd . -y {params.nb:q} > {log.stdout} 2>&1"
TITLE = f"{config['name']}: {MODEL}, {config['sudoku']['size']}x{config['sudoku']['size']} Sudoku"


# Base vs Agentic ESOpt on held-out Sudoku across horizons (train H* x eval H*).
rule report_sudoku:
    input:
        evals=all_evaluations(),
        notebook=notebook("sudoku_horizon"),
        code=code(notebook("sudoku_horizon")),
    output:
        table=report(f"{R}/tables/sudoku_es.csv", caption="../report/sudoku_horizon.rst", category="Sudoku"),
        summary=f"{R}/tables/sudoku_es_summary.csv",
        figure=report(f"{R}/figures/sudoku_horizon.png", caption="../report/sudoku_horizon.rst", category="Sudoku"),
        provenance=report(f"{R}/tables/sudoku_es.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), table=lambda i, o: o.table, summary=lambda i, o: o.summary,
                            figure=lambda i, o: o.figure, title=TITLE),
    log:
        notebook=f"{R}/notebooks/sudoku_horizon.ipynb",
        stdout=f"{LOGS}/report_sudoku.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Base vs Agentic PPO / GRPO / Vanilla ES / ESOpt by horizon, with each run's budget.
rule report_methods:
    input:
        evals=methods_evaluations(),
        budgets=training_budgets(),
        notebook=notebook("horizon_crossover"),
        code=code(notebook("horizon_crossover")),
    output:
        table=report(f"{R}/tables/sudoku_methods.csv", caption="../report/horizon_crossover.rst", category="Sudoku"),
        figure=report(f"{R}/figures/horizon_crossover.png", caption="../report/horizon_crossover.rst", category="Sudoku"),
        provenance=report(f"{R}/tables/sudoku_methods.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), budgets=lambda i, o: list(i.budgets),
                            population=max(POPULATIONS), reference=reference("sudoku"), table=lambda i, o: o.table,
                            figure=lambda i, o: o.figure, title=TITLE),
    log:
        notebook=f"{R}/notebooks/horizon_crossover.ipynb",
        stdout=f"{LOGS}/report_methods.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Mean reward and success per generation, with sigma_t, for ESOpt and its ablations.
rule report_training_curves:
    input:
        metrics=[result(f"{es_dir(*run)}/metrics.jsonl") for run in main_es_runs(largest_population=True)],
        notebook=notebook("training_curves"),
        code=code(notebook("training_curves")),
    output:
        table=report(f"{R}/tables/training_curves.csv", caption="../report/training_curves.rst", category="Training"),
        figure=report(f"{R}/figures/training_curves.png", caption="../report/training_curves.rst", category="Training"),
        provenance=report(f"{R}/tables/training_curves.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(runs=lambda i, o: [str(Path(m).parent) for m in i.metrics], table=lambda i, o: o.table,
                            figure=lambda i, o: o.figure, title=TITLE),
    log:
        notebook=f"{R}/notebooks/training_curves.ipynb",
        stdout=f"{LOGS}/report_training_curves.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Final success vs population size G, one line per model size.
rule report_population:
    input:
        evals=study_evaluations(),
        notebook=notebook("population"),
        code=code(notebook("population")),
    output:
        table=report(f"{R}/tables/population.csv", caption="../report/population.rst", category="Population"),
        figure=report(f"{R}/figures/population.png", caption="../report/population.rst", category="Population"),
        size=report(f"{R}/tables/model_size.csv", caption="../report/population.rst", category="Population"),
        provenance=report(f"{R}/tables/population.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), reference=reference("population"),
                            table=lambda i, o: o.table, figure=lambda i, o: o.figure, title=TITLE,
                            models=[MODEL] + [m["name"] for m in STUDY.get("models", [])],
                            size_horizon=max(STUDY.get("horizons") or HORIZONS),
                            size_population=max(STUDY.get("populations") or POPULATIONS),
                            size_table=lambda i, o: o.size),
    log:
        notebook=f"{R}/notebooks/population.ipynb",
        stdout=f"{LOGS}/report_population.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Cosine sigma vs sigma_T = 0 vs constant sigma at the ablation horizon.
rule report_sigma_ablation:
    input:
        evals=ablation_evaluations(),
        notebook=notebook("sigma_ablation"),
        code=code(notebook("sigma_ablation")),
    output:
        table=report(f"{R}/tables/sigma_ablation.csv", caption="../report/sigma_ablation.rst", category="Ablation"),
        figure=report(f"{R}/figures/sigma_ablation.png", caption="../report/sigma_ablation.rst", category="Ablation"),
        provenance=report(f"{R}/tables/sigma_ablation.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), horizon=ABLATION_HORIZON,
                            reference=reference("sigma_ablation"), table=lambda i, o: o.table,
                            figure=lambda i, o: o.figure, title=TITLE),
    log:
        notebook=f"{R}/notebooks/sigma_ablation.ipynb",
        stdout=f"{LOGS}/report_sigma_ablation.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# The paper's claims as differences with 95% intervals, and a verdict for each.
rule report_verdicts:
    input:
        evals=verdict_evaluations(),
        notebook=notebook("verdicts"),
        code=code(notebook("verdicts")),
    output:
        table=report(f"{R}/tables/verdicts.csv", caption="../report/verdicts.rst", category="Sudoku"),
        provenance=report(f"{R}/tables/verdicts.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), horizons=HORIZONS, population=max(POPULATIONS),
                            ablation_horizon=ABLATION_HORIZON if ES_VARIANTS else None,
                            study={"horizon": max(STUDY["horizons"]), "populations": STUDY["populations"]} if STUDY else None,
                            reference={k: reference(k) for k in ("sudoku", "sigma_ablation", "population")},
                            table=lambda i, o: o.table),
    log:
        notebook=f"{R}/notebooks/verdicts.ipynb",
        stdout=f"{LOGS}/report_verdicts.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Wall clock of every training run by method and horizon.
rule report_wall_clock:
    input:
        budgets=training_budgets(),
        notebook=notebook("wall_clock"),
        code=code(notebook("wall_clock")),
    output:
        table=report(f"{R}/tables/wall_clock.csv", caption="../report/wall_clock.rst", category="Cost"),
        figure=report(f"{R}/figures/wall_clock.png", caption="../report/wall_clock.rst", category="Cost"),
        provenance=report(f"{R}/tables/wall_clock.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(budgets=lambda i, o: list(i.budgets), reference=reference("wall_clock_h"),
                            table=lambda i, o: o.table, figure=lambda i, o: o.figure, title=TITLE),
    log:
        notebook=f"{R}/notebooks/wall_clock.ipynb",
        stdout=f"{LOGS}/report_wall_clock.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL


# Peak training memory per method, measured, beside the paper's ratio.
rule report_memory:
    input:
        memory=[result(f"{R}/memory/{PROBE}/{m}.json") for m in MEMORY_METHODS],
        notebook=notebook("memory"),
        code=code(notebook("memory")),
    output:
        table=report(f"{R}/tables/memory.csv", caption="../report/memory.rst", category="Cost"),
        figure=report(f"{R}/figures/memory.png", caption="../report/memory.rst", category="Cost"),
        provenance=report(f"{R}/tables/memory.provenance.json", caption="../report/provenance.rst", category="Provenance"),
    params:
        nb=papermill_params(memory=lambda i, o: list(i.memory), table=lambda i, o: o.table,
                            figure=lambda i, o: o.figure, title=f"{config['name']}: one training step, {PROBE}"),
    log:
        notebook=f"{R}/notebooks/memory.ipynb",
        stdout=f"{LOGS}/report_memory.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL
