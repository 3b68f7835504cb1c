"""Category hierarchies and item names of the iGSM world (our own names, not the official lists).

Four chains of four category levels, as in Physics of LMs Part 2.1 (Ye, Xu, Li, Allen-Zhu,
arXiv 2407.20311, Section 2; official ``data_gen/categ.py`` has the same four chains):

* District -> Supermarket -> Product -> Ingredient
* Zoo -> Enclosure -> Animal -> Bone
* School -> Classroom -> Backpack -> Stationery
* Ecosystem -> Creature -> Organ -> Cell

Every category has 5 sub-pools of 20 item names (100 per category, 1,600 in all). A sub-pool is one
head noun with 20 modifiers ("Maple Borough", "Cedar Borough", ...); a problem draws each layer's
items from one sub-pool. Names are made of capitalised alphabetic words only: no digits, no
``'s``, no ``.``, ``;``, ``=`` or ``,``, and no word of the sentence templates, so that a solution
can be parsed unambiguously and a word-level tokenizer covers every name.
"""

from __future__ import annotations

CHAINS: dict[str, tuple[str, str, str, str]] = {
    "supermarket": ("District", "Supermarket", "Product", "Ingredient"),
    "zoo": ("Zoo", "Enclosure", "Animal", "Bone"),
    "school": ("School", "Classroom", "Backpack", "Stationery"),
    "ecosystem": ("Ecosystem", "Creature", "Organ", "Cell"),
}

# category -> (5 head nouns = 5 sub-pools, 20 modifiers)
_POOLS: dict[str, tuple[str, str]] = {
    "District": ("Borough Quarter Ward Township Precinct",
                 "Maple Cedar Harbor Riverside Granite Willow Summit Meadow Copper Lantern Orchard Falcon Beacon "
                 "Juniper Prairie Canyon Hollow Marble Thistle Aspen"),
    "Supermarket": ("Grocer Mart Foods Pantry Bazaar",
                    "Sunny Golden Thrifty Corner Fresh Value Royal Happy Green Family Urban Village Star Bright "
                    "Harvest Kindly Friendly Neighbor Plenty Lucky"),
    "Product": ("Bread Cheese Juice Soup Cereal",
                "Apple Mango Tomato Onion Garlic Pumpkin Carrot Lemon Cherry Peach Berry Walnut Almond Oat Rye "
                "Barley Potato Melon Plum Pear"),
    "Ingredient": ("Powder Oil Extract Syrup Flakes",
                   "Ginger Olive Sesame Vanilla Cocoa Pepper Saffron Fennel Clove Basil Thyme Mint Paprika Cumin "
                   "Mustard Coconut Hazel Maize Lentil Quinoa"),
    "Zoo": ("Sanctuary Reserve Menagerie Wildpark Gardens",
            "Northern Southern Eastern Western Central Highland Lowland Coastal Island Valley Forest Desert Alpine "
            "Tropical Savanna Lakeside Riverbend Sunset Sunrise Evergreen"),
    "Enclosure": ("Den Pen Aviary Pool Paddock",
                  "Rocky Shady Misty Sandy Mossy Windy Grassy Leafy Stony Muddy Frosty Sunlit Quiet Hidden Upper "
                  "Lower Twin Great Little Old"),
    "Animal": ("Wolf Fox Bear Owl Lizard",
               "Grey Red Black White Brown Spotted Striped Silver Snowy Dusky Pale Tawny Crested Pygmy Giant Swift "
               "Shadow Amber Ivory Rusty"),
    "Bone": ("Femur Rib Skull Vertebra Phalanx",
             "Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Lambda Omega Sigma Tau Rho Psi Chi Phi "
             "Upsilon Omicron"),
    "School": ("Academy Institute College Lyceum Seminary",
               "Oakridge Pinecrest Brookside Hillview Lakeview Fairview Westwood Eastgate Northfield Southbank "
               "Greenfield Redwood Bluebell Silverton Rosewood Elmhurst Ashford Kingsley Stanton Morgan"),
    "Classroom": ("Studio Lab Hall Suite Chamber",
                  "Art Music Science History Poetry Drama Algebra Geometry Biology Chemistry Physics Language "
                  "Reading Writing Design Robotics Debate Theater Dance Geography"),
    "Backpack": ("Rucksack Satchel Knapsack Daypack Bookbag",
                 "Trail Explorer Voyager Nomad Ranger Scout Pioneer Rover Trekker Hiker Wander Venture Compass "
                 "Horizon Journey Drifter Roamer Skipper Glider Sprinter"),
    "Stationery": ("Pencil Eraser Marker Notebook Ruler",
                   "Crimson Azure Emerald Violet Scarlet Indigo Teal Coral Maroon Navy Lime Beige Khaki Magenta "
                   "Cyan Mauve Ochre Sepia Umber Tan"),
    "Ecosystem": ("Wetland Tundra Reef Steppe Rainforest",
                  "Arctic Boreal Sunken Temperate Equatorial Volcanic Glacial Verdant Barren Humid Arid Frozen "
                  "Ancient Endless Silent Stormy Twilight Crystal Murky Windswept"),
    "Creature": ("Beetle Newt Crab Moth Snail",
                 "Cave Marsh Dune Reed Bramble Fern Moss Pebble Root Lichen Thorn Cinder Ember Dew Frost Bog Creek "
                 "Ridge Glade Willowy"),
    "Organ": ("Heart Lung Liver Kidney Brain",
              "Primary Secondary Left Right Inner Outer Anterior Posterior Dorsal Ventral Lateral Medial Minor "
              "Major Proximal Distal Superior Inferior Cranial Caudal"),
    "Cell": ("Neuron Myocyte Platelet Fibroblast Osteocyte",
             "Mature Young Dormant Active Mutant Basal Apical Tiny Round Flat Long Short Branched Smooth Rough Clear "
             "Dense Sparse Faint Dim"),
}

#: category -> 5 sub-pools of 20 item names each.
POOLS: dict[str, tuple[tuple[str, ...], ...]] = {
    cat: tuple(tuple(f"{m} {h}" for m in mods.split()) for h in heads.split())
    for cat, (heads, mods) in _POOLS.items()
}

#: every word that occurs in a category or item name (for the word-level tokenizer).
NAME_WORDS: tuple[str, ...] = tuple(sorted({w for cat, (h, m) in _POOLS.items() for w in (cat + " " + h + " " + m).split()}))


def _check() -> None:
    names = [n for pools in POOLS.values() for pool in pools for n in pool]
    assert len(names) == len(set(names)) == 1600, "item names must be distinct"
    for cat, pools in POOLS.items():
        assert len(pools) == 5 and all(len(p) == 20 for p in pools), cat
    for w in NAME_WORDS:
        assert w.isalpha() and w[0].isupper(), w
    assert not {"The", "How", "Define"} & set(NAME_WORDS)


_check()
