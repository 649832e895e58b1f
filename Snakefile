# Agentic ESOpt reproduction pipeline. Default: the tiny CPU config.
#   snakemake --cores all                                 (config/tiny.yaml)
#   snakemake --profile profiles/slurm --configfile config/paper.yaml   (GPUs via SLURM)
#   snakemake --report results/report.zip                (figures, captions, provenance)
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/tiny.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/baselines.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/tools.smk"
include: "workflow/rules/web.smk"
include: "workflow/rules/ahd.smk"


rule all:
    default_target: True
    input:
        expand(rules.check_models.output.check, model=[m for m, spec in MODELS.items() if spec.get("expect")]),
        rules.check_tool_model.output if TOOL_EXPECT else [],
        rules.check_web_model.output if WEB_EXPECT else [],
        rules.check_ahd_model.output if AHD_EXPECT else [],
        rules.report_sudoku.output,
        rules.report_methods.output,
        rules.report_verdicts.output,
        rules.report_training_curves.output,
        rules.report_wall_clock.output,
        rules.report_sigma_ablation.output if ES_VARIANTS else [],
        rules.report_population.output if STUDY else [],
        rules.report_memory.output if MEMORY_METHODS else [],
        rules.report_tool_agents.output if TA else [],
        rules.report_webarena.output if WEB else [],
        rules.report_ahd.output if AHD else [],


# A cluster run stops before its first job while something it needs is missing (esopt preflight).
onstart:
    preflight_or_stop(workflow)


# The model checks warn in their logs; say it again where nobody can miss it.
onsuccess:
    from esopt.runs.checks import outside_message

    for _f in sorted(Path(R, "checks").glob("*.json")):
        for _r in json.loads(_f.read_text()).get("rows", []):
            if not _r["within"]:
                print(outside_message(_r, str(_f)), file=sys.stderr)
