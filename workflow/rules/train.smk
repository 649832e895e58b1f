# Stage 2: Agentic ESOpt training over the grid of horizons, population sizes and seeds.


# One ES run: the history is replayable, the model is saved with save_pretrained.
rule train_es:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=rules.build_model.output.model,
        code=code("es", "eval/episodes.py", "agent/rollout.py", "envs/sudoku.py", "models/load.py", "cli/train_es.py"),
    output:
        model=directory(f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/model"),
        history=f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/history.json",
        metrics=f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/metrics.jsonl",
        budget=f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/budget.json",
        provenance=f"{R}/train/es/{MODEL}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/provenance.json",
    params:
        es=ES,
        sudoku=SUDOKU,
        agent=config["agent"],
        out=lambda wc, output: str(Path(output.history).parent),
        wildcards=lambda wc: wildcards_json(wc),
    log:
        f"{LOGS}/train_es/h{{horizon}}_g{{population}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt train-es --config {input.config} --benchmark sudoku --horizon {wildcards.horizon} "
        "--population {wildcards.population} --seed {wildcards.seed} --model {input.model} "
        '--out {params.out} --rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'
