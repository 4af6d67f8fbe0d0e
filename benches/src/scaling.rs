//! Inputs a model or an upstream controls, each built at a size `n`: what one guarded call or one masking costs
//! must grow linearly with them. `scripts/instruction_budget.py` counts each shape's instructions at `n` and at
//! `4 n` under callgrind (`src/bin/scaling_counts.rs`) and fails when the second is more than
//! [`LINEAR_BOUND`] times the first: linear work is at most 4 times (less, with the call's fixed costs), a
//! quadratic walk 16. Past sessions found such walks by hand, one shape at a time (ghosts inserted one by one,
//! the poisoning scan, a `$ref` chain, BEGIN lines with no END); these keep the ones found and the shapes next to
//! them linear.

use serde_json::{Value, json};

use crate::hot_path::{Input, Workload, arguments};

/// The most `4 n` may cost over `n`: linear work is 4 (less, with fixed costs), `n log n` ~4.4 at these sizes, and
/// glibc's heap housekeeping moves a count by up to ~13 % between processes (4.37 seen once, before the lowest of
/// two processes was taken); a quadratic walk is 16.
pub const LINEAR_BOUND: f64 = 6.0;

/// Each shape, with its `n`: large enough that what grows with it outweighs the call's fixed costs ([`shapes`]
/// adds those of the JSON Schema tools).
pub const SHAPES: [(&str, usize); 15] = [
    // Undeclared keys, `n` at the top level and `n` in the nested object, stripped.
    ("ghosts", 500),
    // `n` tags, every one valid.
    ("tags", 500),
    // `n` tags, every one of the wrong type: refused, the refusal bounded.
    ("invalid_tags", 500),
    // `n` nested objects each with a wrong type and an undeclared key, in an array no schema item declares.
    ("invalid_customers", 200),
    // A body of `n` KiB.
    ("long_body", 16),
    // The integer sent as a string of `n` KiB: refused, the value shown cut.
    ("long_wrong_type", 16),
    // A call to an unknown tool whose name is `n` KiB: refused with the closest names.
    ("long_unknown_tool", 16),
    // An undeclared key `n` KiB long: stripped and named, cut, in the message.
    ("long_ghost_name", 16),
    // The allowed call's arguments as JSON text (`ToolCallText`), read straight from the text: `n` tags, and a
    // body of `n` KiB.
    ("tags_text", 500),
    ("long_body_text", 16),
    // As text, `n` undeclared keys at the top level and `n` in the nested object: the text path gives up at
    // the first, and the parsed map's way strips them.
    ("ghosts_text", 500),
    // `n` KiB of text built from the shapes that once made masking quadratic (BEGIN lines with no END, runs of
    // token prefixes, labels overtaken by e-mails, base64 and capitals-and-dashes runs), masked.
    ("mask_text", 16),
    // `n` records of the 2 KB result's kind, masked leaf by leaf.
    ("mask_records", 64),
    // One object with `n` keys, a third of them named like secrets, masked by key.
    ("mask_wide_object", 500),
    // Arrays nested `n` deep around a secret, masked.
    ("mask_deep", 24),
];

/// The shapes of a tool an upstream defines by its JSON Schema (the benches' feature `json-tool`, which the
/// instruction budget builds with).
#[cfg(feature = "json-tool")]
const JSON_TOOL_SHAPES: [(&str, usize); 3] = [
    // `n` distinct objects and `n` distinct arrays where the schema says `uniqueItems`, each family hashed alike by
    // the `jsonschema` crate's own check (integers past 2^53 rounding to one `f64`; arrays of empty arrays), which
    // compared each item with every one before it.
    ("json_unique_items", 500),
    // Patterns where a draft-7 schema says `"format": "regex"`: `n` named groups one after another and `n`
    // references to them, and `n` nested; the crate's own check compared each name with every one before it.
    ("json_regex_names", 500),
    // Long strings where a draft-7 schema names a format the crate checks by parsing (hostnames and e-mail of many
    // labels, IRIs with dot segments, URIs with escapes, URI templates, JSON pointers, date-times and durations with
    // long digit runs, IPv6, IDN hostnames and e-mail through UTS 46 and punycode):
    // linear today (BENCHMARKS.md §13); kept so through the crate's upgrades.
    ("json_formats", 500),
];
#[cfg(not(feature = "json-tool"))]
const JSON_TOOL_SHAPES: [(&str, usize); 0] = [];

