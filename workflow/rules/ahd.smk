# Stage 6: test-time automatic heuristic design; config `ahd`. Each setting (task,
# search, budget) runs with and without online ES on the writer, per repetition, and
# the report counts the settings in which ESOpt improves its matched baseline.

AHD = config.get("ahd") or {}
AHD_MODEL_BUILT = bool(AHD.get("model"))  # a tiny writer, or a hub writer of its own
AHD_MODEL = AHD["model"]["name"] if AHD_MODEL_BUILT else MODEL
AHD_MODEL_DIR = f"{R}/models/{AHD_MODEL}"
AHD_VARIANTS = {"base": "", "esopt": "--es"}  # the fixed model, and online Agentic ESOpt

wildcard_constraints:
    ahd_task="|".join(AHD.get("tasks", {})) or "none",
    ahd_search="eoh|sample",
    ahd_variant="base|esopt",


# The tiny writer: tokenizer and warm start on expression-mode demonstrations of every
# task and operator. Configs whose writer is a hub model use the main model instead.
if AHD_MODEL_BUILT:

    rule build_ahd_model:
        input:
            config=ancient(CONFIGFILE),
            code=code("build-model"),
        output:
            model=directory(AHD_MODEL_DIR),
        params:
            settings=settings("build-model", target="ahd"),
        log:
            f"{LOGS}/build_ahd_model/{AHD_MODEL}.log",
        threads: (AHD.get("model") or {}).get("warmstart", {}).get("threads", config["threads"])
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt build-model --for ahd --config {input.config} --out {output.model} --rule {rule} > {log} 2>&1"


# One run: a search (EoH or Sample) for one task and budget, on the fixed writer (base) or
# with online ES on the writer (esopt), one repetition.
rule search_heuristics:
    input:
        config=ancient(CONFIGFILE),
        model=AHD_MODEL_DIR,
        code=code("search-heuristics"),
    output:
        run=directory(f"{R}/ahd/{AHD_MODEL}/{{ahd_task}}/{{ahd_search}}_b{{budget}}_{{ahd_variant}}/r{{rep}}"),
    params:
        settings=lambda wc: settings("search-heuristics", task=wc.ahd_task, search=wc.ahd_search, budget=wc.budget,
                                     es=wc.ahd_variant == "esopt"),
        es=lambda wc: AHD_VARIANTS[wc.ahd_variant],
        wildcards=lambda wc: wildcards_json(wc),
    log:
        f"{LOGS}/search_heuristics/{{ahd_task}}_{{ahd_search}}_b{{budget}}_{{ahd_variant}}_r{{rep}}.log",
    threads: config["threads"]
    conda:
        "../../envs/esopt.yaml"
    shell:
        "esopt search-heuristics --config {input.config} --task {wildcards.ahd_task} --search {wildcards.ahd_search} "
        "--budget {wildcards.budget} {params.es} --seed {wildcards.rep} --model {input.model} --out {output.run} "
        '--rule {rule} --wildcards "{params.wildcards}" > {log} 2>&1'


# Does the tiny writer land in the valid rate its config block states for any machine
# (ahd.model.expect, by task)? Measured on its Sample runs without ES at the smallest
# budget, every repetition. Warns loudly when not; never fails the run.
AHD_EXPECT = (AHD.get("model") or {}).get("expect") if AHD_MODEL_BUILT else None
if AHD_EXPECT:

    rule check_ahd_model:
        input:
            config=ancient(CONFIGFILE),  # reruns follow the config sections in params
            runs=[f"{R}/ahd/{AHD_MODEL}/{t}/sample_b{min(b['samples'] for b in AHD['budgets'])}_base/r{r}"
                  for t in AHD_EXPECT for r in AHD["repetitions"]],
            code=code("check-models"),
        output:
            check=f"{R}/checks/{AHD_MODEL}.json",
        params:
            settings=settings("check-models", name=AHD_MODEL),
            name=AHD_MODEL,
            summaries=lambda wc, input: " ".join(f"{r}/result.json" for r in input.runs),
        log:
            f"{LOGS}/check_models/{AHD_MODEL}.log",
        conda:
            "../../envs/esopt.yaml"
        shell:
            "esopt check-models --config {input.config} --name {params.name} --out {output.check} "
            "--rule {rule} {params.summaries} > {log} 2>&1"


# Every matched comparison and the win count, with the figure.
rule report_ahd:
    input:
        runs=ahd_runs(),
        notebook=notebook("ahd"),
        code=code(notebook("ahd")),
    output:
        table=report(f"{R}/tables/ahd.csv", caption="../report/ahd.rst", category="Heuristic design"),
        figure=report(f"{R}/figures/ahd.png", caption="../report/ahd.rst", category="Heuristic design"),
        provenance=report(f"{R}/tables/ahd.provenance.json", caption="../report/provenance.rst",
                          category="Provenance"),
    params:
        nb=papermill_params(runs=lambda i, o: [f"{r}/result.json" for r in i.runs], reference=reference("ahd"),
                            table=lambda i, o: o.table, figure=lambda i, o: o.figure,
                            title=f"{config['name']}: {AHD_MODEL}, heuristic design (test objective, lower is better)"),
    log:
        notebook=f"{R}/notebooks/ahd.ipynb",
        stdout=f"{LOGS}/report_ahd.log",
    conda:
        "../../envs/esopt.yaml"
    shell:
        PAPERMILL
