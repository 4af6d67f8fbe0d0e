#!/usr/bin/env python3
"""The Python peer, side by side: agent-airlock 0.10.26 (PyPI) on the inputs of our Rust benches.

Measures the guarded call of a small tool (allowed, ghost arguments stripped, refused for validation,
denied by policy, rate limited, approver's yes), the same function called directly, and masking 2 KB
and 64 KB of the masking bench's text (`benches/benches/masking.rs`, regenerated here byte for byte).
Run it in the same session as the criterion benches so the ratios compare like with like.

Setup (not needed by CI; the venv lives outside the repository):

    python3 -m venv /tmp/pyairlock && /tmp/pyairlock/bin/pip install agent-airlock==0.10.26
    /tmp/pyairlock/bin/python scripts/python_peer.py [--seconds 1.0] [--repeats 7]

Each case runs `repeats` timed batches of about `seconds` each after a warm-up; the table gives the
median time per call and the min–max over batches. Audit logging is measured off (our dispatch bench
has no audit log) and, for the allowed call, at the library's default (on, to a JSON-lines file in a
temporary directory).
"""
import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

# Our dispatch bench has no log subscriber; keep the peer's logging from reaching a handler too.
logging.disable(logging.CRITICAL)

try:
    import agent_airlock
    from agent_airlock import Airlock, AirlockConfig, SecurityPolicy, UnknownArgsMode
    from agent_airlock.oversight import OversightResponse, OversightVerdict
    from agent_airlock.sanitizer import sanitize_output
    from pydantic import BaseModel
except ImportError as err:  # pragma: no cover - setup error
    sys.exit(f"agent-airlock is not importable ({err}); see the setup lines at the top of this file")


# ---- the inputs of benches/benches/dispatch.rs ----

ARGS = {"order_id": "ord_1234567890", "with_items": True, "limit": 25}
GHOSTS = {"order_id": "ord_1234567890", "with_items": True, "limit": 25, "admin": True, "debug": 1}
INVALID = {"order_id": 5, "limit": "25"}


def lookup_order(order_id: str, with_items: bool | None, limit: int) -> str:
    """Look up an order."""
    if with_items:
        return f"{order_id}:{limit}:items"
    return f"{order_id}:{limit}"


def lookup_escalated(order_id: str, with_items: bool | None, limit: int) -> str:
    """Same tool, escalated."""
    return lookup_order(order_id, with_items, limit)


def lookup_limited(order_id: str, with_items: bool | None, limit: int) -> str:
    """Same tool, rate limited to nearly nothing."""
    return lookup_order(order_id, with_items, limit)


def admin_lookup(order_id: str) -> str:
    """Denied by policy."""
    return order_id


def approve(request):
    return OversightResponse(request_id=request.request_id, verdict=OversightVerdict.GRANT, approver="bench")


# ---- the inputs of benches/src/hot_path.rs (issue 25: an 8-field, ~300-byte argument object) ----

TICKET = {
    "title": "Refund not received for order ORD-2024-118842",
    "body": "Customer reports the refund issued on 2024-05-02 has not reached their card; bank says nothing pending.",
    "priority": 2,
    "urgent": False,
    "customer": {"id": "cus_9f8e7d6c5b4a", "tier": "gold", "region": "eu-west"},
    "tags": ["billing", "refund", "escalation"],
    "assignee": "support-tier2",
    "due": "2024-05-09T17:00:00Z",
}
TICKET_GHOSTS = {**TICKET, "admin": True, "customer": {**TICKET["customer"], "debug": 1}}
TICKET_INVALID = {**TICKET, "priority": "2", "due": 20240509}


class Customer(BaseModel):
    """Who the ticket is for (extra keys ignored: the nested ghost is dropped, as ours strips it)."""

    id: str
    tier: str
    region: str


def file_ticket(
    title: str,
    body: str,
    priority: int,
    urgent: bool,
    customer: Customer,
    tags: list[str],
    assignee: str | None,
    due: str,
) -> str:
    """File a support ticket (the same body as the Rust tool's)."""
    if isinstance(customer, dict):  # a direct call passes the dict through
        customer = Customer(**customer)
    size = len(title) + len(body) + len(customer.id) + len(tags) + len(due)
    return f"ticket {priority}/{str(urgent).lower()}/{size}/{len(assignee) if assignee else 0}"


