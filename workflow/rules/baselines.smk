# Stage 2b: Agentic GRPO / PPO baselines on the same model, environment and prompts as ES.


# How train-rl starts: one process, or torchrun with rl.ranks ranks that shard the policy,
# critic and reference (FSDP2) and split the rollouts, one GPU each (rl.gpus_per_rank).
RL_RANKS = RL.get("ranks", 1)
RL_GPUS = RL_RANKS * RL.get("gpus_per_rank", 0)
RL_LAUNCH = "esopt" if RL_RANKS == 1 else (
    f"python -m torch.distributed.run --standalone --nproc-per-node {RL_RANKS} -m esopt.cli.main"
)


# One RL run; budget.json says what it used (episodes, tokens, FLOPs, wall clock).
# rl.ranks > 1: torchrun, GPUs and CPUs for every rank (memory per GPU: `esopt preflight`).
rule train_rl:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=f"{R}/models/{MODEL}",
        code=code("train-rl"),
    output:
        model=directory(f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/model"),
        metrics=f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/metrics.jsonl",
        budget=f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/budget.json",
        provenance=f"{R}/train/{{method}}/{MODEL}/sudoku/h{{horizon}}_s{{seed}}/provenance.json",
    params:
        settings=settings("train-rl"),
        algo=lambda wc: RL_ALGO[wc.method],
        out=lambda wc, output: str(Path(output.budget).parent),
        wildcards=lambda wc: wildcards_json(wc),
        launch=RL_LAUNCH,
    log:
        f"{LOGS}/train_rl/{{method}}_h{{horizon}}_s{{seed}}.log",
    threads: config["threads"] * RL_RANKS
    resources:
        gpu=RL_GPUS,
    conda:
        "../../envs/esopt.yaml"
    shell:
        "{params.launch} train-rl --config {input.config} {params.algo} --benchmark sudoku --horizon {wildcards.horizon} "
        "--seed {wildcards.seed} --model {input.model} "
        '--out {params.out} --rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'


# The random-weight memory-probe model (memory.probe), with the base model's tokenizer.
rule build_probe_model:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        tokenizer=f"{R}/models/{MODEL}",
        code=code("build-model"),
    output:
        model=directory(f"{R}/models/{MODEL}-probe"),
    params:
        settings=settings("build-model", probe=True),
    log:
        f"{LOGS}/build_probe_model/{MODEL}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt build-model --config {input.config} --probe --tokenizer {input.tokenizer} "
        "--out {output.model} --rule {rule} > {log} 2>&1"


# Peak memory of one real step of a method, in its own process(es); sharded: every rank's
# peak and the largest (memory per GPU).
rule memory:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        model=f"{R}/models/{PROBE}",
        code=code("memory"),
    output:
        summary=f"{R}/memory/{PROBE}/{{mem_method}}.json",
    params:
        settings=settings("memory"),
        launch=lambda wc: RL_LAUNCH if memory_sharded(wc.mem_method) else "esopt",
        wildcards=lambda wc: wildcards_json(wc),
    log:
        f"{LOGS}/memory/{{mem_method}}.log",
    threads: lambda wc: config["threads"] * (RL_RANKS if memory_sharded(wc.mem_method) else 1)
    resources:
        gpu=lambda wc: RL_GPUS if memory_sharded(wc.mem_method) else 1,
    conda:
        "../../envs/esopt.yaml"
    shell:
        "{params.launch} memory --method {wildcards.mem_method} --config {input.config} --model {input.model} "
        '--out {output.summary} --rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'
