#!/usr/bin/env python3
"""Small command tools for weft's examples: JSON arguments on stdin, one JSON value on stdout.

Usage: demo_tools.py OPERATION   (the agent file passes the operation as an argument)
"""
import json
import os
import sys


def billing_history(a):
    return {"customerId": a["customerId"], "orders": 5, "lastChargeback": "2025-09-10"}


def issue_refund(a):
    return {"confirmationId": f"refund_{a['customerId']}_{int(a['amount'] * 100)}",
            "message": "The refund has been processed successfully."}


def escalate(a):
    return {"ticket": "esc_1", "note": a.get("reason", "")}


KB = {
    "address": "To change the delivery address, open the order and choose Edit delivery before it ships.",
    "refund": "Refunds go back to the original payment method within 5 working days.",
    "password": "Reset your password from the sign-in page with Forgot password.",
}


def search_kb(a):
    q = a["query"].lower()
    hits = [{"topic": k, "text": v} for k, v in KB.items() if k in q]
    return {"query": a["query"], "articles": hits}


def refund_order(a):
    order = a["orderId"]
    if not order.startswith("A-"):
        sys.stderr.write(f"unknown_order: no order {order}\n")
        sys.exit(2)
    return {"confirmationId": f"refund_{order}", "orderId": order,
            "message": "The refund has been processed successfully."}


ORDERS = {
    "A-1001": {"status": "delivered", "total": 42.5},
    "A-1002": {"status": "in transit", "total": 18.0},
    "A-1003": {"status": "refunded", "total": 99.9},
}


def lookup_order(a):
    order = ORDERS.get(a["orderId"])
    if order is None:
        sys.stderr.write(f"unknown_order: no order {a['orderId']}\n")
        sys.exit(2)
    return {"id": a["orderId"], **order}


def weather(a):
    sunny = a["city"].lower() in {"lisbon", "seville", "athens", "nice"}
    return {"city": a["city"], "sunny": sunny, "tempC": 24 if sunny else 12}


def find_park(a):
    return f"A walk in the park in {a['city']}"


def find_movie(a):
    return f"A film at the cinema in {a['city']}"


def present(a):
    return {"suggestion": a["suggestion"]}


def process_payment(a):
    if a["amount"] > 100 or a.get("card") == "declined":
        sys.stderr.write("card_declined: Your card was declined.\n")
        sys.exit(2)
    return {"receiptId": "rcpt_42", "amount": a["amount"]}


def confirm_order(a):
    return {"confirmed": True, "receipt": a["receipt"]["receiptId"]}


def report_failure(a):
    return {"status": "Failed", "reported": a["error"].get("message", "")}


def detect_language(a):
    words = a["text"].lower().split()
    if any(w in {"bonjour", "le", "monde"} for w in words):
        return "fr"
    if any(w in {"hola", "mundo"} for w in words):
        return "es"
    return "en"


def is_english(a):
    return a["language"] == "en"


def translate(a):
    if a["isEnglish"]:
        return a["text"]
    table = {"bonjour": "hello", "le": "the", "monde": "world", "hola": "hello", "mundo": "world"}
    return " ".join(table.get(w.lower(), w) for w in a["text"].split()).capitalize()


def append_log(a):
    """Appends a line to a file (a side effect that is visible from outside)."""
    with open(a["file"], "a", encoding="utf-8") as f:
        f.write(a["line"] + "\n")
    return {"written": a["line"]}


MEMBERS = {"ann": 41, "bob": 42, "cho": 43}
BOOKS = {"dune": 7, "emma": 8, "the hobbit": 9}


def find_member(a):
    name = a["name"]
    return {"member": {"id": MEMBERS.get(name.lower(), 40), "name": name}}


def find_book(a):
    title = a["title"]
    return {"book_id": BOOKS.get(title.lower(), 6), "title": title, "copies": 2}


def reserve_copy(a):
    return {"reservation": f"r-{a['member_id']}-{a['book_id']}", "due_in_days": 14}


OPS = {
    "billing": billing_history, "refund": issue_refund, "escalate": escalate,
    "weather": weather, "park": find_park, "movie": find_movie, "present": present,
    "pay": process_payment, "confirm": confirm_order, "report": report_failure,
    "detect": detect_language, "is_english": is_english, "translate": translate,
    "append": append_log, "kb": search_kb, "refund_order": refund_order,
    "order": lookup_order, "member": find_member, "book": find_book, "reserve": reserve_copy,
}

if __name__ == "__main__":
    op = sys.argv[1] if len(sys.argv) > 1 else ""
    if op not in OPS:
        sys.stderr.write(f"unknown operation {op!r}; known: {', '.join(sorted(OPS))}\n")
        sys.exit(64)
    args = json.load(sys.stdin)
    json.dump(OPS[op](args), sys.stdout)