/// Every shape this build can run, with its `n`: [`SHAPES`], then the JSON Schema tools' with the feature
/// `json-tool`.
pub fn shapes() -> impl Iterator<Item = (&'static str, usize)> {
    SHAPES.into_iter().chain(JSON_TOOL_SHAPES)
}

/// The input of `shape` at size `n`.
pub fn input(shape: &str, n: usize) -> Input {
    let call = |name: &str, arguments: Value| Input::Call(agent_airlock::ToolCall::new("call_abc123", name, arguments));
    let kib = |text: &str| text.repeat(n * 1024 / text.len() + 1)[..n * 1024].to_owned();
    match shape {
        "ghosts" => {
            let mut arguments = arguments();
            for i in 0..n {
                arguments["customer"][format!("debug{i}")] = json!(i);
                arguments[format!("admin{i}")] = json!(true);
            }
            call("file_ticket", arguments)
        }
        "tags" => {
            let mut arguments = arguments();
            arguments["tags"] = (0..n).map(|i| json!(format!("tag-{i}"))).collect();
            call("file_ticket", arguments)
        }
        "invalid_tags" => {
            let mut arguments = arguments();
            arguments["tags"] = (0..n).map(|i| json!(i)).collect();
            call("file_ticket", arguments)
        }
        "invalid_customers" => {
            let mut arguments = arguments();
            arguments["tags"] =
                (0..n).map(|i| json!({"id": i, "tier": ["gold"], "region": null, "debug": i})).collect();
            call("file_ticket", arguments)
        }
        "long_body" => {
            let mut arguments = arguments();
            arguments["body"] = json!(kib("The refund of 2024-05-02 has not reached the card; the bank says. "));
            call("file_ticket", arguments)
        }
        "tags_text" | "long_body_text" | "ghosts_text" => {
            let Input::Call(call) = input(shape.trim_end_matches("_text"), n) else { unreachable!() };
            let text = call.arguments.to_string();
            Input::CallText(agent_airlock::ToolCallText::new(call.id, call.name, text))
        }
        "long_wrong_type" => {
            let mut arguments = arguments();
            arguments["priority"] = json!(kib("22222222"));
            call("file_ticket", arguments)
        }
        "long_unknown_tool" => call(&kib("file_tickets_"), arguments()),
        "long_ghost_name" => {
            let mut arguments = arguments();
            arguments[kib("assignees_")] = json!("support");
            call("file_ticket", arguments)
        }
        "mask_text" => Input::Value(json!(kib(concat!(
            "-----BEGIN PRIVATE KEY-----gres#://token=(555) (551.2.30\":nul._0",
            "00555-0100sk-sk-sk-xoxb-555-0100sk-sk-",
            "tAtk555-0100555-0100sk-sk-sk-sk-s.-xoxb-sk-sk--100sk-sk-sk-sk-s.-xoxb-sk-sk--s-sk-sk--100",
            "user:pass@a@2x.pngtoken=",
            "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODkrLw",
            "ABC-DEFG-HIJK-LMNOP-QRST-UVWX-YZAB-CDEF-GHIJ-KLMN-OPQR-STUV-WXYZ-",
            "glpat-x xoxb- AKIA sk- ghp_ adafruit_key: hooks.slack.com/ eyJ a3- q~ sc_ token=\n",
        )))),
        "mask_records" => {
            let one = crate::hot_path::result_2k()[0].clone();
            Input::Value(
                (0..n)
                    .map(|i| {
                        let mut record = one.clone();
                        record["id"] = json!(i);
                        record
                    })
                    .collect(),
            )
        }
        "mask_wide_object" => Input::Value(
            (0..n)
                .map(|i| match i % 3 {
                    0 => (format!("password_{i}"), json!(format!("hunter{i}-correct-horse"))),
                    1 => (format!("note_{i}"), json!(format!("order {i} shipped to user{i}@example.com"))),
                    _ => (format!("count_{i}"), json!(i)),
                })
                .collect::<serde_json::Map<_, _>>()
                .into(),
        ),
        "mask_deep" => {
            let mut value = json!({"api_key": "sk-ant-api03-R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV"});
            for _ in 0..n {
                value = json!([value, "token=ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV"]);
            }
            Input::Value(value)
        }
        "json_unique_items" => {
            let big = |i: usize| json!(9_223_372_036_854_775_808_u64 + (i % 1_000) as u64);
            let objects: Vec<Value> = (0..n).map(|i| json!({"a": big(i), "b": big(i / 1_000)})).collect();
            // Item `i` is the 16 lowest bits of `i` as `[]` (0) and `[[]]` (1): every item as long at any `n`.
            let arrays: Vec<Value> = (0..n)
                .map(|i| Value::Array((0..16).map(|b| if i >> b & 1 == 1 { json!([[]]) } else { json!([]) }).collect()))
                .collect();
            Input::Call(agent_airlock::ToolCall::new("call_abc123", "sets", json!({"ys": objects, "xs": arrays})))
        }
        "json_regex_names" => {
            let sequential: String = (0..n).map(|i| format!("(?<g{i}>a)")).collect();
            let references: String = (0..n).map(|i| format!("\\k<g{i}>")).collect();
            let nested = (0..n).map(|i| format!("(?<n{i}>a")).collect::<String>() + &")".repeat(n);
            call("find", json!({"pattern": sequential + &references, "patterns": [nested]}))
        }
        "json_formats" => call(
            "formats",
            json!({
                "host": "a.".repeat(4 * n),
                "mail": format!("{}a@b.c", "a.".repeat(4 * n)),
                "link": format!("http://a/{}", "é/../".repeat(2 * n)),
                "uri": format!("http://[::1]/{}", "%41/".repeat(2 * n)),
                "idn_host": format!("{}a", "é.".repeat(4 * n)),
                "idn_punycode": format!("xn--{}", "ab-".repeat(3 * n)),
                "idn_mail": format!("\"{}\"@{}a", "é".repeat(2 * n), "xn--a.".repeat(n)),
                "template": "{a}".repeat(3 * n),
                "pointer": "/a~0".repeat(2 * n),
                "when": format!("2020-01-01T00:00:00.{}Z", "1".repeat(8 * n)),
                "span": format!("P{}D", "1".repeat(8 * n)),
                "addr": "1:".repeat(4 * n),
            }),
        ),
        other => {
            panic!(
                "unknown shape `{other}`, expected one of {:?}",
                shapes().map(|(shape, _)| shape).collect::<Vec<_>>()
            )
        }
    }
}

