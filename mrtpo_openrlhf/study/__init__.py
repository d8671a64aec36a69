"""The study: does MRTPO learn faster than GDPO and GRPO, and does it localize as the paper says?

``python -m mrtpo_openrlhf.study probe|run|report`` (see ``__main__``): ``probe`` measures what the base model can
learn on a task, ``run`` trains every (arm, seed) of a config through the real OpenRLHF path (resumable), ``report``
turns the runs' metrics into a markdown report with plots and paired comparisons.
"""
