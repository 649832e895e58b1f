"""The content of synthetic forms, receipts and small tables: drawing items and questions.

A document is drawn by esopt.envs.docvqa.render; here it is only its items (text at a
position, horizontal rules) and candidate questions whose answers are printed in it.
Train/test split by the hash of its canonical content (`split_of`, `_doc_key`).
"""

from __future__ import annotations

import json
import random

from esopt.io import sha256_text

WIDTH, HEIGHT = 600, 400
MARGIN, LINE_PITCH = 28, 40
DOC_TYPES = ("form", "receipt", "table")

FIRST_NAMES = ("Maria", "James", "Aisha", "Peter", "Linda", "Omar", "Sofia", "Daniel", "Grace", "Victor",
               "Helen", "Marcus", "Nina", "Robert", "Yuki", "Carlos", "Emma", "Samuel", "Priya", "Thomas")
LAST_NAMES = ("Lopez", "Becker", "Khan", "Novak", "Turner", "Silva", "Morgan", "Fischer", "Okafor", "Russo",
              "Dubois", "Tanaka", "Walsh", "Meyer", "Petrov", "Hughes", "Garcia", "Nguyen", "Brooks", "Santos")
CITIES = ("Springfield", "Riverton", "Lakeview", "Fairmont", "Brookfield", "Greenville", "Westport",
          "Ashland", "Milford", "Clayton", "Kingston", "Oakridge", "Hillsboro", "Marston")
DEPARTMENTS = ("Sales", "Finance", "Research", "Logistics", "Marketing", "Support", "Legal", "Purchasing")
FORM_TITLES = ("REGISTRATION FORM", "APPLICATION FORM", "CUSTOMER DETAILS", "ORDER FORM", "INVOICE")
STORES = ("GREEN LEAF MARKET", "CORNER CAFE", "CITY HARDWARE", "BLUE OCEAN DELI", "SUNRISE BAKERY",
          "PARK STREET BOOKS", "METRO PHARMACY", "HARBOR GROCERY")
ITEMS = ("Coffee beans", "Green tea", "Bread loaf", "Olive oil", "Notebook", "Batteries", "Light bulb",
         "Orange juice", "Dish soap", "Paper towels", "Chocolate bar", "Apples", "Milk", "Cheese", "Pasta",
         "Shampoo", "Toothpaste", "Candles", "Rice", "Honey")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
# (title, corner label, column labels, row labels, question template, value range). Short column
# labels keep the header's words apart; values have 3+ digits (OCR misreads lone 2-digit cells).
TABLES = (
    ("Quarterly Sales (units)", "Region", ("Q1", "Q2", "Q3"), ("North", "South", "East", "West", "Central"),
     "How many units did {row} sell in {col}?", (100, 999)),
    ("Monthly Visitors", "Branch", ("Jan", "Feb", "Mar"), ("Downtown", "Airport", "Harbor", "Uptown", "Mall"),
     "How many visitors did {row} have in {col}?", (100, 9999)),
    ("Annual Budget (USD)", "Team", ("2021", "2022", "2023"), ("Design", "Support", "Sales", "Legal", "Research"),
     "What was the budget of {row} in {col}?", (1000, 9999)),
)


def split_of(doc_key: str) -> str:
    """The split of a document, by the hash of its canonical content (`_doc_key`)."""
    return "test" if int(sha256_text(doc_key)[:8], 16) % 5 == 0 else "train"


def _date(rng: random.Random) -> str:
    y, m, d = rng.randint(2015, 2024), rng.randint(1, 12), rng.randint(1, 28)
    style = rng.randrange(3)
    if style == 0:
        return f"{y}-{m:02d}-{d:02d}"
    if style == 1:  # full month names: "12 Oct 2023" often comes back as "12 0ct 2023"
        return f"{d} {MONTHS[m - 1]} {y}"
    return f"{m:02d}/{d:02d}/{y}"


def _money(cents: int) -> str:
    return f"{cents // 100:,}.{cents % 100:02d}"


# A document is a list of drawing items (dicts) plus candidate questions:
#   {"text": str, "x": int, "y": int, "bold": bool, "align": "left" | "right"}  (x: right edge for "right")
#   {"rule": [x0, y, x1]}   a horizontal line
# and [(question, (answers...))].


