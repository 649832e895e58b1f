"""The shop (WebArena's "shopping" and, under /admin, "shopping_admin"): catalogue,
search, cart, orders, customer login, and an admin view with its own login.

Customer pages: / (categories, search), /category/<slug>, /search?q=, /product/<sku>
(add to cart), /cart (remove, place order), /orders, /orders/<id>, /login, /logout.
Admin pages (admin login): /admin, /admin/orders, /admin/customers, /admin/customers/<id>,
/admin/products, /admin/products/<sku> (edit price and stock).
"""

from __future__ import annotations

from esopt.envs.web.deps import require_flask
from esopt.envs.web.sites.common import db, make_app, requires_login, today
from esopt.envs.web.sites.data import money

NAV = """{% block nav %}<a href="{{ url_for('home') }}">Home</a>
<a href="{{ url_for('cart') }}">Cart</a><a href="{{ url_for('orders') }}">My orders</a>
{% if session.get('customer_id') %}<span>Signed in as {{ session.get('customer_name') }}</span>
<a href="{{ url_for('logout') }}">Log out</a>{% else %}<a href="{{ url_for('login') }}">Log in</a>{% endif %}
<form role="search" action="{{ url_for('search') }}" method="get"><input name="q" aria-label="Search products"
 placeholder="Search products" value="{{ q or '' }}"><button type="submit">Search</button></form>{% endblock %}"""

ADMIN_NAV = """{% block nav %}<a href="{{ url_for('admin_home') }}">Dashboard</a>
<a href="{{ url_for('admin_orders') }}">Orders</a><a href="{{ url_for('admin_customers') }}">Customers</a>
<a href="{{ url_for('admin_products') }}">Products</a>
{% if session.get('admin') %}<a href="{{ url_for('admin_logout') }}">Log out</a>{% endif %}{% endblock %}"""

PRODUCT_TABLE = """<table id="products"><thead><tr><th>Product</th><th>Price</th></tr></thead><tbody>
{% for p in products %}<tr><td><a href="{{ url_for('product', sku=p.sku) }}">{{ p.name }}</a></td>
<td>{{ money(p.price_cents) }}</td></tr>{% else %}<tr><td colspan="2">No products found.</td></tr>{% endfor %}
</tbody></table>"""

