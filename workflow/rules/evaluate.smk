# Stage 3: held-out evaluation of the base and every trained model at every H*.


# A base model at one horizon.
rule evaluate_base:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=f"{R}/models/{{model}}",
        code=code("evaluate"),
    output:
        summary=f"{R}/eval/{{model}}/base/h{{eval_horizon}}.json",
    params:
        settings=settings("evaluate"),
        meta=lambda wc: json.dumps({"method": "base", "model": wc.model}).replace('"', '\\"'),
    log:
        f"{LOGS}/evaluate_base/{{model}}_h{{eval_horizon}}.log",
    threads: config["threads"]
    conda:
        engine_env("sudoku")
    shell:
        "esopt evaluate --config {input.config} --model {input.model} --benchmark sudoku "
        '--horizon {wildcards.eval_horizon} --out {output.summary} --meta "{params.meta}" '
        "--rule {rule} > {log} 2>&1"


# An ES-trained model (trained at H*=horizon) evaluated at H*=eval_horizon.
rule evaluate_es:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=rules.train_es.output.model,
        code=code("evaluate"),
    output:
        summary=f"{R}/eval/{{model}}/{{es_method}}/h{{horizon}}_g{{population}}_s{{seed}}/h{{eval_horizon}}.json",
    params:
        settings=settings("evaluate"),
        meta=lambda wc: json.dumps({"method": ES_REPORTED[wc.es_method], "model": wc.model, "train_horizon": int(wc.horizon),
                                    "population": int(wc.population), "seed": int(wc.seed)}).replace('"', '\\"'),
    log:
        f"{LOGS}/evaluate_es/{{es_method}}_{{model}}_h{{horizon}}_g{{population}}_s{{seed}}_e{{eval_horizon}}.log",
    threads: config["threads"]
    conda:
        engine_env("sudoku")
    shell:
        "esopt evaluate --config {input.config} --model {input.model} --benchmark sudoku "
        '--horizon {wildcards.eval_horizon} --out {output.summary} --meta "{params.meta}" '
        "--rule {rule} > {log} 2>&1"


# An RL-trained model (Agentic GRPO / PPO) at the horizon it was trained at.
rule evaluate_rl:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=rules.train_rl.output.model,
        code=code("evaluate"),
    output:
        summary=f"{R}/eval/{MODEL}/{{method}}/h{{horizon}}_s{{seed}}/h{{horizon}}.json",
    params:
        settings=settings("evaluate"),
        meta=lambda wc: json.dumps({"method": wc.method, "model": MODEL, "train_horizon": int(wc.horizon),
                                    "seed": int(wc.seed)}).replace('"', '\\"'),
    log:
        f"{LOGS}/evaluate_rl/{{method}}_h{{horizon}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        engine_env("sudoku")
    shell:
        "esopt evaluate --config {input.config} --model {input.model} --benchmark sudoku "
        '--horizon {wildcards.horizon} --out {output.summary} --meta "{params.meta}" '
        "--rule {rule} > {log} 2>&1"


# Does the base land in the interval its config block states for any machine (model.expect)?
# Warns loudly (here and at the end of the run) when it does not; never fails the run.
rule check_models:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        summaries=lambda wc: [result(f"{R}/eval/{wc.model}/base/h{h}.json") for h in (MODELS[wc.model].get("expect") or {})],
        code=code("check-models"),
    output:
        check=f"{R}/checks/{{model}}.json",
    params:
        settings=lambda wc: settings("check-models", name=wc.model),
    log:
        f"{LOGS}/check_models/{{model}}.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt check-models --config {input.config} --name {wildcards.model} --out {output.check} "
        "--rule {rule} {input.summaries} > {log} 2>&1"
