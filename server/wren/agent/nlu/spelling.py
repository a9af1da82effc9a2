"""British and US spellings folded to one form, and contractions expanded.

The canonical form is British ("colour", "metre", "grey", "centre", "favourite", "-ise"), because the
rest of the code already says "colour". Only listed words are folded: a blanket "-ize" -> "-ise"
rule would turn "size" into "sise", and "-er" -> "-re" would turn "water" into "watre".
"""

from __future__ import annotations

# (US stem, British stem, endings the stem takes). Each ending is tried on both stems.
_STEMS: list[tuple[str, str, tuple[str, ...]]] = [
    ("color", "colour", ("", "s", "ed", "ing", "ful", "less")),
    ("flavor", "flavour", ("", "s", "ed")),
    ("favor", "favour", ("", "s", "ite", "ites", "ed")),
    ("honor", "honour", ("", "s", "ed")),
    ("humor", "humour", ("",)),
    ("labor", "labour", ("", "s")),
    ("neighbor", "neighbour", ("", "s", "hood")),
    ("behavior", "behaviour", ("", "s")),
    ("harbor", "harbour", ("", "s")),
    ("rumor", "rumour", ("", "s")),
    ("meter", "metre", ("", "s")),
    ("kilometer", "kilometre", ("", "s")),
    ("centimeter", "centimetre", ("", "s")),
    ("millimeter", "millimetre", ("", "s")),
    ("liter", "litre", ("", "s")),
    ("milliliter", "millilitre", ("", "s")),
    ("center", "centre", ("", "s", "d")),
    ("theater", "theatre", ("", "s")),
    ("fiber", "fibre", ("", "s")),
    ("gray", "grey", ("", "s", "ish")),
    ("catalog", "catalogue", ("", "s")),
    ("dialog", "dialogue", ("", "s")),
    ("program", "programme", ("s",)),  # "program" (software) is the same in both; only the plural form
    ("aluminum", "aluminium", ("",)),
    ("pajama", "pyjama", ("s",)),
    ("mold", "mould", ("", "s", "y")),
    ("cozy", "cosy", ("",)),
]
# -ize verbs written -ise in British English (only these: see the module docstring).
_ISE_STEMS = [
    "recogn", "organ", "minim", "maxim", "optim", "custom", "personal", "synchron", "priorit", "real",
    "apolog", "author", "categor", "standard", "normal", "initial", "serial", "visual", "memor", "summar",
    "emphas", "final", "util", "stabil", "equal", "local", "central", "special", "critic", "familiar",
]
_ISE_ENDINGS = [("ize", "ise"), ("izes", "ises"), ("ized", "ised"), ("izing", "ising"),
                ("ization", "isation"), ("izations", "isations"), ("izer", "iser")]


def _build_spellings() -> dict[str, str]:
    table: dict[str, str] = {}
    for us, uk, endings in _STEMS:
        for ending in endings:
            if us + ending != uk + ending:
                table[us + ending] = uk + ending
    for stem in _ISE_STEMS:
        for us_end, uk_end in _ISE_ENDINGS:
            table[stem + us_end] = stem + uk_end
    table["favorite"], table["favorites"] = "favourite", "favourites"
    return {us: uk for us, uk in table.items() if us != uk}


SPELLINGS = _build_spellings()

# Contractions with a fixed expansion (checked before the generic suffix rules).
_FIXED = {
    "won't": "will not", "can't": "can not", "cannot": "can not", "shan't": "shall not",
    "ain't": "is not", "let's": "let us", "o'clock": "oclock", "y'all": "you all", "ma'am": "madam",
    # Recognisers and people typing on a phone often drop the apostrophe.
    "whats": "what is", "dont": "do not", "doesnt": "does not", "didnt": "did not", "isnt": "is not",
    "arent": "are not", "wasnt": "was not", "werent": "were not", "cant": "can not",
    "couldnt": "could not", "wouldnt": "would not", "shouldnt": "should not", "hasnt": "has not",
    "havent": "have not", "im": "i am", "ive": "i have", "youre": "you are", "theyre": "they are",
    "thats": "that is", "theres": "there is", "whos": "who is", "hows": "how is", "wheres": "where is",
}
# Words whose "'s" means "is"; on any other word it is a possessive and is dropped ("today's").
_S_IS = {
    "what", "it", "that", "there", "here", "who", "where", "how", "when", "why", "he", "she", "this",
    "name", "everything", "nothing", "something", "someone", "everyone", "time", "date", "day",
    "volume", "brightness", "weather",
}
_SUFFIXES = (("n't", " not"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"), ("'m", " am"),
             ("'d", " would"))


def expand_contraction(word: str) -> str:
    """ "what's" -> "what is", "don't" -> "do not", "today's" -> "today", "o'clock" -> "oclock"."""
    fixed = _FIXED.get(word)
    if fixed is not None:
        return fixed
    if "'" not in word:
        return word
    for suffix, expansion in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix):
            return word[: -len(suffix)] + expansion
    if word.endswith("'s"):
        stem = word[:-2]
        return f"{stem} is" if stem in _S_IS else stem
    return word.replace("'", "")


def fold_spelling(word: str) -> str:
    return SPELLINGS.get(word, word)
