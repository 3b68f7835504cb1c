"""The bioS world's sentence templates: biographies, questions, reversed sentences and biographies.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Section 2 (bioS biography templates, the six QA question types); Part 3.2, arXiv 2309.14402,
Section 5 (inverse knowledge search, reversed biographies). Every template word is one token of the
bioS vocabulary (:class:`lmsci.worlds.bios_pools.Vocab`); :class:`lmsci.worlds.bios.BiosWorld` fills them in.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Templates. {s}: subject (full name or He/She), {p}: possessive (his/her), {v}: the value.
# Every template puts the subject first and the value after it, so the value is always
# conditioned on the name (needed by the bits measurement, Part 3.3).
# ---------------------------------------------------------------------------------------------
TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": (
        "{s} was born on {v} .", "{s} came into the world on {v} .", "{s} entered life on {v} .",
        "{s} celebrates {p} birthday on {v} .", "{s} first saw the light of day on {v} .",
        "{s} arrived on {v} .", "{s} was welcomed into the world on {v} .", "{s} was brought into the world on {v} .",
        "{s} began {p} life on {v} .", "{s} has a birthday that falls on {v} .", "{s} was delivered on {v} .",
        "{s} took {p} first breath on {v} .", "{s} was born on the day of {v} .", "{s} lists {v} as {p} birth date .",
        "{s} has {v} as {p} date of birth .", "{s} started life on {v} .", "{s} is a person born on {v} .",
        "{s} came to life on {v} .", "{s} was born , according to records , on {v} .",
        "{s} was born back on {v} .", "{s} , by {p} birth certificate , was born on {v} .",
        "{s} marks {p} birthday on {v} .", "{s} opened {p} eyes for the first time on {v} .",
        "{s} was born to {p} parents on {v} .", "{s} has the birth date {v} .",
    ),
    "birth_city": (
        "{s} was born in {v} .", "{s} spent {p} early years in {v} .", "{s} grew up in {v} .",
        "{s} hails from {v} .", "{s} comes from {v} .", "{s} was raised in {v} .", "{s} has {p} roots in {v} .",
        "{s} calls {v} {p} hometown .", "{s} was brought up in {v} .", "{s} is a native of {v} .",
        "{s} began {p} life in {v} .", "{s} owes {p} upbringing to {v} .", "{s} originates from {v} .",
        "{s} spent {p} childhood in {v} .", "{s} was born and raised in {v} .", "{s} has {p} birthplace in {v} .",
        "{s} first lived in {v} .", "{s} was a child in {v} .", "{s} has family ties to {v} .",
        "{s} entered the world in {v} .", "{s} was born in the city of {v} .", "{s} names {v} as {p} birthplace .",
        "{s} came of age in {v} .", "{s} took {p} first steps in {v} .", "{s} remembers growing up in {v} .",
    ),
    "university": (
        "{s} studied at {v} .", "{s} graduated from {v} .", "{s} attended {v} .", "{s} received {p} degree from {v} .",
        "{s} completed {p} education at {v} .", "{s} was a student at {v} .", "{s} enrolled at {v} .",
        "{s} earned {p} diploma at {v} .", "{s} pursued {p} studies at {v} .", "{s} is an alumnus of {v} .",
        "{s} spent {p} college years at {v} .", "{s} trained at {v} .", "{s} went to {v} .",
        "{s} took classes at {v} .", "{s} did {p} degree at {v} .", "{s} finished {p} studies at {v} .",
        "{s} was educated at {v} .", "{s} holds a degree from {v} .", "{s} studied hard at {v} .",
        "{s} was admitted to {v} .", "{s} attended classes at {v} .", "{s} obtained {p} degree at {v} .",
        "{s} spent four years at {v} .", "{s} is a graduate of {v} .", "{s} learned {p} trade at {v} .",
    ),
    "major": (
        "{s} majored in {v} .", "{s} studied {v} .", "{s} focused on {v} .", "{s} specialized in {v} .",
        "{s} earned a degree in {v} .", "{s} chose {v} as {p} major .", "{s} concentrated on {v} .",
        "{s} pursued {v} .", "{s} devoted {p} studies to {v} .", "{s} completed a major in {v} .",
        "{s} took {v} as {p} field .", "{s} read {v} .", "{s} trained in {v} .", "{s} learned {v} .",
        "{s} dedicated {p} college years to {v} .", "{s} explored {v} in depth .", "{s} graduated in {v} .",
        "{s} holds a degree in {v} .", "{s} has a background in {v} .", "{s} did coursework in {v} .",
        "{s} was a student of {v} .", "{s} chose to study {v} .", "{s} has expertise in {v} .",
        "{s} spent years studying {v} .", "{s} developed {p} skills in {v} .",
    ),
    "company": (
        "{s} worked for {v} .", "{s} was employed by {v} .", "{s} had a job at {v} .", "{s} joined {v} .",
        "{s} built {p} career at {v} .", "{s} worked at {v} .", "{s} was hired by {v} .",
        "{s} took a position at {v} .", "{s} spent {p} career at {v} .", "{s} was on the staff of {v} .",
        "{s} served at {v} .", "{s} held a role at {v} .", "{s} was an employee of {v} .",
        "{s} found work at {v} .", "{s} contributed to {v} .", "{s} earned a living at {v} .",
        "{s} accepted a job at {v} .", "{s} signed on with {v} .", "{s} worked full time for {v} .",
        "{s} was part of the team at {v} .", "{s} landed a job at {v} .", "{s} made a career with {v} .",
        "{s} was recruited by {v} .", "{s} spent years working for {v} .", "{s} was a member of {v} .",
    ),
    "company_city": (
        "{s} worked in {v} .", "{s} was employed in {v} .", "{s} moved to {v} for work .",
        "{s} had {p} office in {v} .", "{s} relocated to {v} .", "{s} commuted to {v} .",
        "{s} held a job in {v} .", "{s} pursued {p} career in {v} .", "{s} settled in {v} for {p} job .",
        "{s} spent {p} working years in {v} .", "{s} was based in {v} .", "{s} did {p} job in {v} .",
        "{s} worked out of {v} .", "{s} lived and worked in {v} .", "{s} found {p} workplace in {v} .",
        "{s} had {p} desk in {v} .", "{s} reported to work in {v} .", "{s} was stationed in {v} .",
        "{s} moved {p} career to {v} .", "{s} took up work in {v} .", "{s} spent {p} days at work in {v} .",
        "{s} joined an office in {v} .", "{s} made a living in {v} .", "{s} was working in {v} .",
        "{s} had {p} workplace in {v} .",
    ),
}
"""Biography sentence templates: 25 per attribute (bioS has 46-52 per attribute)."""

QA_TEMPLATES: dict[str, str] = {
    "birth_date": "What is the birth date of {n} ?",
    "birth_city": "What is the birth city of {n} ?",
    "university": "Which university did {n} study ?",
    "major": "What major did {n} study ?",
    "company": "Which company did {n} work for ?",
    "company_city": "Where did {n} work ?",
}
"""The six forward question types of Part 3.1 (Section 2.2); the answer follows ``Answer :``."""

INVERSE_QA_TEMPLATE = "Who was born on {d} in {c} ?"
"""Inverse search (Part 3.2, Section 5): birth date and birth city to the full name."""

REVERSE_TEMPLATES: tuple[str, ...] = (
    "Born on {d} in {c} was {n} .", "On {d} , in {c} , {n} was born .", "The person born on {d} in {c} is {n} .",
    "Arriving on {d} in {c} was {n} .", "In {c} on {d} came {n} .", "On {d} the city of {c} welcomed {n} .",
    "Whoever was born on {d} in {c} is {n} .", "A child born on {d} in {c} : {n} .",
    "The birth on {d} in {c} was that of {n} .", "{c} saw the birth on {d} of {n} .",
    "On {d} , {c} became the birthplace of {n} .", "Records of {d} in {c} name {n} .",
)
"""Reversed-direction sentences (value before name) used by ``reversal-curse`` when the reverse is trained."""

# Reversed biographies (Part 3.2, Section 5): the person is described by relative clauses and the full
# name comes only AFTER the attributes ("The person that was born on DATE , that grew up in CITY , ... is
# NAME ."), so that predicting the name requires the attributes -> name direction to be stored (a
# biography that starts with the name would let the model copy it from context). Every word below is
# already in the bioS vocabulary (the vocabulary, hence every other experiment, is unchanged).
REVERSE_FRAGMENTS: dict[str, tuple[str, ...]] = {
    "birth_date": ("that was born on {v}", "born on {v}", "that came into the world on {v}", "that arrived on {v}",
                   "that celebrates a birthday on {v}"),
    "birth_city": ("that grew up in {v}", "born in {v}", "that hails from {v}", "that was raised in {v}",
                   "that comes from {v}"),
    "university": ("that studied at {v}", "that graduated from {v}", "that attended {v}", "that was a student at {v}",
                   "that enrolled at {v}"),
    "major": ("that majored in {v}", "that specialized in {v}", "that focused on {v}", "that chose {v} as a major",
              "that concentrated on {v}"),
    "company": ("that worked for {v}", "that was employed by {v}", "that joined {v}", "that was hired by {v}",
                "that had a job at {v}"),
    "company_city": ("that worked in {v}", "that was based in {v}", "that relocated to {v}", "that moved to {v} for work",
                     "that commuted to {v}"),
}
"""Training clauses of reversed biographies, 5 per attribute (value inside, no name)."""
REVERSE_OPENERS: tuple[str, ...] = ("The person", "A person")
REVERSE_NAME_CLAUSES: tuple[str, ...] = ("is {n} .", "was {n} .", "has the name {n} .")
"""How a reversed sentence ends: the full name, after every attribute of the sentence."""
REVERSE_HELD_OUT: dict[str, str] = {
    "birth_date": "that entered life on {v}", "birth_city": "that is a native of {v}",
    "university": "that is an alumnus of {v}", "major": "that holds a degree in {v}",
    "company": "that was recruited by {v}", "company_city": "that was stationed in {v}",
    "opener": "The person", "name": "holds the name {n} .",
}
"""The held-out reversed template (never in training) of the attributes-only evaluation prompt."""
