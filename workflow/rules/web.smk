# Stage 6: WebArena-Lite, web agents in a real browser (headless Chromium via Playwright)
# on the project's local sites or the real WebArena sites; Agentic ESOpt, Trace2Skill and
# both on the same rollouts; config `web` (docs/web.md).


# One web task set: generated over the local sites, or WebArena's task files.
rule prepare_web_data:
    input:
        config=ancient(CONFIGFILE),  # reruns follow the config sections in params
        code=code("prepare-data", ["web"]),
    output:
        data=directory(f"{R}/data/web/{{web_set}}"),
    params:
        settings=lambda wc: settings("prepare-data", benchmark="web", set=wc.web_set),
    log:
        f"{LOGS}/prepare_data/web_{{web_set}}.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt prepare-data --config {input.config} --benchmark web --set {wildcards.web_set} "
        "--out {output.data} --rule {rule} > {log} 2>&1"


# The web model: a tiny one (tokenizer and warm start on the scripted expert's episodes of
# the training tasks, played in the browser), or a hub model of its own, staged.
if WEB_MODEL_BUILT:

    rule build_web_model:
        input:
            config=ancient(CONFIGFILE),
            data=f"{R}/data/web/train",
            code=code("build-model", ["web"]),
        output:
            model=directory(WEB_MODEL_DIR),
        params:
            settings=settings("build-model", target="web"),
        log:
            f"{LOGS}/build_web_model/{WEB_MODEL}.log",
        threads: WEB["model"].get("warmstart", {}).get("threads", config["threads"])
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt build-model --for web --config {input.config} --data web={input.data} --out {output.model} "
            "--rule {rule} > {log} 2>&1"


# One training run of the web agent: esopt, esopt_trace2skill or trace2skill.
rule train_web:
    input:
        config=ancient(CONFIGFILE),
        model=WEB_MODEL_DIR,
        data=f"{R}/data/web/train",
        code=code("train-agent", ["web"]),
    output:
        run=directory(f"{R}/train/{{web_method}}/{WEB_MODEL}/web/s{{seed}}"),
    params:
        settings=lambda wc: settings("train-agent", method=wc.web_method, benchmark="web"),
        wildcards=lambda wc: wildcards_json(wc),
    log:
        f"{LOGS}/train_web/{{web_method}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt train-agent --config {input.config} --method {wildcards.web_method} --benchmark web "
        "--seed {wildcards.seed} --model {input.model} --data {input.data} --out {output.run} "
        '--rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'


# Success of the base model (no skill) on one evaluation set.
rule evaluate_web_base:
    input:
        config=ancient(CONFIGFILE),
        model=WEB_MODEL_DIR,
        data=f"{R}/data/web/{{web_set}}",
        code=code("evaluate", ["web"]),
    output:
        summary=f"{R}/eval/{WEB_MODEL}/web/no_skill/{{web_set}}.json",
    params:
        settings=settings("evaluate", benchmark="web"),
        meta=lambda wc: json_arg({"method": "no_skill", "benchmark": "web", "dataset": wc.web_set}),
    log:
        f"{LOGS}/evaluate_web/no_skill_{{web_set}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt evaluate --config {input.config} --benchmark web --model {input.model} "
        '--data {input.data} --out {output.summary} --meta "{params.meta}" --rule {rule} > {log} 2>&1'


# Success of a trained run: its weights (esopt methods; trace2skill keeps the base
# weights) and its skill document (trace2skill methods).
rule evaluate_web:
    input:
        config=ancient(CONFIGFILE),
        run=f"{R}/train/{{web_method}}/{WEB_MODEL}/web/s{{seed}}",
        base=WEB_MODEL_DIR,
        data=f"{R}/data/web/{{web_set}}",
        code=code("evaluate", ["web"]),
    output:
        summary=f"{R}/eval/{WEB_MODEL}/web/{{web_method}}/{{web_set}}_s{{seed}}.json",
    params:
        settings=settings("evaluate", benchmark="web"),
        model=lambda wc, input: input.base if wc.web_method == "trace2skill" else f"{input.run}/model",
        skill=lambda wc, input: f"--skill {input.run}/skill.md" if "trace2skill" in wc.web_method else "",
        meta=lambda wc: json_arg({"method": wc.web_method, "benchmark": "web", "dataset": wc.web_set,
                                  "seed": int(wc.seed)}),
    log:
        f"{LOGS}/evaluate_web/{{web_method}}_{{web_set}}_s{{seed}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt evaluate --config {input.config} --benchmark web --model {params.model} "
        '{params.skill} --data {input.data} --out {output.summary} --meta "{params.meta}" --rule {rule} > {log} 2>&1'


# Does the tiny web model land in the success its config block states for any machine
# (web.model.expect, by web/SET)? Warns loudly when not; never fails the run.
WEB_EXPECT = (WEB.get("model") or {}).get("expect")
if WEB_EXPECT:

    rule check_web_model:
        input:
            config=ancient(CONFIGFILE),
            summaries=[f"{R}/eval/{WEB_MODEL}/web/no_skill/{key.split('/', 1)[1]}.json" for key in WEB_EXPECT],
            code=code("check-models"),
        output:
            check=f"{R}/checks/{WEB_MODEL}.json",
        params:
            settings=settings("check-models", name=WEB_MODEL),
            name=WEB_MODEL,
        log:
            f"{LOGS}/check_models/{WEB_MODEL}.log",
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt check-models --config {input.config} --name {params.name} --out {output.check} "
            "--rule {rule} {input.summaries} > {log} 2>&1"


# The WebArena-Lite table and figure: success by method, overall and per site.
rule report_webarena:
    input:
        evals=web_evaluations(),
        notebook=notebook("webarena"),
        code=code(notebook("webarena")),
    output:
        table=report(f"{R}/tables/webarena.csv", caption="../report/webarena.rst", category="WebArena-Lite"),
        figure=report(f"{R}/figures/webarena.png", caption="../report/webarena.rst", category="WebArena-Lite"),
        provenance=report(f"{R}/tables/webarena.provenance.json", caption="../report/provenance.rst",
                          category="Provenance"),
    params:
        nb=papermill_params(evals=lambda i, o: list(i.evals), eval_set=WEB_REPORTED_SET, reference=reference("webarena"),
                            table=lambda i, o: o.table, figure=lambda i, o: o.figure,
                            title=f"{config['name']}: {WEB_MODEL}, WebArena-Lite ({WEB_SET_LABEL}, success over "
                                  f"{WEB.get('evaluate', {}).get('samples', 1)} samples)"),
    log:
        notebook=f"{R}/notebooks/webarena.ipynb",
        stdout=f"{LOGS}/report_webarena.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL
