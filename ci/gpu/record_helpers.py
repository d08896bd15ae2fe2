"""Output helpers of ci/gpu/record.py (the record's Markdown, its checks, reading raw files),
loaded by record.py and record_rmm.py from beside them. Python 3 standard library only."""
import json
import math
import statistics


class Record:
    def __init__(self):
        self.lines = []
        self.failed = []      # (part, text): checks that did not hold
        self.unchecked = []   # (part, text): checks that could not be made (not measured)
        self.device = None    # FAULTLINE_DEVICE of the run, from machine.txt

    def out(self, text=""):
        self.lines.append(text)

    def fail(self, part, text):
        self.failed.append((part, text))

    def cannot(self, part, text):
        self.unchecked.append((part, text))

    def table(self, header, rows):
        self.out("| " + " | ".join(cell(h) for h in header) + " |")
        self.out("|" + "---|" * len(header))
        for r in rows:
            self.out("| " + " | ".join(cell(x) for x in r) + " |")
        self.out()

    def code(self, text, lang=""):
        fence = "````" if "```" in text else "```"
        self.out(fence + lang)
        for line in text.rstrip("\n").splitlines():
            self.out(line)
        self.out(fence)
        self.out()

    def not_run(self, what):
        self.out(f"Not run ({what}).")
        self.out()


def cell(x):
    s = "" if x is None else str(x)
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def tick(s):
    """Inline code, safe for backticks inside."""
    s = str(s)
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def num(x, digits=3):
    """A value with `digits` significant digits, thousands separated, never in exponent form."""
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def ratio(a, b, suffix="×"):
    return f"{a / b:.2f}{suffix}" if a and b else "-"


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def tail(text, n):
    return "\n".join((text or "").rstrip("\n").splitlines()[-n:])


def jsonl(path):
    """The JSON objects of a JSON-lines file, and how many lines did not parse."""
    objs, bad = [], 0
    text = read_text(path)
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            o = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(o, dict):
            objs.append(o)
        else:
            bad += 1
    return objs, bad


def median_or_inf(values):
    finite = [math.inf if v is None else v for v in values]
    return statistics.median(finite) if finite else None

