#!/usr/bin/env python3
"""A conflict resolver for a running canopyd, to copy into an application.

It connects to the agent's admin socket, registers as a resolver
(Protocol/admin-v1.md section 5, "Resolvers"), and answers every conflict it is
offered with a three-way merge of the leaves' JSON objects against their common
ancestor:

- a field changed on one side only takes that side's value;
- a field changed on several sides takes the current leaf's value (the first
  leaf of the offer);
- if any leaf is a deletion, the answer is to delete the document.

Answers are pipelined: each is sent as soon as it is computed, without waiting
for the agent's response; responses are matched to answers by request id. One
line is printed per answer applied, per answer refused and per offer skipped
(a leaf whose body the agent no longer stores). The script exits 0
when the agent closes the connection (it shut down), 1 when the registration is
refused or the agent cannot be reached.

    python3 Tools/examples/resolver.py --socket ~/.canopy/admin.sock --name notes --prefix note:

Python 3.9 or later, standard library only.
"""

import argparse
import json
import socket
import sys

# An object member with no value on one side: removed there, or never there.
MISSING = object()


def same(left, right):
    """True when two member values are the same JSON (Python's == takes 1, 1.0 and
    True for one another)."""
    if left is MISSING or right is MISSING:
        return left is right
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def three_way_merge(ancestor, leaves):
    """Merges the leaves' bodies field by field against the ancestor's body.

    `leaves` are the offer's leaves, the current one first. For each field, the
    sides that changed it (relative to the ancestor) are found; if none did, the
    ancestor's value stays; otherwise the first changed side in leaf order wins,
    which is the current leaf's value when it changed the field. A field removed
    on the winning side is left out. With no ancestor (the agent no longer holds
    it), every field counts as changed: the current leaf's value wins.
    """
    base = ancestor if isinstance(ancestor, dict) else {}
    bodies = [leaf["body"] for leaf in leaves]
    fields = set(base)
    for body in bodies:
        fields.update(body)
    merged = {}
    for field in sorted(fields):
        original = base.get(field, MISSING)
        value = original
        for body in bodies:
            candidate = body.get(field, MISSING)
            if not same(candidate, original):
                value = candidate
                break
        if value is not MISSING:
            merged[field] = value
    return merged


def decide(offer):
    """The answer's members for one offer: `delete`, or a merged `body`; None
    when a leaf's body is no longer stored (no merge is possible without it)."""
    leaves = offer["leaves"]
    if any(leaf.get("deleted") for leaf in leaves):
        return {"delete": True}
    if not all(isinstance(leaf.get("body"), dict) for leaf in leaves):
        return None
    return {"body": three_way_merge(offer.get("ancestor"), leaves)}


class Connection:
    """One admin-socket connection speaking newline-delimited JSON."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")
        self.next_id = 1

    def send(self, cmd, **arguments):
        """Sends a request and returns its id; the response is read later."""
        request_id = self.next_id
        self.next_id += 1
        request = dict(arguments, id=request_id, cmd=cmd)
        self.sock.sendall(json.dumps(request, separators=(",", ":")).encode("utf-8") + b"\n")
        return request_id

    def lines(self):
        """Yields each JSON line the agent sends, until it closes the connection."""
        for raw in self.reader:
            raw = raw.strip()
            if raw:
                yield json.loads(raw)


def serve(connection, name, prefix):
    """Registers, then answers offers until the agent closes. Returns the exit status."""
    # Without a prefix the agent decides: what rules route to this name, or, when no rule names
    # it, every conflict no rule covers.
    claim = {} if prefix is None else {"prefix": prefix}
    register_id = connection.send("resolver.register", name=name, **claim)
    pending = {}  # request id -> document (db/id outside default), for answers sent and not yet answered
    for line in connection.lines():
        if "resolve" in line:
            offer = line["resolve"]
            # The document, named with its database outside `default`.
            database = offer.get("db", "default")
            doc = offer["doc"] if database == "default" else "%s/%s" % (database, offer["doc"])
            decision = decide(offer)
            if decision is None:
                # No answer: the agent keeps the conflict (after its timeout it reports
                # resolution.failed), and it stays for `canopyctl resolve`.
                print("skipped %s: a leaf's body is no longer stored" % doc, flush=True)
                continue
            answer_id = connection.send("resolver.answer", ticket=offer["ticket"], **decision)
            pending[answer_id] = doc
        elif line.get("id") == register_id:
            if not line.get("ok"):
                error = line.get("error", {})
                print("registration refused: %s: %s" % (error.get("code"), error.get("message")), file=sys.stderr)
                return 1
            claims = "what rules route to it" if line["prefix"] is None else "ids starting with %r" % line["prefix"]
            print("registered %s: %s" % (line["name"], claims), flush=True)
        elif line.get("id") in pending:
            doc = pending.pop(line["id"])
            if line.get("ok"):
                print("answered %s %s" % (doc, line["rev"]), flush=True)
            else:
                error = line.get("error", {})
                print("refused %s %s: %s" % (doc, error.get("code"), error.get("message")), flush=True)
        # Anything else (an event line) is not for a resolver: skipped, as admin-v1.md section 3 allows.
    return 0


def main():
    parser = argparse.ArgumentParser(description="Answer canopyd's conflicts with a three-way JSON merge.")
    parser.add_argument("--socket", required=True, help="the agent's admin socket (DATA_DIR/admin.sock)")
    parser.add_argument("--name", default="default", help="resolver name, as the config's `strategy = resolver NAME`")
    parser.add_argument("--prefix", default=None, help="document ids claimed while connected, beyond rules naming this resolver")
    arguments = parser.parse_args()
    try:
        connection = Connection(arguments.socket)
    except OSError as error:
        print("cannot reach the agent at %s: %s" % (arguments.socket, error), file=sys.stderr)
        return 1
    with connection.sock:
        try:
            return serve(connection, arguments.name, arguments.prefix)
        except (BrokenPipeError, ConnectionResetError):
            return 0  # the agent closed while an answer was being sent: it is stopping


if __name__ == "__main__":
    sys.exit(main())