/// Runs `shape` once on `input`: a masking shape masks it, the others are dispatched.
pub fn run(workload: &Workload, shape: &str, input: Input) -> Value {
    #[cfg(feature = "json-tool")]
    if shape.starts_with("json_") {
        let Input::Call(call) = input else { panic!("`{shape}` is a call") };
        return Value::String(json_tool::dispatch(call).content);
    }
    let case = if shape.starts_with("mask_") { "mask_2k" } else { "allowed" };
    workload.run(case, input)
}

/// Dispatches a call of `shape`: to the JSON Schema tools' dispatcher, or the workload's.
fn dispatch(workload: &Workload, shape: &str, call: agent_airlock::ToolCall) -> agent_airlock::ToolMessage {
    #[cfg(feature = "json-tool")]
    if shape.starts_with("json_") {
        return json_tool::dispatch(call);
    }
    let _ = shape;
    workload.dispatch(call)
}

/// A dispatcher of the tools an upstream defines by their JSON Schemas: `sets`, `find` and `formats`.
#[cfg(feature = "json-tool")]
mod json_tool {
    use std::sync::OnceLock;

    use agent_airlock::json_tool::{JsonCall, JsonTool};
    use agent_airlock::{CallContext, Dispatcher, ToolCall, ToolError, ToolMessage};
    use serde_json::{Value, json};

