#!/usr/bin/env python3
"""Seeded synthetic corpus for plumb-tiny, its held-out multiple-choice set, and workload prompts.

  python3 tools/train/make_corpus.py --heldout data/mc_heldout.jsonl --prompts data/prompts.jsonl
  python3 tools/train/make_corpus.py --corpus DIR --docs 400000      # training text (GPU machine)

Pure Python (no third-party modules), deterministic for a given seed: the same world, the same
held-out set and the same corpus on any machine. The corpus is written in fixed shards, each from
its own derived seed, so a parallel run writes the same bytes as a serial one.

What the model sees:
  - a fixed random world (people with a city, a favourite colour, a pet and an age), as plain
    facts, short biographies and little stories;
  - arithmetic (sums, differences, products), comparisons and orderings of numbers;
  - multiple-choice questions about all of these (MMLU-Pro-like: question, options A-D, answer),
    in two prompt formats: completion ("...\\nAnswer: B") and ChatML chat ("The answer is (B).").
Held out (never in the training text in any form): 60 addition pairs (a, b); the multiple-choice
form of 90 (person, attribute) pairs, whose plain facts ARE in the training text; and the exact
number tuples of the held-out comparison and ordering questions.
"""

import argparse
import hashlib
import json
import os
import random
import sys

SEED = 6
N_SHARDS = 32

FIRST_NAMES = (
    "Ada Alan Alice Amara Anton Aria Arjun Astrid Bea Bruno Carla Cedric Chloe Dario Dmitri Edith Elif Emil "
    "Enzo Esther Farah Felix Freya Gideon Greta Hana Hugo Ida Igor Imani Ines Ivan Jada Jonas Juno Kai Kamal "
    "Karin Kenji Lara Leo Lina Luca Lukas Maya Milo Mina Nadia Nico Nina Noor Olga Omar Oscar Otto Pablo Petra "
    "Pia Quinn Rafael Rania Reza Rosa Ruben Sami Sara Selma Soren Sofia Tariq Tessa Theo Timo Uma Ursula "
    "Valentin Vera Viktor Wanda Wen Xavier Yara Yusuf Zane Zara Zoe Abel Agnes Anil Bodil Cyrus Dalia Elio "
    "Fiona Gaspar Helga Ilse Joel Kira Lars Mara Nils Orla Priya Rhea Silas Talia Ugo Vida Wolf Yuki Zeno "
    "Adele Basil Clio Dante Ezra Flora Gus Hedda Ivo Jana Kofi Lea Moritz Nell Olaf Pavel Rita Sven Tilda "
    "Uri Vito Willa Yann Zita Boris Celia Dora Emma Finn Gemma Hector Iris Jasper Kaia Liv"
).split()
CITIES = (
    "Amberfield Brightwater Cedarport Dunmore Eastvale Fernhill Glenrock Harborview Ironbridge Juniper "
    "Kingsmoor Lakeshore Millbrook Northgate Oakridge Pinecrest Queensbury Riverton Stonehaven Westwood"
).split()
COLOURS = "red blue green yellow purple orange black white pink brown grey silver".split()
PETS = "cat dog rabbit parrot hamster turtle goldfish horse lizard ferret".split()
ATTRS = ("city", "colour", "pet")
N_PEOPLE = 150


def derive_seed(*parts):
    h = hashlib.sha256(("/".join(str(p) for p in (SEED,) + parts)).encode()).hexdigest()
    return int(h[:16], 16)


# ---------------------------------------------------------------------------------------------
# The world and what is held out
# ---------------------------------------------------------------------------------------------


def make_world():
    rng = random.Random(derive_seed("world"))
    names = sorted(set(FIRST_NAMES))
    rng.shuffle(names)
    people = []
    for name in names[:N_PEOPLE]:
        people.append(
            {
                "name": name,
                "city": rng.choice(CITIES),
                "colour": rng.choice(COLOURS),
                "pet": rng.choice(PETS),
                "age": rng.randint(18, 80),
            }
        )
    return people


def make_holdout(people):
    rng = random.Random(derive_seed("holdout"))
    pairs = set()
    while len(pairs) < 60:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        pairs.add((a, b))
        pairs.add((b, a))  # the commuted sum is held out too
    mc_facts = set()
    while len(mc_facts) < 90:
        mc_facts.add((rng.randrange(len(people)), rng.choice(ATTRS)))
    return {"add_pairs": pairs, "mc_facts": mc_facts}


# ---------------------------------------------------------------------------------------------
# Items
# ---------------------------------------------------------------------------------------------

LETTERS = "ABCDEFGHIJ"
CHAT_SYSTEM = "You are a helpful assistant."
MC_INSTRUCTION = "Answer with the letter of the correct option."