def admin_file_ticket(title: str) -> str:
    """Denied by policy."""
    return title


def result_2k() -> list:
    """`hot_path::result_2k()`: about 2 KB of a tool's JSON result with secrets and PII in it."""
    return [
        {
            "id": 123_456_000 + i,
            "email": f"user{i}@example.com",
            "phone": "4155552671",
            "note": "rotated key=AKIA4HK2Q7ZLMX9RT3WB; token: ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV",
            "version": "10.0.1.2",
            "tags": ["vip", "newsletter"],
            "summary": "Prefers e-mail; last order shipped on 2024-05-01, invoice #123456789.",
        }
        for i in range(8)
    ]


# ---- the text of benches/benches/masking.rs ----

def clean_record(i: int) -> str:
    on = 123_456_000 + i
    return (
        f'{{"order_id": "ORD-{i:06}", "order_number": {on}, "created_at": "2024-05-{1 + i % 28:02}T10:{i % 60:02}:00Z", '
        f'"ts": {1_700_000_000 + i * 37}, "uuid": "550e8400-e29b-41d4-a716-4466554400{i % 100:02}", "status": "shipped", '
        f'"total": "$1,249.{i % 100:02}", "sku": "SKU-88{i:04}", "client": "agent/2.{i}.0 (build 10.0.1.{i})", '
        f'"commit": "9fceb02d0ae598e95dc970b74767f19372d61af8", "note": "Customer asked to leave the parcel '
        f'at the back door; follow-up scheduled, see ticket #{on} and https://shop.example.com/orders/{i}"}}\n'
    )


def dirty_extras(i: int) -> str:
    return [
        f"contact: jane.doe{i}@example.com, phone +1 415 555 {2671 + i:04}\n",
        "card 4111 1111 1111 1111 exp 12/27; Authorization: Bearer abcDEF1234567890ghijKLMNOP\n",
        "key=AKIAIOSFODNN7QK4RW2Z db=postgres://app:s3cr3t-Pa55@db.internal:5432/shop\n",
        "ssn 123-45-6789 iban DE89 3704 0044 0532 0130 00 token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\n",
    ][i % 4]


def text_of(size: int, dirty: bool) -> str:
    parts, length, i = [], 0, 0
    while length < size:
        record = clean_record(i)
        parts.append(record)
        length += len(record)
        if dirty and i % 3 == 0:
            extra = dirty_extras(i // 3)
            parts.append(extra)
            length += len(extra)
        i += 1
    return "".join(parts)[:size]


# ---- timing ----

def measure(fn, seconds: float, repeats: int):
    """Median and min-max of the per-call time (µs) over `repeats` batches of about `seconds` each."""
    fn()
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < seconds / 4:  # warm up and size the batch
        fn()
        calls += 1
    per_call = (time.perf_counter() - start) / max(calls, 1)
    batch = max(1, int(seconds / per_call))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(samples), min(samples), max(samples), batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one timed batch")
    parser.add_argument("--repeats", type=int, default=7, help="timed batches per case")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--only", help="only the cases whose name starts with this (e.g. hot_path/)")
    options = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="airlock-peer-")
    quiet = AirlockConfig(enable_audit_log=False, unknown_args=UnknownArgsMode.STRIP_AND_LOG)
    audited = AirlockConfig(enable_audit_log=True, audit_log_path=os.path.join(tmp, "audit.jsonl"))
    policy = SecurityPolicy(
        denied_tools=["admin_*"],
        rate_limits={"lookup_limited": "1/day"},
        escalate_tools={"lookup_escalated": "benchmark"},
        approver=approve,
    )

    guarded = Airlock(config=quiet, policy=policy)(lookup_order)
    guarded_audited = Airlock(config=audited, policy=policy)(lookup_order)
    escalated = Airlock(config=quiet, policy=policy)(lookup_escalated)
    limited = Airlock(config=quiet, policy=policy)(lookup_limited)
    denied = Airlock(config=quiet, policy=policy)(admin_lookup)
    ticket = Airlock(config=quiet, policy=policy)(file_ticket)
    ticket_denied = Airlock(config=quiet, policy=policy)(admin_file_ticket)

    # Check each case answers as the Rust bench expects before timing it.
    assert guarded(**ARGS) == "ord_1234567890:25:items"
    assert guarded(**GHOSTS) == "ord_1234567890:25:items"
    refused = guarded(**INVALID)
    assert isinstance(refused, dict) and not refused.get("success", True), refused
    assert isinstance(denied(order_id="x"), dict)
    assert limited(**ARGS) == "ord_1234567890:25:items"  # spends the day's only token
    assert isinstance(limited(**ARGS), dict)
    assert escalated(**ARGS) == "ord_1234567890:25:items"
    assert guarded_audited(**ARGS) == "ord_1234567890:25:items"
    assert ticket(**TICKET) == "ticket 2/false/187/13", ticket(**TICKET)  # the Rust tool's result
    assert ticket(**TICKET_GHOSTS) == "ticket 2/false/187/13", ticket(**TICKET_GHOSTS)
    refused = ticket(**TICKET_INVALID)
    assert isinstance(refused, dict) and not refused.get("success", True), refused
    refused = ticket_denied(**TICKET)
    assert isinstance(refused, dict) and not refused.get("success", True), refused
    masked = sanitize_output(result_2k(), mask_pii=True, mask_secrets=True).content
    assert "AKIA4HK2Q7ZLMX9RT3WB" not in masked and "user0@example.com" not in masked, masked[:400]

    texts = {f"{n}_{'dirty' if d else 'clean'}": text_of(size, d) for n, size in (("2k", 2048), ("64k", 65536)) for d in (False, True)}
    assert all(len(t) == (2048 if k.startswith("2k") else 65536) for k, t in texts.items())
    masked = sanitize_output(texts["2k_dirty"], mask_pii=True, mask_secrets=True).content
    assert "4111 1111 1111 1111" not in masked and "AKIAIOSFODNN7QK4RW2Z" not in masked, masked[:400]

    cases = [
        ("dispatch/direct_call", lambda: lookup_order(**ARGS)),
        ("dispatch/allowed", lambda: guarded(**ARGS)),
        ("dispatch/allowed_audit_default", lambda: guarded_audited(**ARGS)),
        ("dispatch/allowed_ghosts_stripped", lambda: guarded(**GHOSTS)),
        ("dispatch/refused_validation", lambda: guarded(**INVALID)),
        ("dispatch/denied_by_policy", lambda: denied(order_id="x")),
        ("dispatch/rate_limited", lambda: limited(**ARGS)),
        ("dispatch/approver_yes", lambda: escalated(**ARGS)),
    ]
    cases += [
        ("hot_path/direct_call", lambda: file_ticket(**TICKET)),
        ("hot_path/allowed", lambda: ticket(**TICKET)),
        ("hot_path/ghosts_stripped", lambda: ticket(**TICKET_GHOSTS)),
        ("hot_path/invalid", lambda: ticket(**TICKET_INVALID)),
        ("hot_path/denied", lambda: ticket_denied(**TICKET)),
        # A fresh result each time, as the Rust case masks a fresh value (building it is timed on both sides).
        ("hot_path/mask_2k", lambda: sanitize_output(result_2k(), mask_pii=True, mask_secrets=True)),
    ]
    for name, text in texts.items():
        cases.append((f"mask_text/{name}/secrets,pii", lambda t=text: sanitize_output(t, mask_pii=True, mask_secrets=True)))

    print(f"agent-airlock {agent_airlock.__version__} on Python {sys.version.split()[0]}; "
          f"{options.repeats} batches of ~{options.seconds} s per case\n")
    print("| case | median µs | min–max µs | calls/batch |")
    print("|---|---|---|---|")
    figures = {}
    for name, fn in cases:
        if options.only and not name.startswith(options.only):
            continue
        median, low, high, batch = measure(fn, options.seconds, options.repeats)
        figures[name] = {"median_us": median, "min_us": low, "max_us": high}
        print(f"| {name} | {median:.2f} | {low:.2f}–{high:.2f} | {batch} |", flush=True)
    if options.json:
        with open(options.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
