"""clawgym.synth: personas, skills, taxonomy, procedural task families, gates, dedupe, split.

Entry points:
    expand_personas()                               -> list[Persona]       (clawgym.synth.personas)
    load_skills(dirs=None)                          -> (skills, errors)    (clawgym.synth.skills)
    all_families() / generate_procedural(n, seed)   -> families / tasks    (clawgym.synth.families)
    validate_many(tasks, factory) / validate_task    -> TaskValidation     (clawgym.synth.gates; variants from
                                                                           clawgym.synth.mutations, in-sandbox
                                                                           programs in clawgym.sandbox.guest.synth)
    dedupe(tasks) / split_by_family(tasks)                                (clawgym.synth.dedupe, MiniLM: .embed)
    synthesize(n, seed, factory, ...)               -> SynthResult         (clawgym.synth.pipeline)
"""