def fact_sentence(rng, p, attr):
    n = p["name"]
    if attr == "city":
        return rng.choice([f"{n} lives in {p['city']}.", f"{n} is from {p['city']}.", f"The home of {n} is {p['city']}."])
    if attr == "colour":
        return rng.choice(
            [f"{n}'s favourite colour is {p['colour']}.", f"The favourite colour of {n} is {p['colour']}.", f"{n} likes {p['colour']} best."]
        )
    if attr == "pet":
        return rng.choice([f"{n} has a pet {p['pet']}.", f"The pet of {n} is a {p['pet']}.", f"{n} owns a {p['pet']}."])
    return rng.choice([f"{n} is {p['age']} years old.", f"The age of {n} is {p['age']}."])


def bio(rng, p):
    parts = [fact_sentence(rng, p, a) for a in ("city", "colour", "pet", "age")]
    rng.shuffle(parts)
    return " ".join(parts)


def story(rng, people):
    a, b = rng.sample(people, 2)
    day = rng.choice(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"])
    templates = [
        f"On {day}, {a['name']} travelled from {a['city']} to {b['city']} to visit {b['name']}. "
        f"{b['name']} showed {a['name']} the {b['pet']}, and they talked about the colour {a['colour']}.",
        f"{a['name']} and {b['name']} met in {a['city']} on {day}. {a['name']} brought a {a['colour']} gift, "
        f"and {b['name']} laughed because {b['name']}'s favourite colour is {b['colour']}.",
        f"Every {day}, {a['name']} walks the {a['pet']} around {a['city']}. Sometimes {b['name']} comes along "
        f"from {b['city']}, and the two friends buy something {b['colour']} at the market.",
    ]
    return rng.choice(templates)


def arithmetic_text(rng, held):
    while True:
        op = rng.choice("+++-*")
        if op == "*":
            a, b = rng.randint(0, 12), rng.randint(0, 12)
            r = a * b
        else:
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            if op == "+" and (a, b) in held["add_pairs"]:
                continue
            if op == "-" and a < b:
                a, b = b, a
            r = a + b if op == "+" else a - b
        break
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    return rng.choice([f"{a} {op} {b} = {r}", f"What is {a} {op} {b}? The answer is {r}.", f"{a} {word} {b} is {r}."])


def fresh_numbers(rng, k, lo, hi, held_sets):
    """k distinct numbers whose set is not one of the held-out sets (held_sets: sorted tuples)."""
    while True:
        xs = rng.sample(range(lo, hi + 1), k)
        if tuple(sorted(xs)) not in held_sets:
            return xs


def comparison_text(rng, held):
    xs = fresh_numbers(rng, 2, 0, 999, held.get("cmp_tuples", set()))
    a, b = xs
    return rng.choice(
        [
            f"Which is larger, {a} or {b}? {max(a, b)}.",
            f"Which is smaller, {a} or {b}? {min(a, b)}.",
            f"{max(a, b)} is greater than {min(a, b)}.",
            f"Sort in ascending order: {', '.join(map(str, sorted(xs, key=lambda v: rng.random())))}. Sorted: {', '.join(map(str, sorted(xs)))}.",
        ]
    )


def ordering_text(rng, held):
    xs = fresh_numbers(rng, rng.randint(3, 5), 0, 99, held.get("ord_tuples", set()))
    order = rng.choice(["ascending", "descending"])
    ys = sorted(xs, reverse=(order == "descending"))
    return f"Sort in {order} order: {', '.join(map(str, xs))}. Sorted: {', '.join(map(str, ys))}."


# Multiple-choice generators: each returns (question, options, answer_index, category, key).


def _options(rng, correct, pool):
    distract = [x for x in dict.fromkeys(pool) if x != correct]
    opts = rng.sample(distract, 3) + [correct]
    rng.shuffle(opts)
    return opts, opts.index(correct)


def mc_world(rng, people, pi, attr):
    p = people[pi]
    q = {
        "city": f"In which city does {p['name']} live?",
        "colour": f"What is the favourite colour of {p['name']}?",
        "pet": f"What kind of pet does {p['name']} have?",
    }[attr]
    pool = {"city": CITIES, "colour": COLOURS, "pet": PETS}[attr]
    opts, idx = _options(rng, p[attr], pool)
    return q, opts, idx, f"world_{attr}", ("fact", pi, attr)


def mc_add(rng, a, b):
    r = a + b
    pool = [r + d for d in (-11, -10, -9, -2, -1, 1, 2, 9, 10, 11) if r + d >= 0]
    opts, idx = _options(rng, r, pool)
    return f"What is {a} + {b}?", [str(o) for o in opts], idx, "arithmetic", ("add", a, b)


def mc_comparison(rng, xs, largest):
    opts = [str(x) for x in xs]
    target = max(xs) if largest else min(xs)
    word = "largest" if largest else "smallest"
    return f"Which of these numbers is the {word}?", opts, xs.index(target), "comparison", ("cmp", tuple(xs))


def mc_ordering(rng, xs):
    correct = sorted(xs)
    cands = [correct]
    while len(cands) < 4:
        perm = xs[:]
        rng.shuffle(perm)
        if perm not in cands:
            cands.append(perm)
    rng.shuffle(cands)
    opts = [", ".join(map(str, c)) for c in cands]
    return (
        f"Which list is in ascending order: the numbers {', '.join(map(str, xs))}?",
        opts,
        cands.index(correct),
        "ordering",
        ("ord", tuple(xs)),
    )


def render_completion(question, options):
    lines = [f"Question: {question}", "Options:"]
    lines += [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join(lines) + "\nAnswer:"


def render_chat_prompt(question, options):
    """The ChatML text of plumb-tiny's template for one user turn, with the generation prompt."""
    user = render_completion(question, options)[: -len("Answer:")] + MC_INSTRUCTION
    return f"<|im_start|>system\n{CHAT_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def mc_chat_messages(question, options):
    user = render_completion(question, options)[: -len("Answer:")] + MC_INSTRUCTION
    return [{"role": "user", "content": user}]


def mc_text(q, opts, idx, rng):
    if rng.random() < 0.5:
        return render_completion(q, opts) + f" {LETTERS[idx]}"
    return render_chat_prompt(q, opts) + f"The answer is ({LETTERS[idx]}).<|im_end|>"


def chat_text(rng, people, held):
    """A short chat exchange that is not multiple choice, so chat generation looks sensible."""
    p = rng.choice(people)
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randint(0, 50), rng.randint(0, 49)
        if (a, b) in held["add_pairs"]:
            a = b = 0
        user, bot = f"What is {a} + {b}?", f"{a} + {b} = {a + b}."
    elif kind == 1:
        user, bot = f"Tell me about {p['name']}.", bio(rng, p)
    else:
        user, bot = "Write a short story.", story(rng, people)
    return f"<|im_start|>system\n{CHAT_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{bot}<|im_end|>"


def training_mc(rng, people, held):
    while True:
        k = rng.randrange(6)
        if k in (0, 5):
            pi, attr = rng.randrange(len(people)), rng.choice(ATTRS)
            if (pi, attr) in held["mc_facts"]:
                continue
            return mc_world(rng, people, pi, attr)
        if k == 1:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            if (a, b) in held["add_pairs"]:
                continue
            return mc_add(rng, a, b)
        if k == 2:
            xs = fresh_numbers(rng, 4, 0, 999, held["cmp_tuples"])
            return mc_comparison(rng, xs, rng.random() < 0.5)
        if k == 3:
            xs = fresh_numbers(rng, 4, 0, 99, held["ord_tuples"])
            return mc_ordering(rng, xs)


def make_doc(rng, people, held):
    items = []
    for _ in range(rng.randint(3, 10)):
        k = rng.random()
        if k < 0.22:
            p = rng.choice(people)
            items.append(fact_sentence(rng, p, rng.choice(ATTRS + ("age",))))
        elif k < 0.32:
            items.append(bio(rng, rng.choice(people)))
        elif k < 0.40:
            items.append(story(rng, people))
        elif k < 0.52:
            items.append(arithmetic_text(rng, held))
        elif k < 0.60:
            items.append(comparison_text(rng, held))
        elif k < 0.66:
            items.append(ordering_text(rng, held))
        elif k < 0.92:
            q, opts, idx, _, _ = training_mc(rng, people, held)
            items.append(mc_text(q, opts, idx, rng))
        else:
            items.append(chat_text(rng, people, held))
    return "\n\n".join(items)


# ---------------------------------------------------------------------------------------------
# Held-out set and prompts
# ---------------------------------------------------------------------------------------------


def make_heldout(people, held):
    rng = random.Random(derive_seed("heldout-items"))
    items = []
    for pi, attr in sorted(held["mc_facts"]):
        items.append(mc_world(rng, people, pi, attr))
    add = sorted(held["add_pairs"])
    rng.shuffle(add)
    for a, b in add[:40]:
        items.append(mc_add(rng, a, b))
    cmp_tuples, ord_tuples = set(), set()
    for i in range(40):
        xs = rng.sample(range(0, 1000), 4)
        cmp_tuples.add(tuple(sorted(xs)))
        items.append(mc_comparison(rng, xs, i % 2 == 0))
    for _ in range(30):
        xs = rng.sample(range(0, 100), 4)
        ord_tuples.add(tuple(sorted(xs)))
        items.append(mc_ordering(rng, xs))
    held["cmp_tuples"], held["ord_tuples"] = cmp_tuples, ord_tuples
    # Balance the answer letters exactly (a constant guess scores 25%): re-place the correct option.
    out = []
    letters = [i % 4 for i in range(len(items))]
    rng.shuffle(letters)
    for (q, opts, idx, cat, _), want in zip(items, letters):
        opts = list(opts)
        correct = opts.pop(idx)
        opts.insert(want, correct)
        out.append((q, opts, want, cat))
    order = list(range(len(out)))
    rng.shuffle(order)
    rows = []
    for n, i in enumerate(order):
        q, opts, idx, cat = out[i]
        rows.append(
            {
                "question_id": n,
                "question": q,
                "options": opts,
                "answer": LETTERS[idx],
                "answer_index": idx,
                "category": cat,
                "src": "plumb-tiny-world/heldout",
            }
        )
    return rows


def make_prompts(people, held, n=300):
    rng = random.Random(derive_seed("prompts"))
    rows = []
    for i in range(n):
        k = i % 6
        if k == 0:
            p = rng.choice(people)
            rows.append({"prompt": f"{p['name']} lives in", "max_tokens": 16})
        elif k == 1:
            rows.append({"prompt": story(rng, people).split(". ")[0] + ".", "max_tokens": 64})
        elif k == 2:
            rows.append({"prompt": f"What is {rng.randint(0, 99)} + {rng.randint(0, 99)}? The answer is", "max_tokens": 8})
        elif k == 3:
            q, opts, _, _, _ = training_mc(rng, people, held)
            rows.append({"prompt": render_completion(q, opts), "max_tokens": 4})
        elif k == 4:
            rows.append({"messages": [{"role": "user", "content": f"Tell me about {rng.choice(people)['name']}."}], "max_tokens": 64})
        else:
            rows.append({"messages": [{"role": "user", "content": "Write a short story."}], "max_tokens": 128})
    return rows


def build():
    people = make_world()
    held = make_holdout(people)
    heldout = make_heldout(people, held)  # also fills held["cmp_tuples"], held["ord_tuples"]
    return people, held, heldout


def write_shard(args):
    """Writes one shard; returns the number of held-out leaks found in it (must be 0)."""
    out_dir, shard, n_docs = args
    people, held, heldout = build()
    rng = random.Random(derive_seed("corpus", shard))
    path = os.path.join(out_dir, f"shard-{shard:02d}.jsonl")
    with open(path, "w") as f:
        for _ in range(n_docs):
            f.write(json.dumps({"text": make_doc(rng, people, held)}, ensure_ascii=False) + "\n")
    return check_no_leak([path], heldout, held)


def check_no_leak(paths, heldout, held):
    """Counts held-out material in the corpus: world/ordering questions, comparison option blocks,
    and any held-out addition pair (as "a + b" or "a plus b"). Must be 0."""
    import re

    needles = set()
    for r in heldout:
        if r["category"] == "comparison":
            needles.add("\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(r["options"])))
        elif r["category"] != "arithmetic":
            needles.add(r["question"])
    add_re = re.compile(r"(?<!\d)(\d+) (?:\+|plus) (\d+)(?!\d)")
    found = 0
    for path in paths:
        with open(path) as f:
            for line in f:
                t = json.loads(line)["text"]
                found += sum(1 for n in needles if n in t)
                found += sum(1 for a, b in add_re.findall(t) if (int(a), int(b)) in held["add_pairs"])
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout")
    ap.add_argument("--prompts")
    ap.add_argument("--world", help="write the world (people and attributes) as JSON")
    ap.add_argument("--corpus", help="directory for the training shards")
    ap.add_argument("--docs", type=int, default=320000, help="documents in total, over all shards")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    people, held, heldout = build()
    if args.heldout:
        with open(args.heldout, "w") as f:
            for r in heldout:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if args.prompts:
        with open(args.prompts, "w") as f:
            for r in make_prompts(people, held):
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if args.world:
        with open(args.world, "w") as f:
            json.dump(people, f, indent=1)
    if args.corpus:
        os.makedirs(args.corpus, exist_ok=True)
        per = args.docs // N_SHARDS
        work = [(args.corpus, s, per) for s in range(N_SHARDS)]
        if args.jobs > 1:
            from multiprocessing import Pool

            with Pool(min(args.jobs, N_SHARDS)) as pool:
                leaks = sum(pool.map(write_shard, work))
        else:
            leaks = sum(write_shard(w) for w in work)
        print(f"corpus: {per * N_SHARDS} documents in {N_SHARDS} shards; held-out leaks: {leaks}")
        if leaks:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
