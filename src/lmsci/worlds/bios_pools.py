"""The bioS world's constants: attribute value pools and the word vocabulary.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction",
arXiv 2309.14316, Section 2 (bioS). Pool sizes follow the official generator ``Capo-bioS-bioR.py``
(facebookresearch/PhysicsLM4): first / middle / last names 400 / 400 / 1000, birth dates
12 months x 28 days x 200 years, 200 birth cities, 300 universities, 100 majors, 263 companies,
and the employer city determined by the employer.

Pools are built procedurally (:func:`build_pools`) from a fixed seed (:data:`POOL_SEED`) as products of
small token inventories, so they are world constants (the same for every N and every experiment seed) and the
word-level :class:`Vocab` stays small (about 500 tokens, independent of N); the table of value tokens per
attribute is in :mod:`lmsci.worlds.bios`, whose :class:`~lmsci.worlds.bios.BiosWorld` draws its people from
these pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POOL_SEED = 20230925

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
STATES = ("NJ", "CA", "NY", "TX", "MA", "WA", "IL", "OR", "FL", "CO")
CITY_STEMS = ("Ash", "Oak", "Maple", "River", "Stone", "Green", "Fair", "Clear", "Spring", "Elm", "Cedar",
              "Mill", "Brook", "Lake", "Pine", "Rock", "Wild", "Silver", "Glen", "North")
CITY_SUFFIXES = ("ford", "ville", "ton", "burg", "field", "port", "dale", "wood", "ham", "view")
UNIV_KINDS = ("University", "College", "Institute", "Polytechnic", "Academy", "Tech", "Conservatory",
              "School", "Seminary", "Lyceum")
MAJOR_MODIFIERS = ("Applied", "Theoretical", "Computational", "Environmental", "Molecular", "Quantitative",
                   "Experimental", "Digital", "Clinical", "Industrial")
MAJOR_FIELDS = ("Physics", "Biology", "Chemistry", "Economics", "Linguistics", "Engineering", "Mathematics",
                "Psychology", "Design", "Statistics")
COMPANY_KINDS = ("Systems", "Labs", "Industries", "Group", "Dynamics", "Networks", "Foods", "Motors", "Partners")
N_YEARS, YEAR0, N_DAYS = 200, 1900, 28


# ---------------------------------------------------------------------------------------------
# Pools
# ---------------------------------------------------------------------------------------------
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
           "cl", "dr", "fl", "gr", "kr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "nd", "rk", "x", "ld", "sh")


def _syllables(rng: np.random.Generator, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        s = _ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))] + _CODAS[rng.integers(len(_CODAS))]
        if s not in taken and len(s) >= 2:
            taken.add(s)
            out.append(s)
    return out


@dataclass(frozen=True)
class Pools:
    """The attribute pools of bioS, built procedurally from :data:`POOL_SEED`.

    Attributes:
        first1, first2, middle1, middle2, last1, last2: name syllable inventories (a name is
            ``X1@@ X2``; first 20 x 20, middle 20 x 20, last 40 x 25).
        cities: 200 (stem, suffix, state) triples.
        universities: 300 (stem, kind) pairs.
        majors: 100 (modifier, field) pairs.
        companies: 263 (stem, kind) pairs.
        company_city: the headquarters city (index into ``cities``) of each company.
    """

    first1: tuple[str, ...]
    first2: tuple[str, ...]
    middle1: tuple[str, ...]
    middle2: tuple[str, ...]
    last1: tuple[str, ...]
    last2: tuple[str, ...]
    cities: tuple[tuple[str, str, str], ...]
    universities: tuple[tuple[str, str], ...]
    majors: tuple[tuple[str, str], ...]
    companies: tuple[tuple[str, str], ...]
    company_city: tuple[int, ...]

    @property
    def sizes(self) -> dict[str, int]:
        """Pool sizes: names, attributes, and ``n0`` (the number of possible full names)."""
        return {"first_name": len(self.first1) * len(self.first2), "middle_name": len(self.middle1) * len(self.middle2),
                "last_name": len(self.last1) * len(self.last2), "n0": self.n0,
                "birth_date": 12 * N_DAYS * N_YEARS, "birth_city": len(self.cities),
                "university": len(self.universities), "major": len(self.majors), "company": len(self.companies),
                "company_city": 1}

    @property
    def n0(self) -> int:
        """Number of possible full names, 400 * 400 * 1000 = 1.6e8."""
        return (len(self.first1) * len(self.first2) * len(self.middle1) * len(self.middle2)
                * len(self.last1) * len(self.last2))


def build_pools(seed: int = POOL_SEED) -> Pools:
    """Build the bioS pools procedurally (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    cap = lambda xs: tuple(x.capitalize() for x in xs)  # noqa: E731
    first1, middle1, last1 = cap(_syllables(rng, 20, taken)), cap(_syllables(rng, 20, taken)), cap(_syllables(rng, 40, taken))
    first2, middle2, last2 = (tuple(_syllables(rng, 20, taken)), tuple(_syllables(rng, 20, taken)),
                              tuple(_syllables(rng, 25, taken)))
    states = rng.integers(len(STATES), size=len(CITY_STEMS) * len(CITY_SUFFIXES))
    cities = tuple((a, b, STATES[states[i]]) for i, (a, b) in
                   enumerate((a, b) for a in CITY_STEMS for b in CITY_SUFFIXES))
    ustems = [s.capitalize() + t for s, t in zip(_syllables(rng, 30, taken), _syllables(rng, 30, taken))]
    universities = tuple((u, k) for u in ustems for k in UNIV_KINDS)
    majors = tuple((m, f) for m in MAJOR_MODIFIERS for f in MAJOR_FIELDS)
    cstems = [s.capitalize() + t for s, t in zip(_syllables(rng, 30, taken), _syllables(rng, 30, taken))]
    allc = [(c, k) for c in cstems for k in COMPANY_KINDS]
    keep = sorted(rng.permutation(len(allc))[:263])
    companies = tuple(allc[i] for i in keep)
    company_city = tuple(int(x) for x in rng.integers(len(cities), size=len(companies)))
    return Pools(first1, first2, middle1, middle2, last1, last2, cities, universities, majors, companies, company_city)


# ---------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------
class Vocab:
    """Word-level vocabulary of the bios world: template words, value pieces, specials.

    ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2; the rest sorted, so ids are world constants.
    """

    def __init__(self, words: set[str]):
        self.itos = [PAD, BOS, EOS] + sorted(words - {PAD, BOS, EOS})
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: list[str]) -> list[int]:
        """Token ids of pre-split words. Raises DataError on a word outside the vocabulary."""
        try:
            return [self.stoi[w] for w in words]
        except KeyError as e:
            from lmsci.errors import DataError

            raise DataError(f"word {e.args[0]!r} is not in the bios vocabulary") from None

    def decode(self, ids) -> str:
        """Text of token ids; ``X@@`` glues to the following token."""
        return " ".join(self.itos[int(i)] for i in ids).replace("@@ ", "")