TEMPLATES = {
    "home.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}<h2>Categories</h2><ul>
{% for c in categories %}<li><a href="{{ url_for('category', slug=c.slug) }}">{{ c.title }}</a></li>{% endfor %}
</ul>{% endblock %}""",
    "list.html": "{% extends 'layout.html' %}" + NAV + "{% block main %}" + PRODUCT_TABLE + "{% endblock %}",
    "product.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<p>Price: <span id="price">{{ money(p.price_cents) }}</span></p><p>SKU: {{ p.sku }}</p>
<p>In stock: {{ p.stock }}</p><p>Rating: {{ p.rating }} of 5</p><p>{{ p.description }}</p>
<form method="post" action="{{ url_for('cart_add') }}"><input type="hidden" name="sku" value="{{ p.sku }}">
<label>Quantity <input name="qty" type="number" min="1" max="99" value="1"></label>
<button type="submit">Add to cart</button></form>
<h2>Reviews</h2>{% for r in reviews %}<p class="review">{{ r.name }} ({{ r.rating }}/5): {{ r.text }}</p>
{% else %}<p>No reviews yet.</p>{% endfor %}{% endblock %}""",
    "cart.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<table id="cart"><thead><tr><th>Product</th><th>Quantity</th><th>Price</th><th></th></tr></thead><tbody>
{% for i in items %}<tr data-sku="{{ i.sku }}"><td>{{ i.name }}</td><td class="qty">{{ i.qty }}</td>
<td>{{ money(i.price_cents * i.qty) }}</td><td><form method="post" action="{{ url_for('cart_remove') }}">
<input type="hidden" name="sku" value="{{ i.sku }}"><button type="submit">Remove {{ i.name }}</button></form></td></tr>
{% else %}<tr><td colspan="4">Your cart is empty.</td></tr>{% endfor %}</tbody></table>
<p>Total: <span id="cart-total">{{ money(total) }}</span></p>
{% if items %}<form method="post" action="{{ url_for('checkout') }}"><button type="submit">Place order</button></form>{% endif %}
{% endblock %}""",
    "orders.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<table id="orders"><thead><tr><th>Order</th><th>Date</th><th>Status</th><th>Total</th></tr></thead><tbody>
{% for o in orders %}<tr><td><a href="{{ url_for('order', oid=o.id) }}">Order #{{ o.id }}</a></td><td>{{ o.date }}</td>
<td>{{ o.status }}</td><td>{{ money(o.total) }}</td></tr>{% else %}<tr><td colspan="4">No orders.</td></tr>{% endfor %}
</tbody></table>{% endblock %}""",
    "order.html": "{% extends 'layout.html' %}" + NAV + """{% block main %}
<p>Date: {{ o.date }}</p><p>Status: <span id="order-status">{{ o.status }}</span></p>
<ul class="order-items">{% for i in items %}<li>{{ i.name }} x {{ i.qty }}: {{ money(i.price_cents * i.qty) }}</li>{% endfor %}</ul>
<p>Total: {{ money(total) }}</p>{% endblock %}""",
    "login.html": "{% extends 'layout.html' %}{% block nav %}{{ nav_links|safe }}{% endblock %}" + """{% block main %}
{% if error %}<p role="alert">{{ error }}</p>{% endif %}
<form method="post"><input type="hidden" name="next" value="{{ next or '' }}">
<label>{{ user_label }} <input name="{{ user_field }}" autocomplete="username"></label>
<label>Password <input name="password" type="password"></label><button type="submit">Sign in</button></form>
{% endblock %}""",
    "admin_home.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<p>Orders: {{ n_orders }}</p><p>Customers: {{ n_customers }}</p><p>Products: {{ n_products }}</p>{% endblock %}""",
    "admin_orders.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<table id="orders"><thead><tr><th>Order</th><th>Customer</th><th>Date</th><th>Status</th><th>Total</th></tr></thead><tbody>
{% for o in orders %}<tr><td>#{{ o.id }}</td><td>{{ o.name }}</td><td>{{ o.date }}</td><td>{{ o.status }}</td>
<td>{{ money(o.total) }}</td></tr>{% endfor %}</tbody></table>{% endblock %}""",
    "admin_customers.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<table id="customers"><thead><tr><th>Name</th><th>Email</th></tr></thead><tbody>
{% for c in customers %}<tr><td><a href="{{ url_for('admin_customer', cid=c.id) }}">{{ c.name }}</a></td>
<td>{{ c.email }}</td></tr>{% endfor %}</tbody></table>{% endblock %}""",
    "admin_customer.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<p>Email: {{ c.email }}</p><p>Number of orders: <span id="order-count">{{ orders|length }}</span></p>
<table id="orders"><thead><tr><th>Order</th><th>Date</th><th>Status</th><th>Total</th></tr></thead><tbody>
{% for o in orders %}<tr><td>#{{ o.id }}</td><td>{{ o.date }}</td><td>{{ o.status }}</td><td>{{ money(o.total) }}</td></tr>
{% endfor %}</tbody></table>{% endblock %}""",
    "admin_products.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<table id="products"><thead><tr><th>SKU</th><th>Product</th><th>Price</th><th>Stock</th><th></th></tr></thead><tbody>
{% for p in products %}<tr><td>{{ p.sku }}</td><td>{{ p.name }}</td><td>{{ money(p.price_cents) }}</td><td>{{ p.stock }}</td>
<td><a href="{{ url_for('admin_product', sku=p.sku) }}">Edit {{ p.name }}</a></td></tr>{% endfor %}</tbody></table>
{% endblock %}""",
    "admin_product.html": "{% extends 'layout.html' %}" + ADMIN_NAV + """{% block main %}
<form method="post"><label>Price in dollars <input name="price" value="{{ '%d.%02d' % (p.price_cents // 100, p.price_cents % 100) }}"></label>
<label>Stock <input name="stock" type="number" min="0" value="{{ p.stock }}"></label>
<button type="submit">Save product</button></form>{% endblock %}""",
}

_ORDER_TOTALS = """SELECT o.id, o.customer_id, o.date, o.status, c.name,
    (SELECT COALESCE(SUM(i.qty * i.price_cents), 0) FROM order_items i WHERE i.order_id = o.id) AS total
    FROM orders o JOIN customers c ON c.id = o.customer_id"""


def parse_price(text: str) -> int | None:
    """Cents of "12.5", "$12.50", "12"; None for anything else or a negative/huge price."""
    t = text.strip().lstrip("$").strip()
    whole, _, frac = t.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()) or len(frac) > 2 or len(whole) > 6:
        return None
    return int(whole) * 100 + int((frac + "00")[:2])


