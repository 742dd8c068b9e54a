#!/usr/bin/env python3
"""An independent implementation of TraqLyte's event identity, for checking the fixtures.

Usage: python3 tools/idcheck.py crates/identity/tests/fixtures/identity.json

Written from the rules (DESIGN.md section 1a and the identity crate's documentation), not
by calling the Rust code, so that the frozen constants in the fixture file are checked by
a second implementation. Python 3 standard library only.

The rules:
- Every string and object key of the event is put in Unicode NFC.
- Each identity field (an RFC 6901 pointer) is looked up in the normalised event, in the
  order the contract lists them. An absent field is omitted; null is a value. A number
  with a declared precision is rounded half away from zero, in decimal, from its shortest
  round-trip representation; integers are unchanged. A "set" array is sorted by the UTF-8
  bytes of each element's canonical JSON (repeats kept); an "ordered" array is kept.
- The identity document is the object {pointer as written: canonical value}.
- Canonical JSON is RFC 8785 (JCS): no whitespace, keys sorted by UTF-16 code units,
  ECMAScript number formatting, minimal string escaping.
- event_id = sha256(name "\\n" version "\\n" JCS(identity document)), lowercase hex.
- fingerprint = sha256(JCS(event with identity fields replaced by their canonical values
  and transport pointers removed)), lowercase hex.

Prints one line per case ("ok <name>" or "FAIL <name>: ...") and exits 1 on any mismatch.
"""

import copy
import decimal
import hashlib
import json
import sys
import unicodedata

# Bounds on the input, mirroring the Rust side's limits.
FIXTURE_BYTES_MAX = 16 * 1024 * 1024
EXACT_INTEGER_MAX = 2**53 - 1


class IdentityError(Exception):
    """The event cannot be identified under its contract."""


# ---------------------------------------------------------------------------------------
# RFC 8785 (JCS)


def jcs(value):
    """RFC 8785 canonical text of a JSON value (as parsed by the json module)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if abs(value) > EXACT_INTEGER_MAX:
            return wide_integer(value, "")
        return str(value)
    if isinstance(value, float):
        return ecmascript_number(value)
    if isinstance(value, str):
        return jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be"))
        return "{" + ",".join(jcs_string(k) + ":" + jcs(value[k]) for k in keys) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def jcs_bytes(value):
    return jcs(value).encode("utf-8")


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def jcs_string(text):
    """JSON string with only the escapes RFC 8785 requires (ECMAScript JSON.stringify)."""
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def ecmascript_number(x):
    """Number::toString of ECMA-262 (section 6.1.6.1.20) for a finite double."""
    if x != x or x in (float("inf"), float("-inf")):
        raise IdentityError("NaN and Infinity are not JSON numbers")
    if x == 0:
        return "0"  # Both +0 and -0.
    if x < 0:
        return "-" + ecmascript_number(-x)
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    mantissa, _, exponent = repr(x).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    # Now x = 0.digits × 10^point, with k digits and n = point as in the specification.
    k, n = len(digits), point
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    sign = "+" if n - 1 >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(n - 1)}"


# ---------------------------------------------------------------------------------------
# Normalisation, pointers, field rules


def normalise(value, at=""):
    """The value with every string and key in NFC; refuses keys that collide."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [normalise(item, f"{at}/{i}") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            key = unicodedata.normalize("NFC", key)
            if key in out:
                raise IdentityError(f"object at {at!r} has two keys equal after NFC: {key!r}")
            out[key] = normalise(item, at + "/" + key.replace("~", "~0").replace("/", "~1"))
        return out
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > EXACT_INTEGER_MAX:
        wide_integer(value, at)
    return value


def wide_integer(value, at):
    """RFC 8785 text of an integer beyond ±(2^53-1): taken only when it is written as the
    shortest form of its double (2^63 as 9223372036854775808 is not: that form reads
    9223372036854776000), as the Rust side's number rule (docs/identity.md)."""
    try:
        shortest = ecmascript_number(float(value))
    except OverflowError:
        raise IdentityError(f"number at {at!r} is beyond the range of a double") from None
    if decimal.Decimal(shortest) != decimal.Decimal(value):
        raise IdentityError(f"number at {at!r} is not the shortest form of its double")
    return shortest


def removal_key(pointer):
    """The sort key of a transport pointer: its tokens, array indices by number."""
    key = []
    for token in pointer_tokens(pointer):
        digits = token[1:] if token.startswith("+") else token
        if digits.isascii() and digits.isdigit() and int(digits) < 2**64:
            key.append((0, int(digits), ""))
        else:
            key.append((1, 0, token))
    return key


