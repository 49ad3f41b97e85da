"""The hook's stages: each adapts its input into a request and a target, runs the pipeline
and hands the plan to the executor (prestart) or renders it for the runtime (precreate), or
carries out a CDI spec's recorded steps (cdihook)."""