def create_app(secret: bytes):
    flask = require_flask()
    from flask import abort, flash, redirect, render_template, request, session, url_for

    app = make_app("shopping", "One Stop Shop", TEMPLATES, secret)
    app.jinja_env.globals["money"] = money

    customer_required = requires_login("customer_id", "login", "Please sign in first.", keep_next=True)
    admin_required = requires_login("admin", "admin_login")

    def _safe_next(target: str | None, default: str) -> str:
        root = request.script_root + "/"
        return target if target and target.startswith(root) else default

    @app.get("/")
    def home():
        return render_template("home.html", title="Welcome", categories=db().execute("SELECT * FROM categories").fetchall())

    @app.get("/category/<slug>")
    def category(slug):
        row = db().execute("SELECT * FROM categories WHERE slug = ?", (slug,)).fetchone()
        if row is None:
            abort(404)
        products = db().execute("SELECT * FROM products WHERE category = ? ORDER BY name", (slug,)).fetchall()
        return render_template("list.html", title=f"Category: {row['title']}", products=products)

    @app.get("/search")
    def search():
        q = request.args.get("q", "").strip()
        like = f"%{q}%"
        products = db().execute("SELECT * FROM products WHERE name LIKE ? OR description LIKE ? ORDER BY name",
                                (like, like)).fetchall() if q else []
        return render_template("list.html", title=f"Search results for '{q}'", products=products, q=q)

    @app.get("/product/<sku>")
    def product(sku):
        p = db().execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if p is None:
            abort(404)
        reviews = db().execute("SELECT r.*, c.name FROM reviews r JOIN customers c ON c.id = r.customer_id "
                               "WHERE r.sku = ? ORDER BY r.id", (sku,)).fetchall()
        return render_template("product.html", title=p["name"], p=p, reviews=reviews)

    @app.post("/cart/add")
    @customer_required
    def cart_add():
        sku = request.form.get("sku", "")
        try:
            qty = int(request.form.get("qty", "1"))
        except ValueError:
            qty = 0
        p = db().execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if p is None or not 1 <= qty <= 99:
            flash("Choose a product and a quantity from 1 to 99.")
            return redirect(url_for("product", sku=sku) if p is not None else url_for("home"))
        db().execute("INSERT INTO cart_items VALUES (?, ?, ?) ON CONFLICT (customer_id, sku) "
                     "DO UPDATE SET qty = qty + excluded.qty", (session["customer_id"], sku, qty))
        db().commit()
        flash(f"Added {qty} x {p['name']} to your cart.")
        return redirect(url_for("cart"))

    def _cart_items():
        return db().execute("SELECT c.sku, c.qty, p.name, p.price_cents FROM cart_items c JOIN products p "
                            "ON p.sku = c.sku WHERE c.customer_id = ? ORDER BY p.name", (session["customer_id"],)).fetchall()

    @app.get("/cart")
    @customer_required
    def cart():
        items = _cart_items()
        return render_template("cart.html", title="Shopping cart", items=items,
                               total=sum(i["qty"] * i["price_cents"] for i in items))

    @app.post("/cart/remove")
    @customer_required
    def cart_remove():
        db().execute("DELETE FROM cart_items WHERE customer_id = ? AND sku = ?",
                     (session["customer_id"], request.form.get("sku", "")))
        db().commit()
        return redirect(url_for("cart"))

    @app.post("/checkout")
    @customer_required
    def checkout():
        items = _cart_items()
        if not items:
            flash("Your cart is empty.")
            return redirect(url_for("cart"))
        conn = db()
        cur = conn.execute("INSERT INTO orders (customer_id, date, status) VALUES (?, ?, 'pending')",
                           (session["customer_id"], today()))
        conn.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?)",
                         [(cur.lastrowid, i["sku"], i["qty"], i["price_cents"]) for i in items])
        conn.execute("DELETE FROM cart_items WHERE customer_id = ?", (session["customer_id"],))
        conn.commit()
        flash(f"Thank you! Your order #{cur.lastrowid} has been placed.")
        return redirect(url_for("order", oid=cur.lastrowid))

    @app.get("/orders")
    @customer_required
    def orders():
        rows = db().execute(_ORDER_TOTALS + " WHERE o.customer_id = ? ORDER BY o.id DESC", (session["customer_id"],)).fetchall()
        return render_template("orders.html", title="My orders", orders=rows)

    @app.get("/orders/<int:oid>")
    @customer_required
    def order(oid):
        o = db().execute(_ORDER_TOTALS + " WHERE o.id = ? AND o.customer_id = ?", (oid, session["customer_id"])).fetchone()
        if o is None:
            abort(404)
        items = db().execute("SELECT i.*, p.name FROM order_items i JOIN products p ON p.sku = i.sku WHERE i.order_id = ?",
                             (oid,)).fetchall()
        return render_template("order.html", title=f"Order #{oid}", o=o, items=items, total=o["total"])

    customer_nav = '<a href="{}">Home</a>'

    @app.route("/login", methods=["GET", "POST"])
    def login():
        error = None
        if request.method == "POST":
            c = db().execute("SELECT * FROM customers WHERE email = ? AND password = ?",
                             (request.form.get("email", "").strip().lower(), request.form.get("password", ""))).fetchone()
            if c is not None:
                session.update(customer_id=c["id"], customer_name=c["name"])
                return redirect(_safe_next(request.form.get("next"), url_for("home")))
            error = "Wrong email or password."
        return render_template("login.html", title="Customer login", error=error, next=request.args.get("next"),
                               user_label="Email", user_field="email", nav_links=customer_nav.format(url_for("home")))

    @app.get("/logout")
    def logout():
        session.pop("customer_id", None)
        session.pop("customer_name", None)
        return redirect(url_for("home"))

    # --- admin ------------------------------------------------------------------

    @app.route("/admin/login", methods=["GET", "POST"])
    def admin_login():
        error = None
        if request.method == "POST":
            a = db().execute("SELECT * FROM admins WHERE username = ? AND password = ?",
                             (request.form.get("username", "").strip(), request.form.get("password", ""))).fetchone()
            if a is not None:
                session["admin"] = a["username"]
                return redirect(url_for("admin_home"))
            error = "Wrong username or password."
        return render_template("login.html", title="Admin login", error=error, user_label="Username",
                               user_field="username", nav_links="")

    @app.get("/admin/logout")
    def admin_logout():
        session.pop("admin", None)
        return redirect(url_for("admin_login"))

    @app.get("/admin/")
    @admin_required
    def admin_home():
        count = lambda t: db().execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        return render_template("admin_home.html", title="Dashboard", n_orders=count("orders"),
                               n_customers=count("customers"), n_products=count("products"))

    @app.get("/admin/orders")
    @admin_required
    def admin_orders():
        return render_template("admin_orders.html", title="Orders",
                               orders=db().execute(_ORDER_TOTALS + " ORDER BY o.id DESC").fetchall())

    @app.get("/admin/customers")
    @admin_required
    def admin_customers():
        return render_template("admin_customers.html", title="Customers",
                               customers=db().execute("SELECT * FROM customers ORDER BY name").fetchall())

    @app.get("/admin/customers/<int:cid>")
    @admin_required
    def admin_customer(cid):
        c = db().execute("SELECT * FROM customers WHERE id = ?", (cid,)).fetchone()
        if c is None:
            abort(404)
        rows = db().execute(_ORDER_TOTALS + " WHERE o.customer_id = ? ORDER BY o.id DESC", (cid,)).fetchall()
        return render_template("admin_customer.html", title=f"Customer: {c['name']}", c=c, orders=rows)

    @app.get("/admin/products")
    @admin_required
    def admin_products():
        return render_template("admin_products.html", title="Products",
                               products=db().execute("SELECT * FROM products ORDER BY sku").fetchall())

    @app.route("/admin/products/<sku>", methods=["GET", "POST"])
    @admin_required
    def admin_product(sku):
        p = db().execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if p is None:
            abort(404)
        if request.method == "POST":
            cents = parse_price(request.form.get("price", ""))
            stock = request.form.get("stock", str(p["stock"])).strip()
            if cents is None or not stock.isdigit():
                flash("Enter a price like 12.50 and a whole number of items in stock.")
            else:
                db().execute("UPDATE products SET price_cents = ?, stock = ? WHERE sku = ?", (cents, int(stock), sku))
                db().commit()
                flash(f"Saved {p['name']}.")
                return redirect(url_for("admin_products"))
        return render_template("admin_product.html", title=f"Edit product: {p['name']}", p=p)

    del flask
    return app