def pointer_tokens(pointer):
    if not pointer.startswith("/"):
        raise IdentityError(f"pointer {pointer!r} must start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        if raw.replace("~0", "").replace("~1", "").count("~"):
            raise IdentityError(f"pointer {pointer!r} has a bad '~' escape")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def _array_index(token, length):
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        return None
    index = int(token)
    return index if index < length else None


_MISSING = object()


def _step(container, token):
    if isinstance(container, dict):
        return container.get(token, _MISSING)
    if isinstance(container, list):
        index = _array_index(token, len(container))
        return _MISSING if index is None else container[index]
    return _MISSING


def pointer_get(doc, tokens):
    current = doc
    for token in tokens:
        current = _step(current, token)
        if current is _MISSING:
            return _MISSING
    return current


def pointer_set(doc, tokens, value):
    """Replaces the addressed value when it is present."""
    parent = pointer_get(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        parent[last] = value
    elif isinstance(parent, list) and _array_index(last, len(parent)) is not None:
        parent[_array_index(last, len(parent))] = value


def pointer_remove(doc, tokens):
    parent = pointer_get(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and _array_index(last, len(parent)) is not None:
        del parent[_array_index(last, len(parent))]


def round_half_away_from_zero(x, places):
    """Decimal rounding of a double's shortest representation; integers are unchanged."""
    if not isinstance(x, float):
        return x
    shortest = decimal.Decimal(repr(x))
    if shortest.as_tuple().exponent >= -places:
        return x
    with decimal.localcontext() as context:
        context.prec = 1000
        rounded = shortest.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP)
    return float(rounded)


TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def canonical_field(value, spec):
    kind = spec.get("type")
    if kind is None and "precision" in spec:
        kind = "number"
    if kind is None and "array" in spec:
        kind = "array"
    if kind is not None and not TYPE_CHECKS[kind](value):
        raise IdentityError(f"field {spec['pointer']} must be of type {kind}, got {value!r}")
    if "precision" in spec and isinstance(value, (int, float)):
        return round_half_away_from_zero(value, spec["precision"])
    if spec.get("array") == "set":
        return sorted(value, key=jcs_bytes)
    return value


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def identify(contract, event):
    """Returns (canonical identity bytes, event_id, fingerprint)."""
    if not isinstance(event, dict):
        raise IdentityError("the event must be a JSON object")
    content = normalise(copy.deepcopy(event))
    identity = {}
    for spec in contract["fields"]:
        tokens = pointer_tokens(spec["pointer"])
        value = pointer_get(content, tokens)
        if value is _MISSING:
            if spec.get("required", False):
                raise IdentityError(f"required field {spec['pointer']} is missing")
            continue
        value = canonical_field(value, spec)
        pointer_set(content, tokens, value)
        identity[spec["pointer"]] = value
    # Later array items first (`/a/1` before `/a/0`), as the Rust side's removal order:
    # each removal then names the item it was written for.
    for pointer in sorted(contract.get("transport", []), key=removal_key, reverse=True):
        pointer_remove(content, pointer_tokens(pointer))
    canonical = jcs_bytes(identity)
    preimage = f"{contract['name']}\n{contract['version']}\n".encode("utf-8") + canonical
    return canonical, sha256_hex(preimage), sha256_hex(jcs_bytes(content))


# ---------------------------------------------------------------------------------------


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def check_case(case):
    """Returns a list of mismatch descriptions (empty when the case agrees)."""
    try:
        canonical, event_id, fingerprint = identify(case["contract"], case["event"])
    except (IdentityError, KeyError, TypeError) as err:
        return [f"cannot identify: {err}"]
    problems = []
    computed = {"canonical": canonical.decode("utf-8"), "event_id": event_id, "fingerprint": fingerprint}
    for key, value in computed.items():
        if case.get(key) != value:
            problems.append(f"{key}\n    recorded {case.get(key)!r}\n    computed {value!r}")
    return problems


def main(argv):
    if len(argv) != 2:
        print("usage: idcheck.py FIXTURES.json", file=sys.stderr)
        return 2
    with open(argv[1], "rb") as handle:
        data = handle.read(FIXTURE_BYTES_MAX + 1)
    if len(data) > FIXTURE_BYTES_MAX:
        print(f"{argv[1]} is larger than {FIXTURE_BYTES_MAX} bytes", file=sys.stderr)
        return 2
    cases = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    if not isinstance(cases, list) or not cases:
        print(f"{argv[1]} must hold a non-empty JSON array of cases", file=sys.stderr)
        return 2
    failures = 0
    for case in cases:
        problems = check_case(case)
        if problems:
            failures += 1
            print(f"FAIL {case.get('name')}: " + "\n  ".join(problems))
        else:
            print(f"ok {case['name']} {case['event_id']}")
    print(f"{len(cases) - failures} of {len(cases)} cases agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