def _form(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    title = rng.choice(FORM_TITLES)
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    amount = _money(rng.randint(5_000, 500_000))
    date = _date(rng)
    fields = {  # label: (value, question, answers)
        "Name:": (name, "What is the name on the form?", (name,)),
        "Date:": (date, "What is the date on the form?", (date,)),
        "Invoice No:": (f"INV-{rng.randint(1000, 9999)}", "What is the invoice number?", None),
        "Account No:": (str(rng.randint(10_000_000, 99_999_999)), "What is the account number?", None),
        "Phone:": (f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}", "What is the phone number?", None),
        "City:": (rng.choice(CITIES), "Which city is given on the form?", None),
        "Department:": (rng.choice(DEPARTMENTS), "Which department is named on the form?", None),
        "Amount Due:": (f"${amount}", "What is the amount due?", (f"${amount}", amount)),
    }
    labels = ["Name:", "Date:"] + rng.sample([k for k in fields if k not in ("Name:", "Date:")], 4)
    items: list[dict] = [{"text": title, "x": MARGIN, "y": 18, "bold": True, "align": "left"}]
    questions = []
    for i, label in enumerate(labels):
        value, question, answers = fields[label]
        y = 18 + LINE_PITCH * (i + 1) + 12
        items.append({"text": label, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        items.append({"text": value, "x": 250, "y": y, "bold": False, "align": "left"})
        questions.append((question, answers or (value,)))
    return items, questions


def _receipt(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    store = rng.choice(STORES)
    date = _date(rng)
    names = rng.sample(ITEMS, rng.randint(3, 5))
    cents = rng.sample(range(99, 5_000), len(names))
    right = WIDTH - MARGIN
    items: list[dict] = [{"text": store, "x": MARGIN, "y": 18, "bold": True, "align": "left"},
                         {"text": f"Date: {date}", "x": MARGIN, "y": 18 + LINE_PITCH, "bold": False, "align": "left"}]
    questions = [("What is the name of the store?", (store,)), ("What is the date on the receipt?", (date,))]
    y = 18 + 2 * LINE_PITCH + 8
    for name, c in zip(names, cents):
        items.append({"text": name, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        items.append({"text": _money(c), "x": right, "y": y, "bold": False, "align": "right"})
        questions.append((f"How much did the {name.lower()} cost?", (_money(c),)))
        y += LINE_PITCH
    items.append({"rule": [MARGIN, y + 2, right]})
    total = _money(sum(cents))
    items.append({"text": "TOTAL", "x": MARGIN, "y": y + 12, "bold": True, "align": "left"})
    items.append({"text": total, "x": right, "y": y + 12, "bold": False, "align": "right"})
    questions += [("What is the total amount?", (total,))] * 2  # the total is asked twice as often
    return items, questions


def _table(rng: random.Random) -> tuple[list[dict], list[tuple[str, tuple[str, ...]]]]:
    title, corner, all_cols, all_rows, template, (lo, hi) = rng.choice(TABLES)
    cols = list(all_cols)
    rows = rng.sample(all_rows, 4)
    values = rng.sample(range(lo, hi + 1), len(rows) * len(cols))
    col_x = (320, 450, WIDTH - MARGIN)  # right edges of the number columns
    items: list[dict] = [{"text": title, "x": MARGIN, "y": 18, "bold": True, "align": "left"}]
    y = 18 + LINE_PITCH + 12
    items.append({"text": corner, "x": MARGIN, "y": y, "bold": True, "align": "left"})
    for c, x in zip(cols, col_x):
        items.append({"text": c, "x": x, "y": y, "bold": True, "align": "right"})
    items.append({"rule": [MARGIN, y + LINE_PITCH - 6, WIDTH - MARGIN]})
    questions = []
    for r, row in enumerate(rows):
        y += LINE_PITCH
        items.append({"text": row, "x": MARGIN, "y": y, "bold": False, "align": "left"})
        for k, (c, x) in enumerate(zip(cols, col_x)):
            v = str(values[r * len(cols) + k])
            items.append({"text": v, "x": x, "y": y, "bold": False, "align": "right"})
            questions.append((template.format(row=row, col=c), (v,)))
    return items, questions


_MAKERS = {"form": _form, "receipt": _receipt, "table": _table}


def _doc_key(doc_type: str, items: list[dict]) -> str:
    return json.dumps({"doc_type": doc_type, "items": items}, sort_keys=True, separators=(",", ":"))
