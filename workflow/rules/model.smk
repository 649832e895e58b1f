# Stage 1: the base models every other rule loads with from_pretrained.


# Build a tiny model (tokenizer + warm start) or fetch/stage a hub model: `model`, or one
# of the population study's extra sizes.
rule build_model:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        code=code("build-model"),
    output:
        model=directory(f"{R}/models/{{model}}"),
    params:
        settings=lambda wc: settings("build-model", name=wc.model),
    log:
        f"{LOGS}/build_model/{{model}}.log",
    # A fixed thread count (not --cores) keeps the warm start bit-reproducible.
    threads: lambda wc: MODELS[wc.model].get("warmstart", {}).get("threads", config["threads"])
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt build-model --config {input.config} --name {wildcards.model} --out {output.model} "
        "--rule {rule} > {log} 2>&1"
