# Stage 5: tool-using agents (ReAct Math with a Python sandbox, DocVQA with OCR) and
# prompt-parameter co-evolution with Trace2Skill; config `tool_agents`.


# One task set of a benchmark: generated here, or loaded from local files / the hub.
rule prepare_data:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        code=lambda wc: code("prepare-data", [wc.benchmark]),
    output:
        data=directory(f"{R}/data/{{benchmark}}/{{dataset}}"),
    params:
        settings=lambda wc: settings("prepare-data", benchmark=wc.benchmark, set=wc.dataset),
    log:
        f"{LOGS}/prepare_data/{{benchmark}}_{{dataset}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt prepare-data --config {input.config} --benchmark {wildcards.benchmark} --set {wildcards.dataset} "
        "--out {output.data} --rule {rule} > {log} 2>&1"


# The tiny tool model: tokenizer and warm start on expert ReAct episodes of every
# benchmark's training set (real sandbox, real OCR). Hub configs use the main model.
if TOOL_MODEL_BUILT:

    rule build_tool_model:
        input:
            config=ancient(CONFIGFILE),
            data=expand(f"{R}/data/{{benchmark}}/train", benchmark=TOOL_BENCHMARKS),
            code=code("build-model", TOOL_BENCHMARKS),
        output:
            model=directory(TOOL_MODEL_DIR),
        params:
            settings=settings("build-model", target="tools"),
            data=lambda wc, input: " ".join(f"--data {b}={d}" for b, d in zip(TOOL_BENCHMARKS, input.data)),
        log:
            f"{LOGS}/build_tool_model/{TOOL_MODEL}.log",
        threads: (TA.get("model") or {}).get("warmstart", {}).get("threads", config["threads"])
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt build-model --for tools --config {input.config} {params.data} --out {output.model} --rule {rule} > {log} 2>&1"


# One training run of a tool agent: esopt (Agentic ESOpt), esopt_trace2skill (co-evolution on
# the same rollouts), trace2skill (skill only, frozen weights) or grpo (Agentic GRPO).
rule train_agent:
    input:
        config=ancient(CONFIGFILE),
        model=TOOL_MODEL_DIR,
        data=f"{R}/data/{{benchmark}}/train",
        code=lambda wc: code("train-agent", [wc.benchmark]),
    output:
        run=directory(f"{R}/train/{{agent_method}}/{TOOL_MODEL}/{{benchmark}}/s{{seed}}"),
    params:
        settings=lambda wc: settings("train-agent", method=AGENT_METHODS[wc.agent_method], benchmark=wc.benchmark),
        method=lambda wc: AGENT_METHODS[wc.agent_method],
        wildcards=lambda wc: wildcards_json(wc),
    log:
        f"{LOGS}/train_agent/{{agent_method}}_{{benchmark}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        train_agent_env
    shell:
        "esopt train-agent --config {input.config} --method {params.method} --benchmark {wildcards.benchmark} "
        "--seed {wildcards.seed} --model {input.model} --data {input.data} --out {output.run} "
        '--rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'


# Mean@k of the base model (no skill) on one evaluation set.
rule evaluate_agent_base:
    input:
        config=ancient(CONFIGFILE),
        model=TOOL_MODEL_DIR,
        data=f"{R}/data/{{benchmark}}/{{dataset}}",
        code=lambda wc: code("evaluate", [wc.benchmark]),
    output:
        summary=f"{R}/eval/{TOOL_MODEL}/tools/no_skill/{{benchmark}}_{{dataset}}.json",
    params:
        settings=settings("evaluate", block="tool_agents"),
        meta=lambda wc: json_arg({"method": "no_skill", "benchmark": wc.benchmark, "dataset": wc.dataset}),
    log:
        f"{LOGS}/evaluate_agent/no_skill_{{benchmark}}_{{dataset}}.log",
    threads: config["threads"]
    conda:
        lambda wc: engine_env(wc.benchmark)
    shell:
        "esopt evaluate --config {input.config} --benchmark {wildcards.benchmark} --model {input.model} "
        '--data {input.data} --out {output.summary} --meta "{params.meta}" --rule {rule} > {log} 2>&1'


# Mean@k of a trained run: its weights (es, es_trace2skill, grpo; trace2skill keeps the
# base weights) and its skill document (trace2skill methods).
rule evaluate_agent:
    input:
        config=ancient(CONFIGFILE),
        run=f"{R}/train/{{agent_method}}/{TOOL_MODEL}/{{benchmark}}/s{{seed}}",
        base=TOOL_MODEL_DIR,
        data=f"{R}/data/{{benchmark}}/{{dataset}}",
        code=lambda wc: code("evaluate", [wc.benchmark]),
    output:
        summary=f"{R}/eval/{TOOL_MODEL}/tools/{{agent_method}}/{{benchmark}}_{{dataset}}_s{{seed}}.json",
    params:
        settings=settings("evaluate", block="tool_agents"),
        model=lambda wc, input: input.base if wc.agent_method == "trace2skill" else f"{input.run}/model",
        skill=lambda wc, input: f"--skill {input.run}/skill.md" if "trace2skill" in wc.agent_method else "",
        meta=lambda wc: json_arg({"method": wc.agent_method, "benchmark": wc.benchmark, "dataset": wc.dataset,
                                  "seed": int(wc.seed)}),
    log:
        f"{LOGS}/evaluate_agent/{{agent_method}}_{{benchmark}}_{{dataset}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        lambda wc: engine_env(wc.benchmark)
    shell:
        "esopt evaluate --config {input.config} --benchmark {wildcards.benchmark} --model {params.model} "
        '{params.skill} --data {input.data} --out {output.summary} --meta "{params.meta}" --rule {rule} > {log} 2>&1'


# Does the tiny tool model land in the Mean@k its config block states for any machine
# (tool_agents.model.expect, by BENCHMARK/SET)? Warns loudly when not; never fails the run.
TOOL_EXPECT = (TA.get("model") or {}).get("expect") if TOOL_MODEL_BUILT else None
if TOOL_EXPECT:

    rule check_tool_model:
        input:
            config=ancient(CONFIGFILE),  # reruns follow the config sections in params
            summaries=[f"{R}/eval/{TOOL_MODEL}/tools/no_skill/{key.replace('/', '_')}.json" for key in TOOL_EXPECT],
            code=code("check-models"),
        output:
            check=f"{R}/checks/{TOOL_MODEL}.json",
        params:
            settings=settings("check-models", name=TOOL_MODEL),
            name=TOOL_MODEL,
        log:
            f"{LOGS}/check_models/{TOOL_MODEL}.log",
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt check-models --config {input.config} --name {params.name} --out {output.check} "
            "--rule {rule} {input.summaries} > {log} 2>&1"


# The tool-agents table: Mean@k by method and evaluation set, mean ± std over seeds.
rule report_tool_agents:
    input:
        evals=tool_evaluations(),
        notebook=notebook("tool_agents"),
        code=code(notebook("tool_agents")),
    output:
        table=report(f"{R}/tables/tool_agents.csv", caption="../report/tool_agents.rst", category="Tool agents"),
        figure=report(f"{R}/figures/tool_agents.png", caption="../report/tool_agents.rst", category="Tool agents"),
        provenance=report(f"{R}/tables/tool_agents.provenance.json", caption="../report/provenance.rst",
                          category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), reference=reference("tool_agents"),
                            columns=TOOL_COLUMNS, table=lambda i, o: o.table, figure=lambda i, o: o.figure,
                            title=f"{config['name']}: {TOOL_MODEL}, tool agents (Mean@{TA.get('evaluate', {}).get('samples', 4)})"),
    log:
        notebook=f"{R}/notebooks/tool_agents.ipynb",
        stdout=f"{LOGS}/report_tool_agents.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL
