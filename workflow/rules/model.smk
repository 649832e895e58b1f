# Stage 1: the base model every other rule loads with from_pretrained.


# Build the tiny model (tokenizer + warm start) or fetch/stage the hub model.
rule build_model:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        code=code("models", "envs/sudoku.py", "agent/rollout.py", "cli/build_model.py"),
    output:
        model=directory(f"{R}/models/{MODEL}"),
    params:
        model=config["model"],
        sudoku=SUDOKU,
        agent=config["agent"],
    log:
        f"{LOGS}/build_model/{MODEL}.log",
    # A fixed thread count (not --cores) keeps the warm start bit-reproducible.
    threads: config["model"].get("warmstart", {}).get("threads", config["threads"])
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt build-model --config {input.config} --out {output.model} "
        "--rule {rule} > {log} 2>&1"