    use crate::run_ready;

    fn dispatcher() -> &'static Dispatcher {
        static DISPATCHER: OnceLock<Dispatcher> = OnceLock::new();
        DISPATCHER.get_or_init(|| {
            let tool = |name: &str, schema: Value| {
                JsonTool::builder(name, "A tool an upstream defines.", schema)
                    .build(|_: JsonCall| async { Ok::<Value, ToolError>(json!("ok")) })
                    .expect("a valid definition")
            };
            let sets = json!({"type": "object", "properties": {
                "ys": {"type": "array", "items": {"type": "object"}, "uniqueItems": true},
                "xs": {"type": "array", "uniqueItems": true},
            }});
            // Draft 7 asserts `format` (the draft zod-to-json-schema writes, behind the TypeScript MCP SDK).
            let find = json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "format": "regex"},
                    "patterns": {"type": "array", "items": {"type": "string", "format": "regex"}},
                },
            });
            let format = |name: &str| json!({"type": "string", "format": name});
            let formats = json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "properties": {
                    "host": format("hostname"),
                    "mail": format("email"),
                    "link": format("iri-reference"),
                    "uri": format("uri"),
                    "idn_host": format("idn-hostname"),
                    "idn_punycode": format("idn-hostname"),
                    "idn_mail": format("idn-email"),
                    "template": format("uri-template"),
                    "pointer": format("json-pointer"),
                    "when": format("date-time"),
                    "span": format("duration"),
                    "addr": format("ipv6"),
                },
            });
            Dispatcher::builder()
                .tool(tool("sets", sets))
                .tool(tool("find", find))
                .tool(tool("formats", formats))
                .build()
                .expect("three tools")
        })
    }

    /// Dispatches `call` to its tool.
    pub(super) fn dispatch(call: ToolCall) -> ToolMessage {
        run_ready(dispatcher().dispatch(call, &CallContext::new())).expect_message()
    }
}

/// Checks once, at a small size, that each shape does what its name says, so a count never measures a broken
/// case (a refusal where the call should run, masking that found nothing).
pub fn check(workload: &Workload) {
    for (shape, _) in shapes() {
        let message = match input(shape, 4) {
            Input::Call(call) => dispatch(workload, shape, call),
            Input::CallText(call) => workload.dispatch(call),
            _ => continue,
        };
        let allowed = matches!(
            shape,
            "ghosts"
                | "tags"
                | "long_body"
                | "long_ghost_name"
                | "json_unique_items"
                | "json_regex_names"
                | "tags_text"
                | "long_body_text"
                | "ghosts_text"
        );
        assert_eq!(message.status == agent_airlock::Status::Success, allowed, "{shape}: {message:?}");
        assert!(message.content.len() < 8 * 1024, "{shape}: a {}-byte message", message.content.len());
    }
    for (shape, secret) in [
        ("mask_text", "0100sk-sk-sk-xoxb-555-0100sk"),
        ("mask_records", "AKIA4HK2Q7ZLMX9RT3WB"),
        ("mask_wide_object", "hunter0-correct-horse"),
        ("mask_deep", "ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV"),
    ] {
        let Input::Value(value) = input(shape, 4) else { unreachable!() };
        let before = value.to_string();
        let masked = run(workload, shape, Input::Value(value)).to_string();
        assert_ne!(masked, before, "{shape}: nothing masked");
        assert!(before.contains(secret) && !masked.contains(secret), "{shape}: `{secret}` left in {masked:.200}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shape, at a small size, does what its name says (the harness checks so before it counts).
    #[test]
    fn every_shape_does_what_its_name_says() {
        check(&Workload::new());
    }
}
