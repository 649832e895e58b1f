"""The seeded content of the local sites: plain Python records, the same for the same seed.

Each site's data is drawn from an rng keyed on (site, seed) (esopt.seeding.derive_seed)
and written to a template SQLite database (esopt.envs.web.sites.db); the task templates
(esopt.envs.web.templates) read the same records to phrase intents and reference
answers, so a task's answer is always what the site shows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from esopt.seeding import derive_seed

TODAY = "2024-06-01"  # the sites' clock: new orders, posts and issues carry this date

# --- shop -------------------------------------------------------------------------

SHOP_CATEGORIES = {  # slug -> (title, nouns)
    "kitchen": ("Kitchen", ("Kettle", "Toaster", "Blender", "Frying Pan", "Knife Set", "Coffee Grinder")),
    "garden": ("Garden", ("Watering Can", "Hose Reel", "Pruning Shears", "Bird Feeder", "Planter", "Rake")),
    "office": ("Office", ("Desk Lamp", "Stapler", "Notebook", "Monitor Stand", "Desk Chair", "Pen Holder")),
    "outdoor": ("Outdoor", ("Tent", "Camping Stove", "Sleeping Bag", "Backpack", "Lantern", "Water Bottle")),
}
SHOP_ADJECTIVES = ("Classic", "Compact", "Deluxe", "Eco", "Pro", "Smart", "Rustic", "Urban", "Nordic", "Travel")
FIRST_NAMES = ("Emma", "Liam", "Olivia", "Noah", "Ava", "Lucas", "Mia", "Ethan", "Sofia", "Mason", "Chloe", "Leo")
LAST_NAMES = ("Lopez", "Smith", "Khan", "Novak", "Turner", "Silva", "Meyer", "Tanaka", "Russo", "Brooks")
REVIEW_TEXTS = ("Works as described.", "Great value for the price.", "Stopped working after a month.",
                "Looks nicer than in the photos.", "Shipping was slow, product is fine.", "Would buy again.")
ORDER_STATUSES = ("complete", "pending", "canceled")

SHOP_CUSTOMER = ("emma.lopez@example.com", "shop123")  # the agent's account (email, password)
SHOP_ADMIN = ("admin", "admin123")  # the admin view's account (username, password)


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    category: str  # slug
    price_cents: int
    stock: int
    rating: int  # 1-5
    description: str


@dataclass(frozen=True)
class Customer:
    id: int
    name: str
    email: str
    password: str


@dataclass(frozen=True)
class Order:
    id: int
    customer_id: int
    date: str
    status: str
    items: tuple[tuple[str, int], ...]  # (sku, qty)


@dataclass(frozen=True)
class Review:
    sku: str
    customer_id: int
    rating: int
    text: str


@dataclass
class ShopData:
    products: list[Product] = field(default_factory=list)
    customers: list[Customer] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)

    def product(self, sku: str) -> Product:
        return next(p for p in self.products if p.sku == sku)

    def order_total(self, order: Order) -> int:
        return sum(self.product(s).price_cents * q for s, q in order.items)


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def _names(rng: random.Random, n: int) -> list[str]:
    pairs = [(first, last) for first in FIRST_NAMES for last in LAST_NAMES if (first, last) != ("Emma", "Lopez")]
    return [f"{first} {last}" for first, last in rng.sample(pairs, n)]


def shop_data(seed: int) -> ShopData:
    rng = random.Random(derive_seed("web-site", "shopping", seed))
    data = ShopData()
    for ci, (slug, (_, nouns)) in enumerate(SHOP_CATEGORIES.items()):
        for ni, noun in enumerate(nouns):
            adj = rng.choice(SHOP_ADJECTIVES)
            name = f"{adj} {noun}"
            cents = rng.randint(5, 199) * 100 + rng.choice((0, 49, 95, 99))
            data.products.append(Product(
                sku=f"{slug[:3].upper()}-{100 + ci * 10 + ni}", name=name, category=slug, price_cents=cents,
                stock=rng.randint(0, 40), rating=rng.randint(1, 5),
                description=f"A {adj.lower()} {noun.lower()} for everyday use."))
    emails = [SHOP_CUSTOMER[0]]
    names = ["Emma Lopez"] + _names(rng, 5)
    for i, name in enumerate(names):
        email = emails[0] if i == 0 else name.lower().replace(" ", ".") + "@example.com"
        password = SHOP_CUSTOMER[1] if i == 0 else f"pw{rng.randint(1000, 9999)}"
        data.customers.append(Customer(id=i + 1, name=name, email=email, password=password))
    oid = 1
    for c in data.customers:
        for _ in range(rng.randint(1, 4)):
            skus = rng.sample([p.sku for p in data.products], rng.randint(1, 3))
            day = rng.randint(1, 28)
            data.orders.append(Order(id=oid, customer_id=c.id, date=f"2024-0{rng.randint(1, 5)}-{day:02d}",
                                     status=rng.choice(ORDER_STATUSES),
                                     items=tuple((s, rng.randint(1, 3)) for s in skus)))
            oid += 1
    for p in data.products:
        for c in rng.sample(data.customers[1:], rng.randint(0, 2)):
            data.reviews.append(Review(sku=p.sku, customer_id=c.id, rating=rng.randint(1, 5),
                                       text=rng.choice(REVIEW_TEXTS)))
    return data


# --- forum ------------------------------------------------------------------------

FORUMS = {  # name -> (description, title patterns)
    "books": ("Readers talking about books.", ("What are you reading this {w}?", "Best {a} novel you read lately",
                                               "Looking for {a} book recommendations", "Is {a} fiction worth it?")),
    "cooking": ("Recipes, kitchens and food.", ("My first {a} bread recipe", "How do you store {a} herbs?",
                                                "Quick {a} dinners for the {w}", "Tips for a {a} soup")),
    "gardening": ("Plants, soil and seasons.", ("My {a} tomatoes are wilting", "Best {a} flowers for shade",
                                                "Compost questions this {w}", "Growing {a} peppers indoors")),
    "movies": ("Films old and new.", ("A {a} film nobody talks about", "Movie night picks for the {w}",
                                      "Most {a} ending of the year", "Rewatching a {a} classic")),
    "technology": ("Gadgets, software and the web.", ("Is a {a} laptop worth it?", "My {a} keyboard build",
                                                      "Backup tips for the {w}", "A {a} home server setup")),
}
FORUM_WORDS = ("week", "month", "summer", "winter", "weekend")
FORUM_ADJECTIVES = ("quiet", "classic", "spicy", "tiny", "strange", "simple", "cozy", "bold", "fresh", "old")
USER_PARTS = (("maple", "quiet", "river", "sunny", "misty", "amber", "cosmic", "lucky"),
              ("fox", "owl", "otter", "heron", "lynx", "badger", "wren", "moth"))
COMMENT_TEXTS = ("Totally agree with this.", "I had the same problem last year.", "Thanks for sharing!",
                 "Could you post a follow-up?", "This changed my mind.", "Not sure I agree, but good points.")

FORUM_USER = ("river_otter", "forum123")  # the agent's account


@dataclass(frozen=True)
class ForumUser:
    id: int
    username: str
    password: str


@dataclass(frozen=True)
class Post:
    id: int
    forum: str
    title: str
    body: str
    author_id: int
    score: int  # votes of other users, before the agent's vote
    date: str


@dataclass(frozen=True)
class Comment:
    id: int
    post_id: int
    author_id: int
    body: str
    date: str


@dataclass
class ForumData:
    users: list[ForumUser] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)

    def user(self, uid: int) -> ForumUser:
        return next(u for u in self.users if u.id == uid)


def forum_data(seed: int) -> ForumData:
    rng = random.Random(derive_seed("web-site", "reddit", seed))
    data = ForumData()
    names = [FORUM_USER[0]] + rng.sample([f"{a}_{b}" for a in USER_PARTS[0] for b in USER_PARTS[1]
                                          if f"{a}_{b}" != FORUM_USER[0]], 7)
    for i, name in enumerate(names):
        data.users.append(ForumUser(id=i + 1, username=name,
                                    password=FORUM_USER[1] if i == 0 else f"pw{rng.randint(1000, 9999)}"))
    titles: set[str] = set()
    pid = cid = 1
    for forum, (_, patterns) in FORUMS.items():
        for pattern in patterns:
            while True:
                title = pattern.format(a=rng.choice(FORUM_ADJECTIVES), w=rng.choice(FORUM_WORDS))
                if title not in titles:
                    break
            titles.add(title)
            date = f"2024-05-{rng.randint(1, 28):02d}"
            data.posts.append(Post(id=pid, forum=forum, title=title, author_id=rng.randint(2, len(names)),
                                   body=f"{title} - what do you all think?", score=rng.randint(-2, 40), date=date))
            for _ in range(rng.randint(0, 4)):
                data.comments.append(Comment(id=cid, post_id=pid, author_id=rng.randint(2, len(names)),
                                             body=rng.choice(COMMENT_TEXTS), date=date))
                cid += 1
            pid += 1
    return data


# --- code host --------------------------------------------------------------------

CODE_USERS = ("sam_dev", "alice", "bob", "carol", "dmitri", "fatima")
REPO_NAMES = ("tinyjson", "pixel-shader", "budget-cli", "weather-bot", "markdown-lint", "chess-engine",
              "photo-sorter", "todo-api")
LANGUAGES = ("Python", "Rust", "Go", "JavaScript", "C")
ISSUE_TITLES = ("Crash on empty input", "Add a dark mode", "Docs: fix typo in README", "Support Windows paths",
                "Slow startup with large files", "Add unit tests for parser", "Wrong exit code on error",
                "Update dependencies", "Add a --verbose flag", "Memory leak in cache", "Improve error messages",
                "Config file is ignored", "Add CI badge", "Unicode names break export", "Timeout is too short")
LABELS = ("bug", "feature", "docs")
MR_TITLES = ("Fix off-by-one in tokenizer", "Refactor config loading", "Add retry logic", "Speed up the main loop",
             "Bump version to 1.2", "Rewrite the CLI parser", "Add Dockerfile")

CODE_USER = ("sam_dev", "code123")  # the agent's account


@dataclass(frozen=True)
class Repo:
    id: int
    owner: str
    name: str
    description: str
    language: str
    stars: int  # stars of other users

    @property
    def path(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class Issue:
    repo_id: int
    iid: int
    title: str
    state: str  # "opened" or "closed"
    label: str
    author: str


@dataclass(frozen=True)
class MergeRequest:
    repo_id: int
    iid: int
    title: str
    state: str  # "opened", "merged" or "closed"
    author: str
    source_branch: str


@dataclass
class CodeData:
    repos: list[Repo] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    merge_requests: list[MergeRequest] = field(default_factory=list)

    def repo(self, rid: int) -> Repo:
        return next(r for r in self.repos if r.id == rid)


def code_data(seed: int) -> CodeData:
    rng = random.Random(derive_seed("web-site", "gitlab", seed))
    data = CodeData()
    owners = CODE_USERS[1:]
    for i, name in enumerate(rng.sample(REPO_NAMES, 6)):
        data.repos.append(Repo(id=i + 1, owner=rng.choice(owners), name=name,
                               description=f"A small {name.replace('-', ' ')} project.",
                               language=rng.choice(LANGUAGES), stars=rng.randint(0, 90)))
    for r in data.repos:
        for iid, title in enumerate(rng.sample(ISSUE_TITLES, rng.randint(3, 7)), start=1):
            data.issues.append(Issue(repo_id=r.id, iid=iid, title=title, state=rng.choice(("opened", "opened", "closed")),
                                     label=rng.choice(LABELS), author=rng.choice(CODE_USERS[1:])))
        for iid, title in enumerate(rng.sample(MR_TITLES, rng.randint(1, 3)), start=1):
            data.merge_requests.append(MergeRequest(
                repo_id=r.id, iid=iid, title=title, state=rng.choice(("opened", "merged", "closed")),
                author=rng.choice(CODE_USERS[1:]), source_branch=title.lower().split()[0] + f"-{iid}"))
    return data
