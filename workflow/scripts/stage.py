# Every rule's script. The rule names its library function in `params.stage`; the job's named
# inputs, outputs, params and wildcards are bound to the function's parameters by name where it
# runs (ethosweep.runtime.jobs.run_rule, ethosweep.runtime.binding).
from ethosweep.runtime.jobs import run_rule

run_rule(snakemake)
