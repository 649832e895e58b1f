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
