# Stage 2: Agentic ESOpt (and its ablations) over the grid of horizons, population sizes,
# seeds and model sizes.


# One ES run: the history is replayable, the model is saved with save_pretrained.
# es_method "es" is Agentic ESOpt; "es_NAME" is the ablation es.variants.NAME.
# distributed.ranks > 1 launches torchrun with one model replica (and GPU) per rank.
rule train_es:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=f"{R}/models/{{model}}",
        code=code("train-es"),
    output:
        model=directory(f"{R}/train/{{es_method}}/{{model}}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/model"),
        history=f"{R}/train/{{es_method}}/{{model}}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/history.json",
        metrics=f"{R}/train/{{es_method}}/{{model}}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/metrics.jsonl",
        budget=f"{R}/train/{{es_method}}/{{model}}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/budget.json",
        provenance=f"{R}/train/{{es_method}}/{{model}}/sudoku/h{{horizon}}_g{{population}}_s{{seed}}/provenance.json",
    params:
        settings=lambda wc: settings("train-es", horizon=wc.horizon, variant=ES_METHODS[wc.es_method]),
        variant=lambda wc: f"--variant {ES_METHODS[wc.es_method]}" if ES_METHODS[wc.es_method] else "",
        out=lambda wc, output: str(Path(output.history).parent),
        wildcards=lambda wc: wildcards_json(wc),
        launch=ES_LAUNCH,
    log:
        f"{LOGS}/train_es/{{es_method}}_{{model}}_h{{horizon}}_g{{population}}_s{{seed}}.log",
    threads: config["threads"] * ES_RANKS
    resources:
        gpu=ES_GPUS,
    conda:
        engine_env("sudoku")
    shell:
        "{params.launch} train-es --config {input.config} --benchmark sudoku --horizon {wildcards.horizon} "
        "--population {wildcards.population} --seed {wildcards.seed} --model {input.model} {params.variant} "
        '--out {params.out} --rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'
