# Stage 4: tables and figures.


# Base vs Agentic ESOpt on held-out Sudoku across horizons.
rule report_sudoku:
    input:
        evals=all_evaluations(),
        code=code("report", "cli/report_sudoku.py"),
    output:
        table=f"{R}/tables/sudoku_es.csv",
        summary=f"{R}/tables/sudoku_es_summary.csv",
        figure=report(
            f"{R}/figures/sudoku_horizon.png",
            caption="../report/sudoku_horizon.rst",
            category="Sudoku",
        ),
    params:
        title=f"{config['name']}: {MODEL}, {config['sudoku']['size']}x{config['sudoku']['size']} Sudoku",
    log:
        f"{LOGS}/report_sudoku.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt report-sudoku {input.evals} --table {output.table} --summary {output.summary} "
        "--figure {output.figure} --title '{params.title}' > {log} 2>&1"


# Base vs Agentic PPO / GRPO / ESOpt by horizon, with the budget each run used.
rule report_methods:
    input:
        evals=expand(f"{R}/eval/{MODEL}/base/h{{h}}.json", h=HORIZONS)
        + expand(f"{R}/eval/{MODEL}/es/h{{h}}_g{{g}}_s{{s}}/h{{h}}.json", h=HORIZONS, g=max(POPULATIONS), s=SEEDS)
        + rl_evaluations(),
        budgets=training_budgets(),
        code=code("report", "cli/report_methods.py"),
    output:
        table=f"{R}/tables/sudoku_methods.csv",
        figure=report(
            f"{R}/figures/horizon_crossover.png",
            caption="../report/horizon_crossover.rst",
            category="Sudoku",
        ),
    params:
        title=f"{config['name']}: {MODEL}, {config['sudoku']['size']}x{config['sudoku']['size']} Sudoku",
        population=max(POPULATIONS),
        reference=reference_json(),
    log:
        f"{LOGS}/report_methods.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt report-methods {input.evals} --budgets {input.budgets} --population {params.population} "
        "--reference \"{params.reference}\" --table {output.table} --figure {output.figure} "
        "--title '{params.title}' > {log} 2>&1"


# Peak training memory per method, measured, beside the paper's ratio.
rule report_memory:
    input:
        memory=expand(f"{R}/memory/{PROBE}/{{m}}.json", m=MEMORY_METHODS),
        code=code("report", "cli/report_memory.py"),
    output:
        table=f"{R}/tables/memory.csv",
        figure=report(f"{R}/figures/memory.png", caption="../report/memory.rst", category="Memory"),
    params:
        title=f"{config['name']}: one training step, {PROBE}",
    log:
        f"{LOGS}/report_memory.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt report-memory {input.memory} --table {output.table} --figure {output.figure} "
        "--title '{params.title}' > {log} 2>&1"
